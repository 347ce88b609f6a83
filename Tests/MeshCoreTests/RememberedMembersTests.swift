import Foundation
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

    @Test("members that left or were forgotten are kept as former members, by name, the latest first, at most 64")
    func formerMembers() throws {
        var remembered = RememberedMembers()
        let members = try (0..<4).map { try Self.member($0, status: .alive) }
        remembered.merge(members)
        remembered.forget(members[0].id)
        remembered.merge([try Self.member(1, status: .left)])
        #expect(remembered.former.map(\.id) == [members[1].id.hex, members[0].id.hex])
        // Saved again with the member still left in the view: the order stays the order they went.
        remembered.merge([try Self.member(1, status: .left)])
        #expect(remembered.former.map(\.id) == [members[1].id.hex, members[0].id.hex])
        // A removed member needs no naming: neither its leaving nor its forgetting keeps it.
        remembered.merge([try Self.member(2, status: .left)], removed: [members[2].id])
        remembered.forget(members[3].id, removed: true)
        #expect(
            remembered.former.count == 2 && !remembered.contains(members[2].id) && !remembered.contains(members[3].id))
        #expect(remembered.former.allSatisfy { $0.addresses.isEmpty && !$0.name.isEmpty })
        #expect(!remembered.contains(members[0].id) && !remembered.contains(members[1].id))
        // Back in the view: a member again, no longer former.
        remembered.merge([members[0]])
        #expect(remembered.contains(members[0].id))
        #expect(remembered.former.map(\.id) == [members[1].id.hex])
        // Written and read back; a file from before `former` reads as none.
        let decoded = try JSONDecoder().decode(RememberedMembers.self, from: JSONEncoder().encode(remembered))
        #expect(decoded == remembered)
        let old = try JSONDecoder().decode(
            RememberedMembers.self, from: Data(#"{"incarnation": 3, "members": []}"#.utf8))
        #expect(old.former.isEmpty && old.incarnation == 3)
        // Bounded: made-up members that come and go push out only the oldest.
        let many = try (10..<110).map { try Self.member($0, status: .alive) }
        remembered.merge(many)
        for member in many { remembered.forget(member.id) }
        #expect(remembered.former.count == RememberedMembers.maxFormer)
        #expect(remembered.former.first?.id == many.last?.id.hex)
    }
    @Test(
        "a member forgotten after it died keeps where it was, and a restart finds it lost; back, it is a member; gone for good, it is not looked for"
    )
    func lostMembersKeepTheirAddresses() throws {
        var remembered = RememberedMembers()
        let laptop = try Self.member(1, status: .alive)
        remembered.merge([laptop])
        remembered.forget(laptop.id, lostAt: laptop.record.addresses)
        #expect(remembered.members.isEmpty)
        #expect(remembered.lost(removed: []).map(\.id) == [laptop.id])
        #expect(remembered.lost(removed: []).first?.addresses == laptop.record.addresses)
        #expect(remembered.lost(removed: [laptop.id]).isEmpty, "a removed member is not looked for")
        // Back, then gone with a departure: remembered as former, without where it was.
        remembered.merge([laptop])
        #expect(remembered.contains(laptop.id) && remembered.lost(removed: []).isEmpty)
        remembered.forget(laptop.id, lostAt: laptop.record.addresses)
        remembered.merge([try Self.member(1, status: .left)])
        #expect(remembered.lost(removed: []).isEmpty, "a member that left is still looked for")
        #expect(remembered.former.map(\.id) == [laptop.id.hex])
        // One that left outright is former without addresses too.
        let other = try Self.member(2, status: .alive)
        remembered.merge([other])
        remembered.forget(other.id)
        #expect(remembered.lost(removed: []).isEmpty)
    }

    @Test("when a member was lost is kept (Unix seconds), and a member lost past its day loses its addresses")
    func lostMembersKeepWhenTheyWereLost() throws {
        var remembered = RememberedMembers()
        let (laptop, phone) = (try Self.member(1, status: .alive), try Self.member(2, status: .alive))
        remembered.merge([laptop, phone])
        remembered.forget(laptop.id, lostAt: laptop.record.addresses, since: 1_000)
        remembered.forget(phone.id, lostAt: phone.record.addresses, since: 5_000)
        #expect(remembered.lost(removed: []).map(\.since) == [5_000, 1_000])
        let bytes = try JSONEncoder().encode(remembered)
        #expect(try JSONDecoder().decode(RememberedMembers.self, from: bytes) == remembered)
        remembered.expireLost(lostAtOrBefore: 1_000)
        #expect(remembered.lost(removed: []).map(\.id) == [phone.id], "the laptop's day is over")
        #expect(remembered.former.map(\.id).contains(laptop.id.hex), "its name is kept for remove-member")
        // A file written before the time was kept: lost, with no time.
        let old =
            #"{"incarnation":3,"members":[],"former":[{"id":"\#(laptop.id.hex)","name":"l","addresses":["10.0.0.9:7946"]}]}"#
        var decoded = try JSONDecoder().decode(RememberedMembers.self, from: Data(old.utf8))
        #expect(decoded.lost(removed: []).map(\.since) == [nil])
        decoded.dateLost(at: 9_000)
        #expect(
            decoded.lost(removed: []).map(\.since) == [9_000], "its day starts at the first start that knows the time")
    }
}
