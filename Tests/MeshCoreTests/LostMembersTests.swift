import MeshCore
import MeshCrypto
import Testing

@Suite("Lost members")
struct LostMembersTests {
    static func id(_ low: UInt64) -> NodeID { NodeID(high: 0, low: low) }
    static func address(_ last: Int) throws -> PeerAddress { try PeerAddress(parsing: "192.0.2.\(last):7946") }

    @Test("each lost member is asked at waits that double up to the maximum, the longest due first")
    func asksBackOff() throws {
        var lost = LostMembers()
        let start = MeshInstant.zero
        lost.add(Self.id(1), addresses: [try Self.address(1)], now: start, firstWait: .seconds(5))
        lost.add(Self.id(2), addresses: [try Self.address(2)], now: start + .seconds(1), firstWait: .seconds(5))
        func due(at seconds: Int, count: Int = 8) -> [NodeID] {
            lost.takeDue(
                count: count, now: start + .seconds(seconds), retention: .seconds(3600), maximumWait: .seconds(30)
            )
            .map(\.id)
        }
        #expect(due(at: 4).isEmpty)
        #expect(due(at: 6, count: 1) == [Self.id(1)], "one asked, the one due longest")
        #expect(due(at: 6) == [Self.id(2)])
        // Waits after an ask: 10, 20, 30, 30 s.
        #expect(due(at: 15).isEmpty)
        #expect(due(at: 16) == [Self.id(1), Self.id(2)])
        #expect(due(at: 35).isEmpty)
        #expect(due(at: 36) == [Self.id(1), Self.id(2)])
        #expect(due(at: 65).isEmpty)
        #expect(due(at: 66) == [Self.id(1), Self.id(2)])
        #expect(due(at: 96) == [Self.id(1), Self.id(2)])
    }

    @Test("a member lost longer than the retention is dropped; one removed or found is no longer lost")
    func retentionAndRemoval() throws {
        var lost = LostMembers()
        lost.add(Self.id(1), addresses: [try Self.address(1)], now: .zero, firstWait: .seconds(5))
        lost.add(Self.id(2), addresses: [try Self.address(2)], now: .zero, firstWait: .seconds(5))
        lost.add(Self.id(3), addresses: [], now: .zero, firstWait: .seconds(5))
        #expect(lost[Self.id(3)] == nil, "nowhere to ask: not kept")
        lost.remove(Self.id(2))
        let late = lost.takeDue(
            count: 8, now: .zero + .seconds(3601), retention: .seconds(3600), maximumWait: .seconds(30))
        #expect(late.isEmpty)
        #expect(lost.isEmpty)
    }

    @Test("at most `capacity` members, the longest lost dropped first; a member's first addresses only")
    func bounded() throws {
        var lost = LostMembers()
        let addresses = try (1...10).map { try Self.address($0) }
        for index in 0..<(LostMembers.capacity + 3) {
            lost.add(
                Self.id(UInt64(index)), addresses: addresses, now: .zero + .seconds(index), firstWait: .seconds(5))
        }
        #expect(lost.entries.count == LostMembers.capacity)
        #expect((0..<3).allSatisfy { lost[Self.id(UInt64($0))] == nil })
        #expect(lost[Self.id(3)]?.addresses == Array(addresses.prefix(LostMembers.addressesKept)))
    }

    @Test("a member restored with its age counts it, even on a clock that started again after a reboot")
    func restoredAgeCounts() throws {
        var lost = LostMembers()
        let id = NodeID(high: 1, low: 2)
        let address = PeerAddress(ipv4: [10, 0, 0, 9], port: 7946)
        // Just after a reboot: this boot's clock reads one second; the member was lost 20 h ago.
        let boot = MeshInstant(nanoseconds: 1_000_000_000)
        lost.add(id, addresses: [address], now: boot, firstWait: .seconds(5), age: .seconds(20 * 3600))
        let entry = try #require(lost[id])
        #expect(entry.age(at: boot + .seconds(10)) == .seconds(20 * 3600 + 10))
        let retention = Duration.seconds(24 * 3600)
        #expect(
            lost.takeDue(count: 1, now: boot + .seconds(3 * 3600), retention: retention, maximumWait: .seconds(30))
                .count == 1)
        _ = lost.takeDue(count: 1, now: boot + .seconds(4 * 3600 + 1), retention: retention, maximumWait: .seconds(30))
        #expect(lost.isEmpty, "looked for past its day")
    }
}
