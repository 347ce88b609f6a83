import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// What the core counts for the metrics: traffic by kind, membership's suspicions,
/// refutations and round trips, reliable outcomes per recipient, fetched bytes. The counts are
/// pure state, so the seeded whole-node simulation checks them.
@Suite("node counters")
struct NodeCountersTests {
    @Test(
        "every datagram sent is counted under one kind, and each kind moves when its traffic does",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func trafficByKind(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(5), lossProbability: 0.05))
        let uploader = mesh.addNode(joiningThrough: [], at: .zero)
        let others = (1...2).map {
            mesh.addNode(joiningThrough: [uploader.address], at: .zero + .milliseconds(10 * $0))
        }
        let bytes = patternBytes(4096 * 12, salt: UInt8(seed % 200))
        uploader.plan(at: .zero + .seconds(2)) { $0.attach(bytes) }
        uploader.plan(at: .zero + .seconds(3)) { $0.sendMessage([1, 2, 3], mode: .reliable) }
        mesh.simulator.run(for: .seconds(30), checkEvery: .seconds(1)) { _ in
            others.allSatisfy { $0.complete.count == 1 } && uploader.core.counters.reliableDelivered == 2
        }
        for node in [uploader] + others {
            let counters = node.core.counters
            let sent = TrafficKind.allCases.map { counters.sent.datagrams($0) }.reduce(0, +)
            let sentBytes = TrafficKind.allCases.map { counters.sent.bytes($0) }.reduce(0, +)
            let received = TrafficKind.allCases.map { counters.received.datagrams($0) }.reduce(0, +)
            #expect(sent == counters.datagramsSent && sentBytes == counters.bytesSent, "\(replay): kinds do not add up")
            #expect(received > 0 && received <= counters.datagramsReceived, "\(replay)")
            for kind in [TrafficKind.membership, .journal, .transfer] {
                #expect(
                    counters.sent.datagrams(kind) > 0 && counters.received.datagrams(kind) > 0,
                    "\(replay): no \(kind) traffic counted at \(node.address)")
            }
            #expect(counters.sent.datagrams(.ping) == 0 && counters.sent.datagrams(.keys) == 0, "\(replay)")
        }
        #expect(
            uploader.core.counters.reliableDelivered == 2 && uploader.core.counters.reliableUnconfirmed == 0,
            "\(replay)")
        #expect(uploader.core.counters.sent.datagrams(.messages) > 0, "\(replay)")
        for node in others {
            #expect(node.complete.count == 1, "\(replay): the attachment did not arrive")
            let fetched = node.core.counters.chunkPayloadBytesFetched
            #expect(fetched > 0 && fetched <= UInt64(bytes.count), "\(replay): \(fetched) bytes fetched")
            #expect(node.core.counters.received.datagrams(.messages) > 0, "\(replay)")
        }
    }

    @Test(
        "an idle mesh probes in small pairwise datagrams, and idle anti-entropy is a summary now and then",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func idleMembershipDatagramsAreSmall(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2)))
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let nodes =
            [first] + (1...5).map { mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(10 * $0)) }
        mesh.simulator.run(until: .zero + .seconds(20))
        let before = nodes.map { $0.core.counters.sent }
        mesh.simulator.run(for: .seconds(80))
        for (node, old) in zip(nodes, before) {
            let sent = node.core.counters.sent
            let datagrams = sent.datagrams(.membership) - old.datagrams(.membership)
            let bytes = sent.bytes(.membership) - old.bytes(.membership)
            // A pairwise probe or ack is 69 bytes (a hello one was 109); a summary every 30 s or so
            // (136) and a probe of a restarted member's new boot may come beside them.
            #expect(datagrams > 80, "\(replay): \(datagrams) membership datagrams at \(node.address)")
            #expect(
                Double(bytes) / Double(max(1, datagrams)) < 75,
                "\(replay): \(bytes) bytes in \(datagrams) membership datagrams at \(node.address)")
            #expect(node.membership.counters.suspicionsRaised == 0, "\(replay)")
        }
    }

    @Test("a reliable message to a member that crashed counts as unconfirmed, the others' as delivered")
    func reliableOutcomesPerRecipient() {
        let mesh = SimMesh(seed: 7, link: LinkConditions(delay: .milliseconds(5)))
        let sender = mesh.addNode(joiningThrough: [], at: .zero)
        let alive = mesh.addNode(joiningThrough: [sender.address], at: .zero + .milliseconds(10))
        let doomed = mesh.addNode(joiningThrough: [sender.address], at: .zero + .milliseconds(20))
        mesh.simulator.run(until: .zero + .seconds(3))
        mesh.simulator.crash(doomed.address)
        sender.plan(at: .zero + .seconds(3) + .milliseconds(1)) {
            $0.sendMessage([9], to: [alive.id, doomed.id], mode: .reliable)
        }
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(500)) { _ in
            sender.core.counters.reliableUnconfirmed == 1
        }
        #expect(sender.core.counters.reliableDelivered == 1)
        #expect(sender.core.counters.reliableUnconfirmed == 1)
    }

    @Test("survivors suspect a crashed member and measure round trips; an isolated member refutes when it is back")
    func suspicionsRefutationsAndRoundTrips() {
        let mesh = SimMesh(seed: 3, link: LinkConditions(delay: .milliseconds(5)))
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let nodes =
            [first] + (1...3).map { mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(10 * $0)) }
        mesh.simulator.run(until: .zero + .seconds(5))
        for node in nodes {
            let samples = node.membership.counters.roundTrips
            #expect(samples.count > 0, "no round trip measured at \(node.address)")
            #expect(
                samples.samples(after: 0).samples.allSatisfy { $0 >= .milliseconds(10) && $0 < .seconds(1) },
                "a round trip over a 5 ms link is at least 10 ms")
            #expect(node.membership.counters.suspicionsRaised == 0 && node.membership.counters.refutations == 0)
        }
        // Cut off long enough to be suspected, not declared dead: it refutes once it hears of it.
        mesh.simulator.isolate(nodes[3].address)
        mesh.simulator.run(for: .seconds(3))
        mesh.simulator.heal()
        mesh.simulator.run(for: .seconds(5))
        #expect(
            nodes[0..<3].contains { $0.membership.counters.suspicionsRaised > 0 },
            "nobody suspected the isolated member")
        #expect(nodes[3].membership.counters.refutations > 0, "the isolated member never refuted")
    }

    @Test("round trip samples: a reader gets each once, oldest first, and learns how many it missed")
    func roundTripSamples() {
        var samples = RoundTripSamples()
        #expect(samples.samples(after: 0).samples.isEmpty)
        for n in 1...3 { samples.record(.milliseconds(n)) }
        #expect(samples.samples(after: 0).samples == [.milliseconds(1), .milliseconds(2), .milliseconds(3)])
        #expect(samples.samples(after: 2).samples == [.milliseconds(3)] && samples.samples(after: 3).samples.isEmpty)
        for n in 4...(RoundTripSamples.capacity + 10) { samples.record(.milliseconds(n)) }
        let (late, missed) = samples.samples(after: 3)
        // 74 recorded, the last 64 held (11...74): of the 71 after the third, 7 are gone.
        #expect(late.count == RoundTripSamples.capacity && missed == 7)
        #expect(late.first == .milliseconds(11) && late.last == .milliseconds(RoundTripSamples.capacity + 10))
    }

    @Test("retransmissions stay counted after the member's channel goes")
    func retransmissionsNeverGoBack() throws {
        var delivery = DeliveryInstance()
        let peer = NodeID(high: 1, low: 2)
        delivery.addPeer(peer)
        let start = MeshInstant.zero + .seconds(1)
        _ = try delivery.send([1, 2, 3], to: [peer], mode: .reliable, now: start)
        var now = start
        for _ in 0..<50 where delivery.retransmissions == 0 {
            now = now + .milliseconds(200)
            _ = delivery.onTick(now: now)
        }
        let counted = delivery.retransmissions
        #expect(counted > 0, "no retransmission without acknowledgements")
        _ = delivery.removePeer(peer, now: now)
        #expect(delivery.retransmissions == counted)
    }
}
