@testable import GroupMesh
import MeshCore
import MeshCrypto
import Testing

/// The one line a removal made in several rotations ends with when it stops part way.
@Suite struct RemovalErrorTests {
    @Test("a removal cut short names whom it removed and who is left, and never says that nothing changed")
    func cutShortSaysWhatStands() throws {
        let ids = try (1...5).map { try NodeIdentity(seed: [UInt8](repeating: $0, count: 32)).nodeID }
        let names = ["bob", "carol", "dave", "erin", "frank"]
        func name(_ id: NodeID) -> String { names[ids.firstIndex(of: id) ?? 0] }
        let stored = GroupMeshError(
            NodeError.removalCutShort(
                ids[0], removed: Array(ids[0..<3]), left: Array(ids[3...]),
                because: .epochNotStored(.failed("disk full"))),
            names: name)
        #expect(
            stored.description
                == "removed 3 members (bob, carol, dave), but not 2 members (erin, frank) that bob introduced: "
                + "\(GroupMeshError.store("cannot store the next key epoch: disk full").description); remove them by name",
            "\(stored)")
        #expect(!stored.description.contains("nothing changed"))
        let stopped = GroupMeshError(
            NodeError.removalCutShort(ids[0], removed: [ids[0]], left: [ids[1]], because: .stopped), names: name)
        #expect(
            stopped.description.hasPrefix(
                "removed 1 member (bob), but not 1 member (carol) that bob introduced: the node is not running"),
            "\(stopped)")
        #expect(stopped.kind == GroupMeshError.notRunning.kind)
    }
}
