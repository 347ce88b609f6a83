import Foundation
import MeshCore
import MeshCrypto
import MeshTestKit

/// Membership in the simulator: how many gossip rounds an update needs to reach all N
/// nodes, beside the epidemic ideal log_(fanout+1) N, and datagrams per node per probe period in
/// steady state, beside the N = 10 figure. Up to 10,000 nodes, which share one member
/// table (`MemberTable`) and hold only their changes: memory per node beside a table of its own.
enum MembershipScenario {
    static func run(quick: Bool) -> [BenchResult] {
        // BENCH_MEMBERSHIP_SIZES=2000,5000 runs other sizes.
        let sizes =
            ProcessInfo.processInfo.environment["BENCH_MEMBERSHIP_SIZES"].map {
                $0.split(separator: ",").compactMap { Int($0) }
            } ?? (quick ? [10, 100] : [10, 100, 1000, 10_000])
        var results: [BenchResult] = []
        var smallRate: Double?
        for count in sizes {
            let settings = MembershipSettings.lan
            // Each figure is the median over a few seeds (one at 10,000, whose runs are long and large).
            let large = count >= 5_000
            let seeds: [UInt64] = quick || large ? [1] : [1, 2, 3]
            var rounds: [Double] = []
            var rates: [Double] = []
            var bytesPerNode: [Double] = []
            for seed in seeds {
                let residentBefore = residentBytes()
                let cluster = MembershipCluster.converged(count: count, seed: seed, settings: settings)
                cluster.simulator.run(for: .seconds(3))
                cluster.simulator.resetStatistics()
                let window = Duration.seconds(quick || large ? 10 : 60)
                cluster.simulator.run(for: window)
                let periods = Double(window.nanosecondsClamped) / Double(settings.probeInterval.nanosecondsClamped)
                rates.append(Double(cluster.simulator.statistics.sent) / Double(count) / periods)

                let source = cluster.nodes[0], accuser = cluster.nodes[1]
                let sourceID = cluster.id(of: source)
                let datagram = MembershipProcess.envelope(
                    from: cluster.id(of: accuser),
                    frames: [
                        .suspect(
                            Accusation(
                                member: sourceID, incarnation: cluster.process(source).instance.me.incarnation,
                                accuser: cluster.id(of: accuser)))
                    ])
                cluster.simulator.inject(datagram, from: accuser, to: source)
                let start = cluster.simulator.now
                let target = cluster.process(source).instance.me.incarnation + 1
                cluster.simulator.run(for: .seconds(30), checkEvery: .milliseconds(20)) { _ in
                    cluster.nodes.allSatisfy {
                        (cluster.process($0).instance.member(sourceID)?.incarnation ?? 0) >= target
                    }
                }
                rounds.append(
                    Double((cluster.simulator.now - start).nanosecondsClamped)
                        / Double(settings.gossipInterval.nanosecondsClamped))
                // What the run holds, over its nodes: the shared view, each node's probe order and
                // what it changed, the simulator's queues.
                bytesPerNode.append(Double(residentBytes() - residentBefore) / Double(count))
            }
            let medianRounds = median(rounds)
            let rate = median(rates)
            let ideal = log(Double(count)) / log(Double(settings.gossipFanout + 1))
            results.append(
                BenchResult(
                    scenario: "sim N=\(count): rounds to reach all", figure: medianRounds,
                    unit: "rounds", baselineName: "log_\(settings.gossipFanout + 1) N",
                    baseline: ideal, goal: "O(log N)"))
            let baseline = smallRate ?? rate
            if smallRate == nil { smallRate = rate }
            results.append(
                BenchResult(
                    scenario: "sim N=\(count): datagrams/node/period", figure: rate,
                    unit: "datagrams", baselineName: "N=10", baseline: baseline,
                    goal: "flat in N"))
            // A table of its own per node holds N entries of a member and its id at least.
            let ownTable = Double(count * (MemoryLayout<Member>.stride + MemoryLayout<NodeID>.stride))
            // The largest: after the first seed, a run reuses what the last one freed.
            results.append(
                BenchResult(
                    scenario: "sim N=\(count): memory per node", figure: (bytesPerNode.max() ?? 0) / 1024,
                    unit: "KiB", baselineName: "a table of its own", baseline: ownTable / 1024,
                    goal: "fits"))
        }
        return results
    }
}

/// The process's resident memory, from /proc (0 where it cannot be read).
private func residentBytes() -> Int {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = statm.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}
