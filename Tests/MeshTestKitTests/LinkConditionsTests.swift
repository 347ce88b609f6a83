import MeshCore
import MeshTestKit
import Testing

/// Each fault of the link model does what it says, and only that.
@Suite struct LinkConditionsTests {
    /// Sends `count` numbered datagrams from a fresh sender to a fresh (non-echoing) receiver.
    static func oneWay(
        seed: UInt64, link: LinkConditions, count: Int, interval: Duration = .zero, size: Int = 16
    ) -> (sim: Simulator, receiver: EchoProcess) {
        let sim = Simulator(seed: seed, defaultLink: link)
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        sim.addNode(SenderProcess(target: b, count: count, interval: interval, size: size))
        sim.run(for: .seconds(60))
        return (sim, receiver)
    }

    @Test func defaultLinkIsOneMillisecondAndFaultFree() {
        #expect(LinkConditions.default.delay == .milliseconds(1))
        #expect(LinkConditions.default.isFaultFree)
        let (sim, receiver) = Self.oneWay(seed: 1, link: .default, count: 100, interval: .milliseconds(1))
        #expect(receiver.sequenceNumbers == Array(0..<100))
        // Sent at 0, 1, 2 … ms; each arrives exactly 1 ms later.
        #expect(receiver.received.enumerated().allSatisfy { $1.at == .ms(Int64($0) + 1) })
        #expect(sim.statistics.sent == 100 && sim.statistics.delivered == 100 && sim.statistics.dropped.total == 0)
    }

    @Test(arguments: SimulationSeeds.from())
    func lossRateMatchesConfiguration(seed: UInt64) {
        let count = 10_000
        let (sim, receiver) = Self.oneWay(seed: seed, link: LinkConditions(lossProbability: 0.2), count: count)
        let lost = Double(sim.statistics.dropped.loss) / Double(count)
        // Standard deviation of the observed rate is 0.004; ±0.025 is a > 6 sigma margin.
        #expect(abs(lost - 0.2) < 0.025, "\(SimulationSeeds.replay(seed)): loss rate \(lost)")
        #expect(receiver.received.count + sim.statistics.dropped.loss == count)
        #expect(sim.statistics.dropped.total == sim.statistics.dropped.loss)
    }

    @Test(arguments: SimulationSeeds.from())
    func duplicationDeliversExtraCopies(seed: UInt64) {
        let count = 5_000
        let (sim, receiver) = Self.oneWay(seed: seed, link: LinkConditions(duplicationProbability: 0.3), count: count)
        let stats = sim.statistics
        #expect(receiver.received.count == count + stats.duplicated)
        #expect(abs(Double(stats.duplicated) / Double(count) - 0.3) < 0.04, "\(SimulationSeeds.replay(seed))")
        // Every datagram arrived; the duplicates are exact copies of sent datagrams.
        let sequences = receiver.sequenceNumbers
        #expect(Set(sequences) == Set(0..<count))
        var seen = Set<Int>(), repeats = 0
        for sequence in sequences where !seen.insert(sequence).inserted { repeats += 1 }
        #expect(repeats == stats.duplicated)
        #expect(
            receiver.received.allSatisfy {
                $0.bytes == SenderProcess.payload(SenderProcess.sequence(of: $0.bytes), size: 16)
            })
    }

    @Test func mtuDropsOnlyDatagramsLargerThanTheCap() {
        let sim = Simulator(seed: 3, defaultLink: LinkConditions(mtu: 100))
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        let a = sim.addNode(EchoProcess(echoes: false))
        for size in [0, 1, 50, 99, 100, 101, 1000, 65_000] {
            sim.inject([UInt8](repeating: 7, count: size), from: a, to: b)
        }
        sim.run(for: .seconds(1))
        #expect(receiver.received.map(\.bytes.count) == [0, 1, 50, 99, 100])
        #expect(sim.statistics.dropped.mtu == 3)
        #expect(sim.statistics.dropped.total == 3)
        // The cap is per link: the other direction has none.
        sim.setLink(from: b, to: a, LinkConditions())
        sim.inject([UInt8](repeating: 7, count: 1000), from: b, to: a)
        sim.run(for: .seconds(1))
        #expect(sim.process(at: a, as: EchoProcess.self)?.received.count == 1)
    }

    @Test func asymmetricLinkIsLossyOneWayOnly() {
        let sim = Simulator(seed: 5)
        let aProcess = EchoProcess(echoes: false), bProcess = EchoProcess(echoes: false)
        let a = sim.addNode(aProcess), b = sim.addNode(bProcess)
        sim.setLink(from: a, to: b, LinkConditions(lossProbability: 0.5))
        #expect(sim.link(from: a, to: b).lossProbability == 0.5)
        #expect(sim.link(from: b, to: a) == .default)
        for index in 0..<1000 {
            sim.inject(SenderProcess.payload(index, size: 8), from: a, to: b)
            sim.inject(SenderProcess.payload(index, size: 8), from: b, to: a)
        }
        sim.run(for: .seconds(1))
        #expect(aProcess.received.count == 1000, "B→A must be clean")
        #expect((400...600).contains(bProcess.received.count), "A→B lost \(1000 - bProcess.received.count)")
        #expect(sim.statistics.dropped.loss == 1000 - bProcess.received.count)

        // A link set down is a one-way cut; resetting it restores the default.
        sim.setLink(from: b, to: a, .down)
        sim.inject([1], from: b, to: a)
        sim.run(for: .seconds(1))
        #expect(aProcess.received.count == 1000)
        sim.resetLink(from: b, to: a)
        sim.inject([1], from: b, to: a)
        sim.run(for: .seconds(1))
        #expect(aProcess.received.count == 1001)
    }

    @Test(arguments: SimulationSeeds.from())
    func corruptionFlipsExactlyOneBit(seed: UInt64) {
        let count = 500
        let (sim, receiver) = Self.oneWay(
            seed: seed, link: LinkConditions(corruptionProbability: 1), count: count, size: 32)
        #expect(receiver.received.count == count)
        #expect(sim.statistics.corrupted == count)
        // Which datagram is which: corruption may hit the sequence number, so match by order
        // (this link does not reorder).
        for (index, arrival) in receiver.received.enumerated() {
            let original = SenderProcess.payload(index, size: 32)
            let flipped = zip(original, arrival.bytes).map { ($0 ^ $1).nonzeroBitCount }.reduce(0, +)
            #expect(arrival.bytes.count == original.count)
            #expect(flipped == 1, "\(SimulationSeeds.replay(seed)): datagram \(index) differs in \(flipped) bits")
        }
        // Corruption hits all bit positions, not just one.
        let positions = Set(
            receiver.received.enumerated().map { index, arrival in
                let original = SenderProcess.payload(index, size: 32)
                return original.indices.first { original[$0] != arrival.bytes[$0] } ?? -1
            })
        #expect(positions.count > 20)
    }

    @Test func noCorruptionWithoutConfiguringIt() {
        let (sim, receiver) = Self.oneWay(
            seed: 2, link: LinkConditions(lossProbability: 0.1, duplicationProbability: 0.1), count: 500)
        #expect(sim.statistics.corrupted == 0)
        #expect(
            receiver.received.allSatisfy {
                $0.bytes == SenderProcess.payload(SenderProcess.sequence(of: $0.bytes), size: 16)
            })
    }

    @Test(arguments: SimulationSeeds.from())
    func reorderingReordersAndDelays(seed: UInt64) {
        let link = LinkConditions(reorderProbability: 0.3, reorderDelay: .milliseconds(20))
        let (_, receiver) = Self.oneWay(seed: seed, link: link, count: 300, interval: .milliseconds(1))
        let sequences = receiver.sequenceNumbers
        #expect(sequences.count == 300)
        #expect(sequences != sequences.sorted(), "\(SimulationSeeds.replay(seed)): nothing was reordered")
        let inversions = zip(sequences, sequences.dropFirst()).filter { $0 > $1 }.count
        #expect(inversions > 10, "\(SimulationSeeds.replay(seed)): only \(inversions) inversions")
        // No datagram arrives before its base delay or after base delay + reorder delay.
        for arrival in receiver.received {
            let sentAt = MeshInstant.ms(Int64(SenderProcess.sequence(of: arrival.bytes)))
            #expect(arrival.at - sentAt >= .milliseconds(1) && arrival.at - sentAt <= .milliseconds(21))
        }
        // Control: the same traffic with no reordering arrives in order.
        let (_, control) = Self.oneWay(seed: seed, link: .default, count: 300, interval: .milliseconds(1))
        #expect(control.sequenceNumbers == Array(0..<300))
    }

    @Test func jitterStaysWithinBounds() {
        let link = LinkConditions(delay: .milliseconds(5), jitter: .milliseconds(2))
        let (_, receiver) = Self.oneWay(seed: 4, link: link, count: 1000)
        let delays = receiver.received.map { $0.at - .zero }
        #expect(delays.allSatisfy { $0 >= .milliseconds(5) && $0 <= .milliseconds(7) })
        #expect(Set(delays).count > 100, "jitter should spread arrival times")
    }

    @Test(arguments: SimulationSeeds.from())
    func everyDatagramIsAccountedFor(seed: UInt64) {
        let link = LinkConditions(
            jitter: .milliseconds(1), lossProbability: 0.1, duplicationProbability: 0.1,
            reorderProbability: 0.1, corruptionProbability: 0.1, mtu: 40)
        let sim = Simulator(seed: seed, defaultLink: link)
        let echo = sim.addNode(EchoProcess())
        for size in [16, 32, 48] { sim.addNode(SenderProcess(target: echo, count: 300, size: size)) }
        sim.inject([1, 2, 3], from: echo, to: SimAddress(99))
        sim.run(for: .seconds(10))
        let stats = sim.statistics
        #expect(sim.pendingEventCount == 0)
        #expect(
            stats.delivered + stats.dropped.total == stats.sent + stats.duplicated, "\(SimulationSeeds.replay(seed))")
        #expect(stats.dropped.unknownDestination == 1)
        #expect(stats.nodes.map(\.sent).reduce(0, +) == stats.sent)
        #expect(stats.nodes.map(\.received).reduce(0, +) == stats.delivered)
        #expect(stats[SimAddress(1)].sent == 300 && stats[SimAddress(1)].bytesSent == 300 * 16)
        #expect(stats.maxSentPerNode == stats[echo].sent)
    }
}
