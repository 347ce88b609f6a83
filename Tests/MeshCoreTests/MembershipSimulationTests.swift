import Foundation
import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The membership protocol on the seeded simulated network. Every test names its seed in
/// failure messages; `SIM_SEED=N swift test --filter …` replays one run exactly.
@Suite("Membership in simulation")
struct MembershipSimulationTests {
    static let lossy = LinkConditions(
        delay: .milliseconds(1), jitter: .milliseconds(2), lossProbability: 0.1,
        duplicationProbability: 0.02, reorderProbability: 0.05,
        corruptionProbability: 0.01, mtu: 1200)

    @Test("200 nodes joining one by one converge to one view", arguments: SimulationSeeds.from(defaultCount: 2))
    func twoHundredConverge(seed: UInt64) {
        let cluster = MembershipCluster.joining(count: 200, seed: seed)
        let outcome = cluster.simulator.run(for: .seconds(60), checkEvery: .milliseconds(500)) { _ in
            cluster.agrees(alive: cluster.nodes)
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed)) at \(cluster.simulator.now)")
        #expect(cluster.deathsDeclared(of: cluster.nodes).isEmpty, "\(SimulationSeeds.replay(seed))")
        // Every datagram fits the 1200-byte limit (1118 bytes of frames + the envelope).
        #expect(cluster.nodes.allSatisfy { cluster.process($0).largestDatagram <= 1118 + 24 })
    }

    @Test(
        "a killed node is dead everywhere within the bound derived from the settings",
        arguments: SimulationSeeds.from())
    func killedNodeIsDead(seed: UInt64) {
        let count = 50
        let cluster = MembershipCluster.converged(count: count, seed: seed)
        cluster.simulator.run(for: .seconds(5))
        let victim = cluster.nodes[Int(seed % UInt64(count))]
        cluster.simulator.crash(victim)
        let crashedAt = cluster.simulator.now
        let bound = cluster.settings.deadDetectionBound(memberCount: count)
        let survivors = cluster.nodes.filter { $0 != victim }
        let outcome = cluster.simulator.run(for: bound, checkEvery: .milliseconds(100)) { _ in
            cluster.agrees(alive: survivors, gone: [victim])
                && survivors.allSatisfy { cluster.status(of: victim, seenBy: $0) == .dead }
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed)): bound \(bound)")
        let took = cluster.simulator.now - crashedAt
        #expect(took <= bound, "\(SimulationSeeds.replay(seed)): took \(took)")
        #expect(cluster.deathsDeclared(of: survivors).isEmpty, "\(SimulationSeeds.replay(seed))")
    }

    @Test(
        "with 10% loss, duplication, reordering and corruption no live node is ever declared dead",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func noFalseDeathsUnderLoss(seed: UInt64) {
        let cluster = MembershipCluster.converged(count: 60, seed: seed, link: Self.lossy)
        cluster.simulator.run(for: .seconds(180))
        let deaths = cluster.deathsDeclared(of: cluster.nodes)
        #expect(
            deaths.isEmpty,
            "\(SimulationSeeds.replay(seed)): \(deaths.count) false deaths, first at \(deaths.first.map { "\($0.time)" } ?? "-")"
        )
        // A suspicion may be in flight when the run stops; nobody may be dead or left.
        let gone = cluster.nodes.flatMap { observer in
            cluster.nodes.filter { cluster.status(of: $0, seenBy: observer)?.isGone ?? true }
        }
        #expect(gone.isEmpty, "\(SimulationSeeds.replay(seed)): \(gone)")
        #expect(cluster.simulator.statistics.dropped.loss > 0, "the run did lose datagrams")
    }

    @Test("a partition that heals reconverges: nobody stays dead", arguments: SimulationSeeds.from(defaultCount: 3))
    func partitionHeals(seed: UInt64) {
        let cluster = MembershipCluster.converged(count: 20, seed: seed)
        let left = Array(cluster.nodes.prefix(10)), right = Array(cluster.nodes.suffix(10))
        cluster.simulator.run(for: .seconds(2))
        cluster.simulator.partition([left, right])
        cluster.simulator.run(for: .seconds(30))
        // Each side has declared the other dead.
        #expect(cluster.status(of: right[0], seenBy: left[0]) == .dead, "\(SimulationSeeds.replay(seed))")
        cluster.simulator.heal()
        let outcome = cluster.simulator.run(for: .seconds(60), checkEvery: .milliseconds(500)) { _ in
            cluster.agrees(alive: cluster.nodes)
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed)): not reconverged at \(cluster.simulator.now)")
    }

    @Test("messages per node per probe period stay flat as N grows")
    func constantMessagesPerNode() {
        var rates: [Int: Double] = [:]
        for count in [10, 100, 300] {
            let cluster = MembershipCluster.converged(count: count, seed: 7)
            cluster.simulator.run(for: .seconds(5))
            cluster.simulator.resetStatistics()
            let window = Duration.seconds(60)
            cluster.simulator.run(for: window)
            let periods = Double(window.nanosecondsClamped) / Double(cluster.settings.probeInterval.nanosecondsClamped)
            rates[count] = Double(cluster.simulator.statistics.sent) / Double(count) / periods
        }
        let small = rates[10]!, large = rates[300]!
        #expect(large < small * 1.5, "datagrams per node per period: \(rates)")
        #expect(large < 8, "datagrams per node per period: \(rates)")
    }

    @Test("an update reaches all N nodes within c·log N gossip rounds", arguments: [10, 100, 500, 2000])
    func disseminationIsLogarithmic(count: Int) {
        let cluster = MembershipCluster.converged(count: count, seed: UInt64(count))
        cluster.simulator.run(for: .seconds(2))
        // A node refutes a (made-up) suspicion: its new incarnation is the update to spread.
        let source = cluster.nodes[0]
        let sourceID = cluster.id(of: source)
        cluster.simulator.inject(
            Self.suspicionDatagram(of: sourceID, from: cluster.id(of: cluster.nodes[1])),
            from: cluster.nodes[1], to: source)
        let start = cluster.simulator.now
        let outcome = cluster.simulator.run(for: .seconds(30), checkEvery: .milliseconds(50)) { _ in
            cluster.nodes.allSatisfy { cluster.process($0).instance.member(sourceID)?.incarnation ?? 0 >= 1 }
        }
        #expect(outcome == .satisfied)
        let rounds =
            Double((cluster.simulator.now - start).nanosecondsClamped)
            / Double(cluster.settings.gossipInterval.nanosecondsClamped)
        let bound = 3 * log2(Double(count)) + 2
        #expect(rounds <= bound, "N=\(count): \(rounds) rounds, bound \(bound)")
    }

    @Test(
        "40 nodes joining through one member 20 ms apart: news spreads at once, all see all within 0.3 s of the last join, at a bounded cost",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func joinsSpreadAtOnce(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        func converge(news spacing: Duration?) -> (seconds: Double, bytesPerNode: Double) {
            var settings = MembershipSettings.lan
            settings.newsGossipSpacing = spacing
            let count = 40
            let cluster = MembershipCluster(
                seed: seed, settings: settings, link: LinkConditions(delay: .microseconds(200)))
            var nodes: [SimAddress] = []
            for index in 0..<count {
                let start = MeshInstant.zero + .milliseconds(Int64(20 * index))
                let process = MembershipProcess.make(
                    at: SimAddress(index), settings: settings,
                    seed: seed &* 1_000_003 &+ UInt64(index),
                    seeds: index == 0 ? [] : [SimAddress(0)], now: start)
                nodes.append(cluster.simulator.addNode(process, startingAt: start))
            }
            let lastJoin = MeshInstant.zero + .milliseconds(Int64(20 * (count - 1)))
            cluster.simulator.run(until: lastJoin)
            cluster.simulator.run(for: .seconds(20), checkEvery: .milliseconds(5)) { _ in cluster.agrees(alive: nodes) }
            let seconds = Double((cluster.simulator.now - lastJoin).nanosecondsClamped) / 1e9
            // Costs over the same window for both: the joins and the seconds after.
            cluster.simulator.run(until: max(cluster.simulator.now, lastJoin + .seconds(3)))
            return (seconds, Double(cluster.simulator.statistics.bytesSent) / Double(count))
        }
        let fast = converge(news: MembershipSettings.lan.newsGossipSpacing)
        let regular = converge(news: nil)
        #expect(fast.seconds <= 0.3, "\(replay): all saw all alive \(fast.seconds) s after the last join")
        #expect(
            fast.seconds < regular.seconds, "\(replay): \(fast.seconds) s with news first, \(regular.seconds) s without"
        )
        // The same number of transmissions per update, sooner (in datagrams less full).
        #expect(
            fast.bytesPerNode < regular.bytesPerNode * 1.3,
            "\(replay): \(fast.bytesPerNode) bytes per node, \(regular.bytesPerNode) without news first")
    }

    /// A datagram in `MembershipProcess`'s envelope carrying one suspicion.
    static func suspicionDatagram(of member: NodeID, from accuser: NodeID) -> [UInt8] {
        MembershipProcess.envelope(
            from: accuser, frames: [.suspect(Accusation(member: member, incarnation: 0, accuser: accuser))])
    }
}
