import Foundation
import MeshCore
import MeshTestKit

/// Issue 18's home lines, in the seeded simulator: a joiner behind a home line (a rate with a
/// 100 ms tail-drop queue, a round trip, random loss) fetches an attachment from three holders
/// outside, while a flow that follows TCP's rules (`TCPSender`, CUBIC) downloads through the
/// same line. Each line is run twice: as background replication (nobody waits: it must yield,
/// the competitor keeps ≥ 80%) and as a `get` (someone waits: it competes, and the competitor
/// keeps its fair share: ≥ 40%, or 0.8× what it gets alone where random loss holds it under
/// half the line). Beside each: the queue's drops and the holders' bytes ÷ the file. Last, a
/// `get` alone on the first line with and without 1% random loss: loss must not collapse it.
enum HomeLinkScenario {
    struct Line {
        var name: String
        var megabitsPerSecond: Double
        var roundTrip: Duration
        var loss: Double
    }

    enum Mode: String { case replication, get }

    static let lines = [
        Line(name: "50 Mbit/s, 40 ms RTT", megabitsPerSecond: 50, roundTrip: .milliseconds(40), loss: 0),
        Line(name: "10 Mbit/s, 80 ms RTT, 0.5% loss", megabitsPerSecond: 10, roundTrip: .milliseconds(80), loss: 0.005),
    ]

    static func run(quick: Bool) -> [BenchResult] {
        let size = quick ? 4 << 20 : 16 << 20
        var results: [BenchResult] = []
        for line in lines {
            let alone = competitorAlone(line)
            let lineRate = line.megabitsPerSecond * 1_000_000 / 8
            for mode in [Mode.replication, .get] {
                let outcome = fetch(size: size, line: line, mode: mode, competitor: true)
                let prefix = "sim home line \(line.name), \(mode.rawValue) beside TCP: "
                let share = mode == .replication ? "≥ 80%" : (alone / lineRate < 0.5 ? "≥ 0.8× alone" : "≥ 40%")
                results += [
                    BenchResult(scenario: prefix + "fetch rate", figure: outcome.fetchRate / 1_048_576, unit: "MiB/s",
                                baselineName: "the line's rate", baseline: lineRate / 1_048_576, goal: "-"),
                    BenchResult(scenario: prefix + "TCP competitor's share", figure: outcome.competitorRate / lineRate * 100,
                                unit: "%", baselineName: "alone", baseline: alone / lineRate * 100, goal: share),
                    BenchResult(scenario: prefix + "datagrams dropped at the queue", figure: outcome.dropShare * 100,
                                unit: "%", baselineName: "none", baseline: 0, goal: "≤ 2%"),
                    BenchResult(scenario: prefix + "holders' bytes ÷ file", figure: outcome.holderBytes / Double(size),
                                unit: "×", baselineName: "every byte once", baseline: 1, goal: "≤ 1.1×"),
                ]
            }
        }
        var clean = lines[0]
        let lossless = fetch(size: size, line: clean, mode: .get, competitor: false)
        clean.loss = 0.01
        let lossy = fetch(size: size, line: clean, mode: .get, competitor: false)
        results += [
            BenchResult(scenario: "sim home line \(clean.name), get alone: fetch rate at 1% random loss",
                        figure: lossy.fetchRate / 1_048_576, unit: "MiB/s", baselineName: "no loss",
                        baseline: lossless.fetchRate / 1_048_576, goal: "≥ 0.8×"),
            BenchResult(scenario: "sim home line \(clean.name), get alone: datagrams dropped at the queue",
                        figure: lossless.dropShare * 100, unit: "%", baselineName: "none", baseline: 0, goal: "≤ 2%"),
            BenchResult(scenario: "sim home line \(clean.name), get alone: holders' bytes ÷ file at 1% random loss",
                        figure: lossy.holderBytes / Double(size), unit: "×", baselineName: "every byte once", baseline: 1,
                        goal: "≤ 1.1×"),
        ]
        return results
    }

    /// The competitor's goodput through the line with nothing else on it (after its start-up).
    private static func competitorAlone(_ line: Line) -> Double {
        let sim = Simulator(seed: 1, defaultLink: LinkConditions(delay: line.roundTrip / 2, lossProbability: line.loss))
        let receiver = sim.addNode(TCPReceiver())
        let sender = TCPSender(to: receiver, until: .zero + .seconds(40))
        sim.addNode(sender)
        sim.setBottlenecks(of: receiver, uplink: nil, downlink: Bottleneck(megabitsPerSecond: line.megabitsPerSecond,
                                                                             queue: .milliseconds(100)))
        sim.run(until: .zero + .seconds(10))
        let before = sender.bytesAcknowledged
        sim.run(until: .zero + .seconds(40))
        return Double(sender.bytesAcknowledged - before) / 30
    }

    private static func fetch(size: Int, line: Line, mode: Mode, competitor: Bool)
        -> (fetchRate: Double, competitorRate: Double, dropShare: Double, holderBytes: Double)
    {
        var configuration = SimNode.Configuration()
        configuration.settings.chunkSize = Manifest.defaultChunkSize
        let mesh = SimMesh(seed: 1, link: LinkConditions(delay: line.roundTrip / 2, lossProbability: line.loss),
                           configuration: configuration)
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let holders = [first] + (1...2).map { mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(10 * $0)) }
        // Random bytes: every chunk its own (identical chunks are stored and fetched once).
        var random = SplitMix64(seed: 18)
        let bytes = (0..<(size / 8)).flatMap { _ in withUnsafeBytes(of: random.next()) { Array($0) } }
        first.plan(at: .zero + .seconds(1)) { $0.attach(bytes) }
        let replicated = mesh.simulator.run(until: .zero + .seconds(120), checkEvery: .milliseconds(100)) { _ in
            holders.allSatisfy { !$0.complete.isEmpty }
        }
        if replicated != .satisfied { print("warning: \(line.name): the holders did not all hold the file (\(replicated))") }
        // The home: the competitor's receiver and, 10 s later, the joiner, behind one line.
        let start = mesh.simulator.now
        let renoReceiver = mesh.simulator.addNode(TCPReceiver())
        let reno = TCPSender(to: renoReceiver, until: competitor ? start + .seconds(300) : start)
        mesh.simulator.addNode(reno)
        var joining = configuration
        joining.settings.lazy = mode == .get
        let joiner = mesh.addNode(joiningThrough: [first.address], at: start + .seconds(10), configuration: joining)
        if mode == .get, let id = first.core.attachments.first?.content {
            joiner.plan(at: start + .seconds(10) + .milliseconds(500)) { $0.load(id) }
        }
        mesh.simulator.addAccessLink(for: [renoReceiver, joiner.address], uplink: nil,
                                     downlink: Bottleneck(megabitsPerSecond: line.megabitsPerSecond, queue: .milliseconds(100)))
        mesh.simulator.run(until: start + .seconds(10))
        let renoBefore = reno.bytesAcknowledged
        let linkBefore = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let servedBefore = holders.map(\.core.counters.chunkPayloadBytesSent).reduce(0, +)
        let trace = ProcessInfo.processInfo.environment["HOMELINK_TRACE"] != nil
        var lastTrace = mesh.simulator.now
        let fetched = mesh.simulator.run(until: start + .seconds(290), checkEvery: .milliseconds(trace ? 10 : 50)) { sim in
            if trace, joiner.core.downlink.lastInterval.closedAt > lastTrace {
                let i = joiner.core.downlink.lastInterval
                lastTrace = sim.now
                let d = joiner.core.downlink
                let link = sim.bottleneckStatistics(of: joiner.address).downlink ?? .init()
                print(String(format: "t=%.2f deliv=%.0fK rcv=%d lost=%d ", (sim.now - start).milliseconds / 1000, i.delivered / 1024, i.received, i.lost), terminator: "")
                print(String(format: "t=%.1f rate=%.0fK ss=%@ q=%.1fms rtt=%.1fms drops=%d fwd=%d cwnd=%.0f lossbo=%d",
                             (sim.now - start).milliseconds / 1000, d.rate / 1024, d.slowStart ? "y" : "n",
                             d.queueingDelay.milliseconds, (d.roundTrip ?? .zero).milliseconds, link.dropped, link.forwarded,
                             reno.congestionWindow, d.lossBackoffs)
                      + " pace=" + holders.map { "\(($0.core.pacer.rate(for: joiner.id) ?? -1) / 1024)K/\($0.core.pacer.queuedBytes(for: joiner.id) / 1024)K/\($0.core.counters.chunkPayloadBytesSent / 1024)K" }.joined(separator: ",")
                      + " inflight=\(joiner.core.transfer.inFlightByPeer.values.reduce(0, +)) lim=\(joiner.core.transfer.inFlightLimit ?? -1) reasks=\(joiner.core.assembler.reasks) to=\(joiner.core.transfer.timeouts)")
            }
            return !joiner.complete.isEmpty
        }
        if fetched != .satisfied { print("warning: \(line.name): the joiner did not finish (\(fetched)); its rate is a bound") }
        let seconds = (mesh.simulator.now - start - .seconds(10)).milliseconds / 1000
        let link = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let dropped = link.dropped - linkBefore.dropped
        let offered = dropped + link.forwarded - linkBefore.forwarded
        let served = holders.map(\.core.counters.chunkPayloadBytesSent).reduce(0, +) - servedBefore
        return (Double(size) / seconds, Double(reno.bytesAcknowledged - renoBefore) / seconds,
                Double(dropped) / Double(max(1, offered)), Double(served))
    }
}
