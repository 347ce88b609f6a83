import MeshCore
import MeshTestKit
import Testing

/// The bottleneck of the link model: a rate with a bounded queue, shared by every flow
/// through a node's uplink or downlink, as `tc tbf` makes one.
@Suite struct BottleneckTests {
    /// 1 Mbit/s: a 1,000-byte datagram takes 8 ms to leave.
    static let megabit = Bottleneck(bytesPerSecond: 125_000, queueBytes: 10_000)

    @Test func aFlowBelowTheRateWaitsOnlyForItsOwnBytes() {
        let sim = Simulator(seed: 1)
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        sim.addNode(SenderProcess(target: b, count: 50, interval: .milliseconds(10), size: 1000))
        sim.setBottlenecks(of: b, uplink: nil, downlink: Self.megabit)
        sim.run(for: .seconds(5))
        #expect(receiver.sequenceNumbers == Array(0..<50))
        // Sent every 10 ms, 1 ms on the wire, 8 ms to leave the queue: nothing waits behind another.
        #expect(receiver.received.enumerated().allSatisfy { $1.at == .ms(Int64($0) * 10 + 9) })
        #expect(sim.statistics.dropped.total == 0)
        #expect(sim.bottleneckStatistics(of: b).downlink?.peakQueueBytes == 1000)
    }

    @Test func aBurstFillsTheQueueAndTheRestIsDropped() {
        let sim = Simulator(seed: 2)
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        sim.addNode(SenderProcess(target: b, count: 50, interval: .zero, size: 1000))
        sim.setBottlenecks(of: b, uplink: nil, downlink: Self.megabit)
        sim.run(for: .seconds(5))
        // 10,000 bytes of queue: the first ten, each 8 ms after the one before.
        #expect(receiver.sequenceNumbers == Array(0..<10))
        #expect(receiver.received.enumerated().allSatisfy { $1.at == .ms(1 + 8 * (Int64($0) + 1)) })
        #expect(sim.statistics.dropped.queue == 40 && sim.statistics.dropped.total == 40)
        let stats = sim.bottleneckStatistics(of: b).downlink
        #expect(stats?.forwarded == 10 && stats?.dropped == 40 && stats?.peakQueueBytes == 10_000)
    }

    @Test func anUplinkPacesWhatANodeSendsToEveryone() {
        let sim = Simulator(seed: 3)
        let first = EchoProcess(echoes: false), second = EchoProcess(echoes: false)
        let a = sim.addNode(first), b = sim.addNode(second)
        final class TwoTargets: SimulatedProcess {
            let targets: [SimAddress]
            init(_ targets: [SimAddress]) { self.targets = targets }
            func start(now: MeshInstant, context: inout SimContext) {
                for index in 0..<6 { context.send(SenderProcess.payload(index, size: 1000), to: targets[index % 2]) }
            }
            func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {}
            func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {}
        }
        let sender = sim.addNode(TwoTargets([a, b]))
        sim.setBottlenecks(of: sender, uplink: Self.megabit, downlink: nil)
        sim.run(for: .seconds(1))
        // One queue for both destinations: 8, 16, … 48 ms to leave, then 1 ms on the wire.
        #expect(first.received.map(\.at) == [.ms(9), .ms(25), .ms(41)])
        #expect(second.received.map(\.at) == [.ms(17), .ms(33), .ms(49)])
        #expect(sim.bottleneckStatistics(of: sender).uplink?.forwarded == 6)
    }

    @Test func aHomesMachinesShareItsLineButNotBetweenThemselves() {
        let sim = Simulator(seed: 4)
        let first = EchoProcess(echoes: false), second = EchoProcess(echoes: false)
        let a = sim.addNode(first), b = sim.addNode(second)
        // Outside: 5 datagrams to each at once; inside: a's neighbour sends it 5 more.
        let outside = sim.addNode(SenderProcess(target: a, count: 5, interval: .zero, size: 1000))
        let outsideToB = sim.addNode(SenderProcess(target: b, count: 5, interval: .zero, size: 1000))
        let neighbour = sim.addNode(SenderProcess(target: a, count: 5, interval: .zero, size: 1000))
        sim.addAccessLink(for: [a, b, neighbour], uplink: nil, downlink: Self.megabit)
        sim.run(for: .seconds(1))
        // The neighbour's arrive after the wire's 1 ms, untouched; the ten from outside share one
        // 10,000-byte queue and leave it 8 ms apart, the last at 81 ms.
        #expect(first.received.filter { $0.from == neighbour }.map(\.at) == Array(repeating: .ms(1), count: 5))
        let fromOutside = (first.received.filter { $0.from == outside } + second.received).map(\.at).sorted()
        #expect(fromOutside == (1...10).map { .ms(1 + 8 * Int64($0)) })
        #expect(second.received.allSatisfy { $0.from == outsideToB })
        #expect(sim.bottleneckStatistics(of: b).downlink?.forwarded == 10 && sim.statistics.dropped.total == 0)
    }

    @Test(
        "two flows into one downlink share its rate, and what exceeds it is dropped at its queue",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func flowsShareADownlink(seed: UInt64) {
        let sim = Simulator(seed: seed, defaultLink: LinkConditions(delay: .milliseconds(20), jitter: .milliseconds(1)))
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        // Each 1,000 bytes every 5 ms (200 KB/s); together 400 KB/s into 125 KB/s.
        let senders = (0..<2).map { _ in
            sim.addNode(SenderProcess(target: b, count: 400, interval: .milliseconds(5), size: 1000))
        }
        sim.setBottlenecks(of: b, uplink: nil, downlink: Bottleneck(megabitsPerSecond: 1, queue: .milliseconds(100)))
        sim.run(for: .seconds(10))
        let replay = SimulationSeeds.replay(seed)
        let delivered = receiver.received.count
        // 2 s of sending at 125 datagrams/s, plus the queue's 12 left at the end.
        #expect(delivered >= 245 && delivered <= 265, "\(replay): \(delivered) delivered")
        #expect(sim.statistics.dropped.queue == 800 - delivered, "\(replay)")
        for sender in senders {
            let share = Double(receiver.received.filter { $0.from == sender }.count) / Double(delivered)
            #expect(share > 0.35, "\(replay): \(sender) got \(share) of the link")
        }
        // Never more than the queue's 100 ms behind.
        #expect((sim.bottleneckStatistics(of: b).downlink?.peakQueueBytes ?? .max) <= 12_500, "\(replay)")
    }
}
