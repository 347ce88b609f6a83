import Foundation
import MeshCore
import MeshTestKit

/// The home lines, in the seeded simulator: a joiner behind a home line (a rate with a
/// 100 ms tail-drop queue, a round trip, random loss) fetches an attachment from three holders
/// outside, while a flow that follows TCP's rules (`TCPSender`, CUBIC) downloads through the
/// same line. Each line is run twice: as background replication (nobody waits: it must yield,
/// the competitor keeps ≥ 80%) and as a `get` (someone waits: it competes, and the competitor
/// keeps its fair share: ≥ 40%, or 0.8× what it gets alone where random loss holds it under
/// half the line). Beside each: the queue's drops and the holders' bytes ÷ the file. Last, a
/// `get` alone on the first line with and without 1% random loss: loss must not collapse it.
enum HomeLinkScenario {
    typealias Line = HomeLineExperiment.Line
    typealias Mode = HomeLineExperiment.Mode

    static let lines = [
        Line(name: "50 Mbit/s, 40 ms RTT", megabitsPerSecond: 50, roundTrip: .milliseconds(40), loss: 0),
        Line(name: "10 Mbit/s, 80 ms RTT, 0.5% loss", megabitsPerSecond: 10, roundTrip: .milliseconds(80), loss: 0.005),
    ]

    static func run(quick: Bool) -> [BenchResult] {
        let size = quick ? 4 << 20 : 16 << 20
        // HOMELINK_SEED=n: another seed than 1 (to see whether a figure is the seed's).
        let seed = ProcessInfo.processInfo.environment["HOMELINK_SEED"].flatMap { UInt64($0) } ?? 1
        var results: [BenchResult] = []
        if let custom = customLine() {
            let environment = ProcessInfo.processInfo.environment
            let mode = environment["HOMELINK_MODE"].flatMap(Mode.init(rawValue:)) ?? .get
            let outcome = HomeLineExperiment.run(
                size: custom.size, line: custom.line, mode: mode,
                competitor: environment["HOMELINK_COMPETITOR"] != nil, seed: seed,
                trace: tracer())
            let alone = outcome.competitorRate > 0 ? HomeLineExperiment.competitorAlone(custom.line, seed: seed) : 0
            print(
                "custom \(custom.line.name), \(mode): finished \(outcome.finished), competitor \(outcome.competitorRate / custom.line.bytesPerSecond * 100)% (alone \(alone / custom.line.bytesPerSecond * 100)%), fetch \(outcome.fetchRate / 1_048_576) MiB/s from the joiner's start, \((outcome.loadRate ?? 0) / 1_048_576) from the load, drops \(outcome.dropShare * 100)%, holders \(outcome.holderBytesPerFileByte)×, line's queue median \(outcome.queueMedian.milliseconds) ms, p90 \(outcome.queueP90.milliseconds) ms"
            )
            return []
        }
        for line in lines {
            let alone = HomeLineExperiment.competitorAlone(line, seed: seed)
            let lineRate = line.megabitsPerSecond * 1_000_000 / 8
            for mode in [Mode.replication, .get] {
                let outcome = HomeLineExperiment.run(
                    size: size, line: line, mode: mode, competitor: true, seed: seed,
                    trace: tracer())
                if !outcome.finished {
                    print("warning: \(line.name), \(mode): the joiner did not finish; its rate is a bound")
                }
                let prefix = "sim home line \(line.name), \(mode.rawValue) beside TCP: "
                let share = competitorShareGoal(replication: mode == .replication, aloneShare: alone / lineRate).text
                results += [
                    BenchResult(
                        scenario: prefix + "fetch rate", figure: outcome.fetchRate / 1_048_576, unit: "MiB/s",
                        baselineName: "the line's rate", baseline: lineRate / 1_048_576, goal: "-"),
                    BenchResult(
                        scenario: prefix + "TCP competitor's share", figure: outcome.competitorRate / lineRate * 100,
                        unit: "%", baselineName: "alone", baseline: alone / lineRate * 100, goal: share),
                    BenchResult(
                        scenario: prefix + "datagrams dropped at the queue", figure: outcome.dropShare * 100,
                        unit: "%", baselineName: "none", baseline: 0, goal: "≤ 2%"),
                    BenchResult(
                        scenario: prefix + "holders' bytes ÷ file", figure: outcome.holderBytesPerFileByte,
                        unit: "×", baselineName: "every byte once", baseline: 1, goal: "≤ 1.1×"),
                ]
            }
        }
        // Alone on the long, lossy line: slow start's doublings meet the queue a round trip
        // late.
        let long = lines[1]
        let longAlone = HomeLineExperiment.run(size: size, line: long, mode: .get, competitor: false, seed: seed)
        results += [
            BenchResult(
                scenario: "sim home line \(long.name), get alone: fetch rate", figure: longAlone.fetchRate / 1_048_576,
                unit: "MiB/s", baselineName: "the line's rate", baseline: long.bytesPerSecond / 1_048_576,
                goal: "-"),
            BenchResult(
                scenario: "sim home line \(long.name), get alone: datagrams dropped at the queue",
                figure: longAlone.dropShare * 100, unit: "%", baselineName: "none", baseline: 0, goal: "≤ 2%"),
        ]
        var clean = lines[0]
        let lossless = HomeLineExperiment.run(size: size, line: clean, mode: .get, competitor: false, seed: seed)
        clean.loss = 0.01
        let lossy = HomeLineExperiment.run(size: size, line: clean, mode: .get, competitor: false, seed: seed)
        results += [
            BenchResult(
                scenario: "sim home line \(clean.name), get alone: fetch rate at 1% random loss",
                figure: lossy.fetchRate / 1_048_576, unit: "MiB/s", baselineName: "no loss",
                baseline: lossless.fetchRate / 1_048_576, goal: "≥ 0.8×"),
            BenchResult(
                scenario: "sim home line \(clean.name), get alone: datagrams dropped at the queue",
                figure: lossless.dropShare * 100, unit: "%", baselineName: "none", baseline: 0, goal: "≤ 2%"),
            BenchResult(
                scenario: "sim home line \(clean.name), get alone: holders' bytes ÷ file at 1% random loss",
                figure: lossy.holderBytesPerFileByte, unit: "×", baselineName: "every byte once", baseline: 1,
                goal: "≤ 1.1×"),
        ]
        return results
    }

    /// HOMELINK_LINE=mbit,rtt-ms,loss,MiB: one `get` alone through that line, for tuning
    /// (HOMELINK_MODE=replication, HOMELINK_COMPETITOR=1 beside a TCP download). The loss is a
    /// fraction of packets: 0.005 is 0.5%.
    private static func customLine() -> (line: Line, size: Int)? {
        guard let text = ProcessInfo.processInfo.environment["HOMELINK_LINE"] else { return nil }
        let fields = text.split(separator: ",").compactMap { Double($0) }
        guard fields.count == 4, fields[0] > 0, fields[1] >= 0, fields[3] >= 1 else {
            print("HOMELINK_LINE=\(text) is not mbit,rtt-ms,loss,MiB (e.g. 50,40,0.01,16); running the standard lines")
            return nil
        }
        // 0.5 would drop half the packets: almost surely a percent meant as one.
        guard (0..<0.2).contains(fields[2]) else {
            print(
                "HOMELINK_LINE: loss \(fields[2]) is a fraction of packets (0.005 is 0.5%), under 0.2; running the standard lines"
            )
            return nil
        }
        return (
            Line(name: text, megabitsPerSecond: fields[0], roundTrip: .milliseconds(Int(fields[1])), loss: fields[2]),
            Int(fields[3]) << 20
        )
    }

    /// The joiner's chunks in flight and its limit (per holder: in flight/window); what each
    /// holder has queued for it.
    private static func windows(_ joiner: SimNode, _ holders: [SimNode]) -> String {
        let inFlight = joiner.core.transfer.inFlightByPeer.values.reduce(0, +)
        let queued = holders.map { "\($0.core.pacer.queuedBytes(for: joiner.id) >> 10)K" }.joined(separator: ",")
        let windows = holders.map { holder in
            joiner.core.transfer.window(of: holder.id).map { "\($0.inFlight)/\($0.window)" } ?? "-"
        }.joined(separator: ",")
        return " inFlight=\(inFlight)/\(joiner.core.transfer.inFlightLimit ?? 0) (\(windows)) queued=" + queued
    }

    /// HOMELINK_TRACE: the joiner's controller per interval, for tuning.
    private static func tracer() -> ((Simulator, SimNode, TCPSender, [SimNode]) -> Void)? {
        guard ProcessInfo.processInfo.environment["HOMELINK_TRACE"] != nil else { return nil }
        var last = MeshInstant.zero
        // The line's queue, the highest of the 10 ms samples since the last line printed.
        var lineQueue = Duration.zero
        return { sim, joiner, tcp, holders in
            let d = joiner.core.downlink
            lineQueue = max(lineQueue, sim.downlinkQueueDelay(of: joiner.address) ?? .zero)
            guard d.lastInterval.closedAt > last else { return }
            last = d.lastInterval.closedAt
            defer { lineQueue = .zero }
            let link = sim.bottleneckStatistics(of: joiner.address).downlink ?? .init()
            let mode =
                d.isSlowingDown
                ? "slowdown" : d.isProbing ? "probe" : d.slowStart ? "slow start" : d.competing ? "competing" : "delay"
            print(
                "t=\(sim.now) rate=\(Int(d.rate) >> 10)K delivered=\(Int(d.lastInterval.delivered) >> 10)K"
                    + " lost=\(d.lastInterval.lost)/\(d.lastInterval.received) queue=\(d.queueingDelay) target=\(Int(d.target.milliseconds)) \(mode)"
                    + " probeGain=\(d.lastProbeGain.map { String(format: "%.3f", $0) } ?? "-")"
                    + " line queue≤\(Int(lineQueue.milliseconds)) ms drops=\(link.dropped) tcp cwnd=\(Int(tcp.congestionWindow))"
                    + " served=\(holders.map(\.core.counters.chunkPayloadBytesSent).reduce(0, +) >> 10)K"
                    + " fetched=\(joiner.core.counters.chunkPayloadBytesFetched >> 10)K"
                    + " pace="
                    + holders.map { "\(($0.core.pacer.rate(for: joiner.id) ?? 0) >> 10)K" }.joined(separator: ",")
                    + windows(joiner, holders))
        }
    }
}
