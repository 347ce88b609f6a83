import MeshCore
import MeshTestKit
import Testing

/// The competitor of issue 18: a flow that follows TCP's congestion rules fills a bottleneck
/// alone, shares it with another like it, and collapses under random loss, as Reno does.
@Suite struct RenoFlowTests {
    /// 10 Mbit/s with a 100 ms queue, 40 ms of round trip.
    static let link = Bottleneck(megabitsPerSecond: 10, queue: .milliseconds(100))

    /// One flow through the sender's uplink for `seconds`: its goodput in bytes per second.
    static func run(seed: UInt64, loss: Double = 0, seconds: Int64 = 30) -> (goodput: Double, sender: RenoSender, sim: Simulator) {
        let sim = Simulator(seed: seed, defaultLink: LinkConditions(delay: .milliseconds(20), lossProbability: loss))
        let receiver = sim.addNode(RenoReceiver())
        let sender = RenoSender(to: receiver, until: .zero + .seconds(seconds))
        let address = sim.addNode(sender)
        sim.setBottlenecks(of: address, uplink: link, downlink: nil)
        sim.run(for: .seconds(seconds) + .seconds(2))
        return (Double(sender.bytesAcknowledged) / Double(seconds), sender, sim)
    }

    @Test("alone it fills the bottleneck, and the queue's tail drops are what it backs off from",
          arguments: SimulationSeeds.from(defaultCount: 2))
    func fillsTheLinkAlone(seed: UInt64) {
        let (goodput, sender, sim) = Self.run(seed: seed)
        let replay = SimulationSeeds.replay(seed)
        #expect(goodput > 0.85 * Self.link.bytesPerSecond && goodput <= Self.link.bytesPerSecond * 1.001,
                "\(replay): \(goodput) B/s of \(Self.link.bytesPerSecond)")
        #expect(sim.statistics.dropped.queue > 0 && sender.recoveries > 0, "\(replay): it never found the queue's end")
    }

    @Test("1% random loss collapses it: loss is all it knows of congestion", arguments: SimulationSeeds.from(defaultCount: 2))
    func randomLossCollapsesIt(seed: UInt64) {
        let clean = Self.run(seed: seed).goodput
        let lossy = Self.run(seed: seed, loss: 0.01).goodput
        #expect(lossy < 0.5 * clean, "\(SimulationSeeds.replay(seed)): \(lossy) B/s with 1% loss, \(clean) without")
    }

    @Test("two flows through one downlink share it", arguments: SimulationSeeds.from(defaultCount: 2))
    func twoFlowsShare(seed: UInt64) {
        let sim = Simulator(seed: seed, defaultLink: LinkConditions(delay: .milliseconds(20)))
        let sink = sim.addNode(RenoReceiver())
        let end = MeshInstant.zero + .seconds(60)
        let senders = [RenoSender(to: sink, until: end), RenoSender(to: sink, until: end)]
        for sender in senders { sim.addNode(sender) }
        sim.setBottlenecks(of: sink, uplink: nil, downlink: Self.link)
        sim.run(for: .seconds(62))
        let replay = SimulationSeeds.replay(seed)
        let total = senders.map(\.bytesAcknowledged).reduce(0, +)
        #expect(Double(total) / 60 > 0.85 * Self.link.bytesPerSecond, "\(replay): \(Double(total) / 60) B/s together")
        for sender in senders {
            let share = Double(sender.bytesAcknowledged) / Double(total)
            #expect(share > 0.3, "\(replay): a flow got \(share) of the link")
        }
    }
}
