import MeshCore
import MeshTestKit
import Testing

/// The competitor: a flow that follows TCP's congestion rules fills a bottleneck
/// alone (with Reno's growth or CUBIC's), shares it with another like it, and collapses under
/// random loss, as loss-based TCPs do.
@Suite struct TCPFlowTests {
    /// 10 Mbit/s with a 100 ms queue, 40 ms of round trip.
    static let link = Bottleneck(megabitsPerSecond: 10, queue: .milliseconds(100))

    /// One flow through the sender's uplink for `seconds`: its goodput in bytes per second.
    static func run(
        seed: UInt64, growth: TCPSender.Growth = .cubic, loss: Double = 0, seconds: Int64 = 30
    )
        -> (goodput: Double, sender: TCPSender, sim: Simulator)
    {
        let sim = Simulator(seed: seed, defaultLink: LinkConditions(delay: .milliseconds(20), lossProbability: loss))
        let receiver = sim.addNode(TCPReceiver())
        let sender = TCPSender(to: receiver, growth: growth, until: .zero + .seconds(seconds))
        let address = sim.addNode(sender)
        sim.setBottlenecks(of: address, uplink: link, downlink: nil)
        sim.run(for: .seconds(seconds) + .seconds(2))
        return (Double(sender.bytesAcknowledged) / Double(seconds), sender, sim)
    }

    @Test(
        "alone it fills the bottleneck, and the queue's tail drops are what it backs off from",
        arguments: SimulationSeeds.from(defaultCount: 2), [TCPSender.Growth.reno, .cubic])
    func fillsTheLinkAlone(seed: UInt64, growth: TCPSender.Growth) {
        let (goodput, sender, sim) = Self.run(seed: seed, growth: growth)
        let replay = "\(SimulationSeeds.replay(seed)) \(growth)"
        #expect(
            goodput > 0.85 * Self.link.bytesPerSecond && goodput <= Self.link.bytesPerSecond * 1.001,
            "\(replay): \(goodput) B/s of \(Self.link.bytesPerSecond)")
        #expect(sim.statistics.dropped.queue > 0 && sender.recoveries > 0, "\(replay): it never found the queue's end")
    }

    @Test(
        "1% random loss collapses it (CUBIC): loss is all it knows of congestion",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func randomLossCollapsesIt(seed: UInt64) {
        let clean = Self.run(seed: seed).goodput
        let lossy = Self.run(seed: seed, loss: 0.01).goodput
        #expect(lossy < 0.5 * clean, "\(SimulationSeeds.replay(seed)): \(lossy) B/s with 1% loss, \(clean) without")
    }

    @Test("two flows through one downlink share it", arguments: SimulationSeeds.from(defaultCount: 2))
    func twoFlowsShare(seed: UInt64) {
        let sim = Simulator(seed: seed, defaultLink: LinkConditions(delay: .milliseconds(20)))
        let sink = sim.addNode(TCPReceiver())
        let end = MeshInstant.zero + .seconds(60)
        let senders = [TCPSender(to: sink, until: end), TCPSender(to: sink, until: end)]
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
