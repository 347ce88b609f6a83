import Foundation
import MeshCore
import MeshTestKit

/// Issue 18's starting point, in the seeded simulator: a late joiner behind a home line (a rate
/// with a 100 ms tail-drop queue, a round trip, random loss) fetches an attachment from three
/// holders outside while a flow that follows TCP's rules (`TCPSender`) downloads through the same
/// line. Reported per line: the joiner's fetch rate; the competitor's share of the line during the
/// fetch, beside what it gets alone; the share of the line's datagrams dropped at its queue; and
/// the holders' bytes ÷ the file. Today's swarm has no congestion control: these are the figures
/// the control loop must change (≥ 40% for the competitor, ≤ 2% drops, ≤ 1.1×).
enum HomeLinkScenario {
    struct Line {
        var name: String
        var megabitsPerSecond: Double
        var roundTrip: Duration
        var loss: Double
    }

    static let lines = [
        Line(name: "50 Mbit/s, 40 ms RTT", megabitsPerSecond: 50, roundTrip: .milliseconds(40), loss: 0),
        Line(name: "10 Mbit/s, 80 ms RTT, 0.5% loss", megabitsPerSecond: 10, roundTrip: .milliseconds(80), loss: 0.005),
    ]

    static func run(quick: Bool) -> [BenchResult] {
        let size = quick ? 4 << 20 : 16 << 20
        var results: [BenchResult] = []
        for line in lines {
            let alone = competitorAlone(line)
            let outcome = fetch(size: size, line: line)
            let lineRate = line.megabitsPerSecond * 1_000_000 / 8
            let prefix = "sim home line \(line.name): "
            results += [
                BenchResult(scenario: prefix + "joiner's fetch rate", figure: outcome.fetchRate / 1_048_576, unit: "MiB/s",
                            baselineName: "the line's rate", baseline: lineRate / 1_048_576, goal: "-"),
                BenchResult(scenario: prefix + "TCP competitor's share", figure: outcome.competitorRate / lineRate * 100, unit: "%",
                            baselineName: "alone", baseline: alone / lineRate * 100, goal: "≥ 40%"),
                BenchResult(scenario: prefix + "datagrams dropped at the queue", figure: outcome.dropShare * 100, unit: "%",
                            baselineName: "none", baseline: 0, goal: "≤ 2%"),
                BenchResult(scenario: prefix + "holders' bytes ÷ file", figure: outcome.holderBytes / Double(size), unit: "×",
                            baselineName: "every byte once", baseline: 1, goal: "≤ 1.1×"),
            ]
        }
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

    private static func fetch(size: Int, line: Line)
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
        let reno = TCPSender(to: renoReceiver, until: start + .seconds(300))
        mesh.simulator.addNode(reno)
        let joiner = mesh.addNode(joiningThrough: [first.address], at: start + .seconds(10))
        mesh.simulator.addAccessLink(for: [renoReceiver, joiner.address], uplink: nil,
                                     downlink: Bottleneck(megabitsPerSecond: line.megabitsPerSecond, queue: .milliseconds(100)))
        mesh.simulator.run(until: start + .seconds(10))
        let renoBefore = reno.bytesAcknowledged
        let linkBefore = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let servedBefore = holders.map(\.core.counters.chunkPayloadBytesSent).reduce(0, +)
        let fetched = mesh.simulator.run(until: start + .seconds(290), checkEvery: .milliseconds(50)) { _ in
            !joiner.complete.isEmpty
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
