@testable import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The member table: a snapshot shared between nodes, each node's changes on top.
@Suite("member table")
struct MemberTableTests {
    static func records(_ count: Int) -> [MemberRecord] {
        (0..<count).map { index in
            MembershipProcess.make(at: SimAddress(index), settings: .lan, seed: UInt64(index + 1)).instance.me
        }
    }

    @Test("reads, writes and removals over a shared snapshot leave the snapshot's other holders as they were")
    func changesStayWithTheirTable() throws {
        let records = Self.records(5)
        let shared = MemberTable(assuming: records, now: .zero)
        var mine = shared
        let ids = records.map(\.id)
        #expect(shared.count == 5 && mine.count == 5)
        #expect(mine.activeIDs == ids.sorted())

        var changed = try #require(mine[ids[1]])
        changed.status = .dead
        mine[ids[1]] = changed
        mine[ids[2]] = nil
        mine[ids[2]] = nil  // removing twice counts once
        let newcomer = Self.records(6)[5]
        mine[newcomer.id] = Member(
            record: newcomer, status: .alive, incarnation: 0, lastChange: .zero, rtt: nil, suspicion: nil)

        #expect(mine.count == 5, "5 − 1 removed + 1 added")
        #expect(mine[ids[1]]?.status == .dead && mine[ids[2]] == nil && mine[newcomer.id] != nil)
        #expect(
            mine.activeIDs == ([ids[0], ids[3], ids[4], newcomer.id]).sorted(),
            "the dead and the removed are not active")
        #expect(mine.unsettledIDs == [ids[1]] && shared.unsettledIDs.isEmpty, "the dead member's clock runs")
        #expect(Set(mine.values.map(\.id)) == Set([ids[0], ids[1], ids[3], ids[4], newcomer.id]))
        // The other holder of the snapshot sees none of it.
        #expect(
            shared.count == 5 && shared[ids[1]]?.status == .alive && shared[ids[2]] != nil && shared[newcomer.id] == nil
        )
        // Back to what the snapshot says: the entry is a change no more, and reads the same.
        mine[ids[2]] = shared[ids[2]]
        #expect(mine[ids[2]] == shared[ids[2]] && mine.count == 6)
    }

    @Test("a table that starts empty folds its changes into snapshots of its own, and reads the same throughout")
    func foldingKeepsEveryEntry() {
        let records = Self.records(300)
        var table = MemberTable()
        var expected: [NodeID: Member] = [:]
        var random = SplitMix64(seed: 11)
        for step in 0..<2_000 {
            let record = records[Int(random.next() % 300)]
            if random.next() % 4 == 0 {
                table[record.id] = nil
                expected[record.id] = nil
            } else {
                let member = Member(
                    record: record, status: step % 7 == 0 ? .dead : .alive, incarnation: UInt64(step),
                    lastChange: .zero, rtt: nil, suspicion: nil)
                table[record.id] = member
                expected[record.id] = member
            }
            #expect(table.count == expected.count, "step \(step)")
        }
        for record in records { #expect(table[record.id] == expected[record.id]) }
        #expect(table.activeIDs == expected.values.filter { !$0.status.isGone }.map(\.id).sorted())
        #expect(table.unsettledIDs == expected.values.filter { $0.status != .alive }.map(\.id).sorted())
        #expect(Set(table.values.map(\.id)) == Set(expected.keys))
    }

    @Test("nodes that assume one shared view each leave themselves out and probe everyone else")
    func assumingASharedView() throws {
        let cluster = MembershipCluster.converged(count: 50, seed: 4)
        for node in cluster.nodes {
            let instance = cluster.process(node).instance
            #expect(instance.member(instance.localID)?.status == .alive, "itself, as `member` reports it")
            #expect(instance.view.count == 50 && instance.activeCount == 50)
            #expect(Set(instance.view.map(\.id)).count == 50)
        }
        cluster.simulator.run(for: .seconds(60))
        // Every node probed: each saw a round trip to some member, and nobody was suspected.
        #expect(
            cluster.nodes.allSatisfy {
                !cluster.process($0).instance.counters.roundTrips.samples(after: 0).samples.isEmpty
            })
        #expect(cluster.nodes.allSatisfy { cluster.process($0).instance.counters.suspicionsRaised == 0 })
    }
}
