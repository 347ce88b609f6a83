import Foundation
import MeshCore
import MeshTestKit

/// Membership in the simulator (issue 3): how many gossip rounds an update needs to reach all N
/// nodes, beside the epidemic ideal log_(fanout+1) N, and datagrams per node per probe period in
/// steady state, beside the N = 10 figure.
enum MembershipScenario {
    static func run(quick: Bool) -> [BenchResult] {
        let sizes = quick ? [10, 100] : [10, 100, 1000]
        var results: [BenchResult] = []
        var smallRate: Double?
        for count in sizes {
            let settings = MembershipSettings.lan
            // Each figure is the median over a few seeds.
            let seeds: [UInt64] = quick ? [1] : [1, 2, 3]
            var rounds: [Double] = []
            var rates: [Double] = []
            for seed in seeds {
                let cluster = MembershipCluster.converged(count: count, seed: seed, settings: settings)
                cluster.simulator.run(for: .seconds(3))
                cluster.simulator.resetStatistics()
                let window = Duration.seconds(quick ? 10 : 60)
                cluster.simulator.run(for: window)
                let periods = Double(window.nanosecondsClamped) / Double(settings.probeInterval.nanosecondsClamped)
                rates.append(Double(cluster.simulator.statistics.sent) / Double(count) / periods)

                let source = cluster.nodes[0], accuser = cluster.nodes[1]
                let sourceID = cluster.id(of: source)
                let datagram = MembershipProcess.envelope(
                    from: cluster.id(of: accuser),
                    frames: [.suspect(Accusation(member: sourceID, incarnation: cluster.process(source).instance.me.incarnation,
                                                 accuser: cluster.id(of: accuser)))])
                cluster.simulator.inject(datagram, from: accuser, to: source)
                let start = cluster.simulator.now
                let target = cluster.process(source).instance.me.incarnation + 1
                cluster.simulator.run(for: .seconds(30), checkEvery: .milliseconds(20)) { _ in
                    cluster.nodes.allSatisfy { (cluster.process($0).instance.member(sourceID)?.incarnation ?? 0) >= target }
                }
                rounds.append(Double((cluster.simulator.now - start).nanosecondsClamped)
                              / Double(settings.gossipInterval.nanosecondsClamped))
            }
            let medianRounds = median(rounds)
            let rate = median(rates)
            let ideal = log(Double(count)) / log(Double(settings.gossipFanout + 1))
            results.append(BenchResult(scenario: "sim N=\(count): rounds to reach all", figure: medianRounds,
                                       unit: "rounds", baselineName: "log_\(settings.gossipFanout + 1) N",
                                       baseline: ideal, goal: "O(log N)"))
            let baseline = smallRate ?? rate
            if smallRate == nil { smallRate = rate }
            results.append(BenchResult(scenario: "sim N=\(count): datagrams/node/period", figure: rate,
                                       unit: "datagrams", baselineName: "N=10", baseline: baseline,
                                       goal: "flat in N"))
        }
        return results
    }
}
