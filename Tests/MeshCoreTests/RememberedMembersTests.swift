import MeshCore
import MeshCrypto
import Testing

@Suite("remembered members")
struct RememberedMembersTests {
    static func member(_ index: Int, status: MemberStatus) throws -> Member {
        let identity = try NodeIdentity(
            seed: [UInt8(index & 0xFF), UInt8(index >> 8)] + [UInt8](repeating: 7, count: 30))
        let record = ManualCluster.record(identity, index: index % 100)
        return Member(record: record, status: status, incarnation: 0, lastChange: MeshInstant.zero)
    }

    @Test("made-up members declared dead by the hundred: the file keeps at most 256, every live member among them")
    func deadMembersAreBounded() throws {
        var remembered = RememberedMembers()
        // Earlier rounds, known only to the file by now.
        remembered.merge(try (0..<200).map { try Self.member($0, status: .dead) })
        let live = try (200..<210).map { try Self.member($0, status: .alive) }
        let dead = try (210..<400).map { try Self.member($0, status: .dead) }
        remembered.merge(live + dead)
        #expect(remembered.members.count == RememberedMembers.maxEntries)
        #expect(live.allSatisfy { remembered.contains($0.id) }, "a live member was dropped")
        #expect(dead.allSatisfy { remembered.contains($0.id) }, "the view's dead come before what only the file knew")
        // A member that left is dropped, as before.
        remembered.merge([try Self.member(200, status: .left)])
        #expect(!remembered.contains(live[0].id))
    }
}
