@testable import MeshCore
import MeshCrypto
import Testing

/// How a member is named on the command line (`send --to`, `ping`, `remove-member`): a full id,
/// a name, or an id prefix; this node is looked up with the others, never picked, and never
/// silently passed over for a member that shares its prefix or name.
@Suite("Naming a member")
struct MemberLookupTests {
    static func id(_ start: String) -> NodeID {
        NodeID(hex: start + String(repeating: "0", count: 32 - start.count))!
    }
    static let own = (id: id("6d4f1"), name: "kim")
    static let others = [
        (id: id("6d4f2"), name: "alex"), (id: id("a1"), name: "sam"), (id: id("b2"), name: "kim"),
        (id: id("e5"), name: "c7"),
    ]

    static func lookUp(_ text: String, own: (id: NodeID, name: String)? = own) -> Result<NodeID, MemberLookupError> {
        NodeInstance.lookUp(text, among: others, own: own, names: { String($0.hex.prefix(5)) })
    }

    @Test("another member by full id, name or unique prefix; this node alone is thisNode")
    func uniqueMatches() {
        #expect(Self.lookUp(Self.others[0].id.hex) == .success(Self.others[0].id))
        #expect(Self.lookUp("ALEX") == .failure(.unknown("ALEX")), "names are exact")
        #expect(Self.lookUp("sam") == .success(Self.others[1].id))
        #expect(Self.lookUp("A1") == .success(Self.others[1].id), "prefixes ignore case")
        #expect(Self.lookUp(Self.own.id.hex) == .failure(.thisNode(Self.own.id.hex)))
        #expect(Self.lookUp("6d4f1") == .failure(.thisNode("6d4f1")))
        #expect(Self.lookUp("ff") == .failure(.unknown("ff")))
        #expect(Self.lookUp("") == .failure(.unknown("")), "empty text names nobody")
    }

    @Test("a short name comes before an id prefix; one that reads as an id (4 hex digits) is ambiguous with it")
    func nameAgainstPrefix() {
        let others = Self.others + [(id: Self.id("c7d8e"), name: "lee"), (id: Self.id("f0"), name: "c7d8")]
        func lookUp(_ text: String) -> Result<NodeID, MemberLookupError> {
            NodeInstance.lookUp(text, among: others, own: Self.own, names: { String($0.hex.prefix(5)) })
        }
        #expect(lookUp("c7") == .success(Self.others[3].id), "the member named c7, not the id starting c7")
        #expect(lookUp("c7d8") == .failure(.ambiguous("c7d8", candidates: ["f0000", "c7d8e"])))
        #expect(lookUp("c7d8e") == .success(others[4].id))
    }

    @Test("a prefix or name this node shares with another member is ambiguous, this node named in the list")
    func sharedWithThisNode() {
        #expect(Self.lookUp("6d") == .failure(.ambiguous("6d", candidates: ["6d4f2", "this node (6d4f1)"])))
        #expect(Self.lookUp("kim") == .failure(.ambiguous("kim", candidates: ["b2000", "this node (6d4f1)"])))
        // Without this node among the candidates (members removed already), the other stands.
        #expect(Self.lookUp("6d", own: nil) == .success(Self.others[0].id))
    }
}
