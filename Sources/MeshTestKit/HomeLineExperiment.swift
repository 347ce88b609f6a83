import MeshCore

/// The home-line experiment, for the bench and the seeded tests alike: three holders outside, a
/// joiner behind a home line (a rate with a 100 ms tail-drop queue, a round trip, random loss)
/// that fetches an attachment from them while a flow that follows TCP's rules (`TCPSender`,
/// CUBIC) downloads through the same line.
package enum HomeLineExperiment {
    package struct Line: Sendable {
        package var name: String
        package var megabitsPerSecond: Double
        package var roundTrip: Duration
        package var loss: Double

        package init(name: String, megabitsPerSecond: Double, roundTrip: Duration, loss: Double) {
            self.name = name
            self.megabitsPerSecond = megabitsPerSecond
            self.roundTrip = roundTrip
            self.loss = loss
        }

        package var bytesPerSecond: Double { megabitsPerSecond * 1_000_000 / 8 }

        /// The path as the simulator sees it: Ethernet-sized (1,500-byte packets, 1,472 bytes of
        /// UDP payload), so path MTU discovery settles where it would on a real home line.
        package var conditions: LinkConditions {
            LinkConditions(delay: roundTrip / 2, lossProbability: loss, mtu: 1472)
        }
    }

    /// Replication nobody waits for (background), or a `get` (the joiner is lazy and loads it).
    package enum Mode: String, Sendable { case replication, get }

    package struct Outcome: Sendable {
        package var finished: Bool
        /// The file ÷ the time from the joiner's start to the file complete there.
        package var fetchRate: Double
        /// A `get`: the file ÷ the time from the load to the file complete (what its user waits).
        package var loadRate: Double?
        /// The competitor's goodput over the same time (0 without one).
        package var competitorRate: Double
        /// Of the datagrams that reached the line's queue meanwhile, the share it dropped.
        package var dropShare: Double
        /// The holders' piece payload sent meanwhile ÷ the file.
        package var holderBytesPerFileByte: Double
        /// The line's queue, sampled every 50 ms of the fetch (10 traced) (what a ping's reply
        /// would wait): its median and 90th percentile.
        package var queueMedian: Duration = .zero
        package var queueP90: Duration = .zero
    }

    /// The competitor's goodput through the line with nothing else on it (after its start-up).
    package static func competitorAlone(_ line: Line, seed: UInt64 = 1) -> Double {
        let sim = Simulator(seed: seed, defaultLink: line.conditions)
        let receiver = sim.addNode(TCPReceiver())
        let sender = TCPSender(to: receiver, until: .zero + .seconds(40))
        sim.addNode(sender)
        sim.setBottlenecks(
            of: receiver, uplink: nil,
            downlink: Bottleneck(
                megabitsPerSecond: line.megabitsPerSecond,
                queue: .milliseconds(100)))
        sim.run(until: .zero + .seconds(10))
        let before = sender.bytesAcknowledged
        sim.run(until: .zero + .seconds(40))
        return Double(sender.bytesAcknowledged - before) / 30
    }

    /// `size` random bytes from `seed`: every chunk its own (identical chunks are stored and
    /// fetched once).
    package static func file(size: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed: seed ^ 18)
        return random.bytes(size / 8 * 8)
    }

    /// One run. `trace` is called every 10 ms of the fetch with the simulator, the joiner and the
    /// competitor (for HOMELINK_TRACE in the bench). `stop` ends the run early once it says so
    /// (a test that looks only at the fetch's start): what happened until then is as in a whole
    /// run, and the outcome is not `finished`.
    package static func run(
        size: Int, line: Line, mode: Mode, competitor: Bool, seed: UInt64 = 1,
        trace: ((Simulator, SimNode, TCPSender, [SimNode]) -> Void)? = nil,
        stop: ((Simulator) -> Bool)? = nil
    ) -> Outcome {
        var configuration = SimNode.Configuration()
        configuration.settings.chunkSize = Manifest.defaultChunkSize
        let mesh = SimMesh(seed: seed, link: line.conditions, configuration: configuration)
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let holders =
            [first] + (1...2).map { mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(10 * $0)) }
        let bytes = file(size: size, seed: seed)
        first.plan(at: .zero + .seconds(1)) { $0.attach(bytes) }
        _ = mesh.simulator.run(until: .zero + .seconds(120), checkEvery: .milliseconds(100)) { _ in
            holders.allSatisfy { !$0.complete.isEmpty }
        }
        // The home: the competitor's receiver and, 10 s later, the joiner, behind one line.
        let start = mesh.simulator.now
        let tcpReceiver = mesh.simulator.addNode(TCPReceiver())
        let tcp = TCPSender(to: tcpReceiver, until: competitor ? start + .seconds(300) : start)
        mesh.simulator.addNode(tcp)
        var joining = configuration
        joining.settings.lazy = mode == .get
        let joiner = mesh.addNode(joiningThrough: [first.address], at: start + .seconds(10), configuration: joining)
        mesh.simulator.addAccessLink(
            for: [tcpReceiver, joiner.address], uplink: nil,
            downlink: Bottleneck(megabitsPerSecond: line.megabitsPerSecond, queue: .milliseconds(100)))
        mesh.simulator.run(until: start + .seconds(10))
        var loadAt: MeshInstant?
        if mode == .get, let id = first.core.attachments.first?.content {
            // Asked for as soon as the joiner's journal has it.
            _ = mesh.simulator.run(until: start + .seconds(40), checkEvery: .milliseconds(5)) { _ in
                joiner.journal.state.hasContent(id)
            }
            loadAt = mesh.simulator.now + .milliseconds(1)
            joiner.plan(at: mesh.simulator.now + .milliseconds(1)) { $0.load(id) }
        }
        let tcpBefore = tcp.bytesAcknowledged
        let linkBefore = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let servedBefore = holders.map(\.core.counters.chunkPayloadBytesSent).reduce(0, +)
        var queueSamples: [Duration] = []
        let fetched = mesh.simulator.run(
            until: start + .seconds(290), checkEvery: .milliseconds(trace == nil ? 50 : 10)
        ) { sim in
            trace?(sim, joiner, tcp, holders)
            if sim.now >= start + .seconds(10), let delay = sim.downlinkQueueDelay(of: joiner.address) {
                queueSamples.append(delay)
            }
            return !joiner.complete.isEmpty || stop?(sim) == true
        }
        queueSamples.sort()
        let seconds = (mesh.simulator.now - start - .seconds(10)).milliseconds / 1000
        let link = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let dropped = link.dropped - linkBefore.dropped
        let offered = dropped + link.forwarded - linkBefore.forwarded
        let served = holders.map(\.core.counters.chunkPayloadBytesSent).reduce(0, +) - servedBefore
        let loadSeconds = loadAt.map { (mesh.simulator.now - $0).milliseconds / 1000 }
        return Outcome(
            finished: fetched == .satisfied && !joiner.complete.isEmpty, fetchRate: Double(size) / seconds,
            loadRate: loadSeconds.map { Double(size) / $0 },
            competitorRate: Double(tcp.bytesAcknowledged - tcpBefore) / seconds,
            dropShare: Double(dropped) / Double(max(1, offered)),
            holderBytesPerFileByte: Double(served) / Double(size),
            queueMedian: queueSamples.isEmpty ? .zero : queueSamples[(queueSamples.count - 1) / 2],
            queueP90: queueSamples.isEmpty ? .zero : queueSamples[(queueSamples.count - 1) * 9 / 10])
    }
}
