import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The messenger's protocol (`DeliveryInstance`) on the seeded simulated network. Every
/// simulation names its seed in failure messages; `SIM_SEED=N swift test --filter …` replays it.
@Suite("Delivery in simulation")
struct DeliverySimulationTests {
    static let start = MeshInstant.zero

    static func at(_ milliseconds: Int64) -> MeshInstant { start + .milliseconds(milliseconds) }

    /// Every target got exactly `expected` from `sender`, in that order.
    static func received(_ mesh: DeliveryMesh, by target: SimAddress, from sender: SimAddress) -> [[UInt8]] {
        mesh[target].payloads(from: sender)
    }

    // MARK: reliability under faults

    static let hostile = LinkConditions(
        delay: .milliseconds(1), jitter: .milliseconds(2), lossProbability: 0.3,
        duplicationProbability: 0.3, reorderProbability: 0.3,
        reorderDelay: .milliseconds(20), corruptionProbability: 0.01)

    /// How long, in simulated time, the whole exchange under `hostile` may take. A round trip
    /// fails about half the time (0.7 · 0.7 survive), and a channel with nothing else to send
    /// learns of a lost retransmission only by its timer, which doubles up to 5 s: most runs
    /// finish within 2 s, one seed in a few hundred needs about 45 s (a chunk whose round trip
    /// failed ten times in a row). 60 s is twelve round trips at the largest timeout.
    static let hostileBound: Duration = .seconds(60)

    @Test(
        "with 30% loss, duplication and reordering every reliable message arrives once, in order, in bounded time",
        arguments: SimulationSeeds.from())
    func reliableUnderFaults(seed: UInt64) {
        let mesh = DeliveryMesh(count: 4, seed: seed, link: Self.hostile)
        let sizes = [8, 100, 1082, 1083, 2_500, 9_000, 30_000, 64]
        var expected: [SimAddress: [[UInt8]]] = [:]
        var labels: [(SimAddress, String)] = []
        for sender in mesh.nodes {
            for sequence in 0..<10 {
                let payload = numberedPayload(
                    from: sender.index, sequence: sequence, size: sizes[(sequence + sender.index) % sizes.count])
                expected[sender, default: []].append(payload)
                let label = "m\(sequence)"
                labels.append((sender, label))
                mesh[sender].planSend(
                    label, at: Self.at(Int64(sequence) * 40), payload: payload,
                    to: mesh.nodes.filter { $0 != sender }, mode: .reliable, timeout: .seconds(600))
            }
        }
        let outcome = mesh.simulator.run(
            until: Self.start + Self.hostileBound + .seconds(60), checkEvery: .milliseconds(50)
        ) { _ in
            labels.allSatisfy { mesh[$0.0].completion($0.1) != nil }
        }
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome == .satisfied, "\(replay): not all sends completed by \(mesh.simulator.now)")
        let finished = labels.compactMap { mesh[$0.0].completion($0.1)?.time }.max() ?? mesh.simulator.now
        #expect(finished - Self.start <= Self.hostileBound, "\(replay): the last send completed at \(finished)")
        for (sender, label) in labels {
            #expect(mesh[sender].completion(label)?.failures == [:], "\(replay): \(sender) \(label)")
        }
        for target in mesh.nodes {
            for sender in mesh.nodes where sender != target {
                let got = Self.received(mesh, by: target, from: sender)
                expectMessages(got, expected[sender] ?? [], "\(replay): \(target) from \(sender):")
            }
            #expect(mesh[target].deliveries.allSatisfy { $0.mode == .reliable })
        }
        #expect(mesh.violations.isEmpty, "\(replay): \(mesh.violations.prefix(3))")
        #expect(
            mesh.simulator.statistics.duplicated > 0 && mesh.simulator.statistics.dropped.loss > 0,
            "\(replay): the network did duplicate and lose")
        // The counters saw the retransmissions the losses forced.
        #expect(mesh.processes.allSatisfy { $0.instance.retransmissions > 0 }, "\(replay)")
    }

    @Test(
        "bytes in flight never exceed the window, checked after every step",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func bytesInFlightWithinWindow(seed: UInt64) {
        var settings = DeliveryInstance.Settings()
        settings.receiveCapacity = 24 * 1024
        let link = LinkConditions(
            delay: .milliseconds(2), jitter: .milliseconds(1), lossProbability: 0.03,
            reorderProbability: 0.05, reorderDelay: .milliseconds(5))
        let mesh = DeliveryMesh(count: 3, seed: seed, link: link, settings: settings)
        var labels: [(SimAddress, String)] = []
        for sender in mesh.nodes {
            // Messages below the receive capacity (a receiver cannot hold a larger one), many
            // of them, so the senders always have more to send than the window allows.
            for sequence in 0..<20 {
                let label = "m\(sequence)"
                labels.append((sender, label))
                mesh[sender].planSend(
                    label, at: Self.at(Int64(sequence)),
                    payload: numberedPayload(from: sender.index, sequence: sequence, size: 12_000),
                    to: mesh.nodes.filter { $0 != sender }, timeout: .seconds(600))
            }
        }
        let outcome = mesh.simulator.run(until: Self.start + .seconds(120), checkEvery: .milliseconds(20)) { _ in
            labels.allSatisfy { mesh[$0.0].completion($0.1) != nil }
        }
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome == .satisfied, "\(replay)")
        #expect(
            mesh.violations.isEmpty,
            "\(replay): \(mesh.violations.count) violations, first \(mesh.violations.prefix(3))")
        #expect(mesh.processes.allSatisfy { $0.checks > 1_000 }, "\(replay): checked at every step")
        // Not vacuous: the senders did fill their windows.
        #expect(
            mesh.processes.allSatisfy { $0.fullestWindow > 0.9 }, "\(replay): \(mesh.processes.map(\.fullestWindow))")
        for target in mesh.nodes {
            for sender in mesh.nodes where sender != target {
                #expect(Self.received(mesh, by: target, from: sender).count == 20, "\(replay)")
            }
        }
    }

    // MARK: targets

    @Test("a send to some members reaches exactly those members")
    func subsetOfTargets() {
        let mesh = DeliveryMesh(count: 5, seed: 1)
        let (a, b, c, d, e) = (mesh.nodes[0], mesh.nodes[1], mesh.nodes[2], mesh.nodes[3], mesh.nodes[4])
        let stranger = NodeID(high: 1, low: 2)
        mesh[a].planSend("reliable", at: Self.at(1), payload: [1, 1], to: [b, d])
        mesh[a].plan(at: Self.at(2)) { process, now in
            process.send(
                "unreliable", payload: [2, 2], to: [DeliveryProcess.nodeID(c), DeliveryProcess.nodeID(e)],
                mode: .unreliable, now: now, timeout: nil)
        }
        mesh[a].plan(at: Self.at(3)) { process, now in
            process.send(
                "with stranger", payload: [3, 3], to: [DeliveryProcess.nodeID(c), stranger, DeliveryProcess.nodeID(c)],
                mode: .reliable, now: now, timeout: nil)
        }
        mesh[a].planSend("nobody", at: Self.at(4), payload: [4], to: [])
        mesh.simulator.run(until: Self.at(1_000))

        #expect(mesh[b].payloads(from: a) == [[1, 1]])
        #expect(mesh[d].payloads(from: a) == [[1, 1]])
        #expect(mesh[c].payloads(from: a) == [[3, 3]], "once, though named twice")
        #expect(mesh[e].payloads(from: a).isEmpty)
        #expect(mesh[c].payloads(from: a, mode: .unreliable) == [[2, 2]])
        #expect(mesh[e].payloads(from: a, mode: .unreliable) == [[2, 2]])
        for node in [b, d] { #expect(mesh[node].payloads(from: a, mode: .unreliable).isEmpty) }
        #expect(mesh[a].deliveries.isEmpty)
        #expect(mesh[a].completion("reliable")?.failures == [:])
        #expect(mesh[a].completion("unreliable")?.failures == [:])
        #expect(mesh[a].completion("with stranger")?.failures == [stranger: .unknown])
        #expect(mesh[a].completion("nobody")?.failures == [:])
        #expect(mesh[a].instance.pendingSends == 0)
        // Nobody but the targets was sent data at all.
        #expect(mesh[a].dataChunksSent[DeliveryProcess.nodeID(e)] == nil)
    }

    // MARK: unreachable and departed peers

    @Test(
        "an unreachable target fails with timedOut; later messages flow to the others and to it once reachable",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func unreachableTarget(seed: UInt64) {
        let link = LinkConditions(delay: .milliseconds(1), jitter: .milliseconds(1))
        let mesh = DeliveryMesh(count: 3, seed: seed, link: link)
        let (a, b, c) = (mesh.nodes[0], mesh.nodes[1], mesh.nodes[2])
        let cID = DeliveryProcess.nodeID(c)
        let replay = SimulationSeeds.replay(seed)
        mesh.simulator.setLink(between: a, and: c, .down)
        let restore = Self.at(4_000)
        mesh.simulator.at(restore, "restore a–c") { simulator in
            simulator.resetLink(from: a, to: c)
            simulator.resetLink(from: c, to: a)
        }
        let m1 = patternBytes(20_000, salt: 1), m2 = patternBytes(5_000, salt: 2)
        let m3 = patternBytes(100, salt: 3), m4 = patternBytes(3_000, salt: 4)
        mesh[a].planSend("m1", at: Self.at(10), payload: m1, to: [b, c], timeout: .seconds(2))
        mesh[a].planSend("m2", at: Self.at(2_500), payload: m2, to: [b, c], timeout: .seconds(30))
        mesh[a].planSend("m3", at: Self.at(2_600), payload: m3, to: [b])
        mesh[a].planSend("m4", at: Self.at(5_000), payload: m4, to: [b, c], timeout: .seconds(30))

        mesh.simulator.run(until: Self.at(3_000))
        let first = mesh[a].completion("m1")
        #expect(first?.failures == [cID: .timedOut], "\(replay)")
        if let time = first?.time {
            #expect(time >= Self.at(2_010) && time < Self.at(2_100), "\(replay): completed at \(time)")
        }
        expectMessages(mesh[b].payloads(from: a), [m1, m2, m3], "\(replay): B is not held up by C:")
        #expect(mesh[a].completion("m3")?.failures == [:], "\(replay)")
        #expect(mesh[c].payloads(from: a).isEmpty)

        // Once the link is back, what was sent since reaches C, m1 is skipped, and m4 follows.
        let bound = restore + DeliveryInstance.Settings().sender.timer.maximum + .seconds(1)
        let outcome = mesh.simulator.run(until: bound) { _ in
            mesh[a].completion("m2") != nil && mesh[a].completion("m4") != nil
        }
        #expect(outcome == .satisfied, "\(replay): m2 and m4 not completed by \(bound)")
        #expect(mesh[a].completion("m2")?.failures == [:], "\(replay)")
        #expect(mesh[a].completion("m4")?.failures == [:], "\(replay)")
        expectMessages(mesh[c].payloads(from: a), [m2, m4], "\(replay): C:")
        expectMessages(mesh[b].payloads(from: a), [m1, m2, m3, m4], "\(replay): B:")
        mesh.simulator.run(for: .seconds(10))
        #expect(mesh[a].instance.sender(for: cID)?.isIdle == true, "\(replay)")
        #expect(mesh[a].instance.nextDeadline == nil, "\(replay): nothing left to wait for")
        #expect(mesh.violations.isEmpty, "\(replay): \(mesh.violations.prefix(3))")
    }

    @Test(
        "a message that arrived but whose acknowledgements were all lost is reported timedOut: a failure is not a proof of non-delivery",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func lostAcknowledgements(seed: UInt64) {
        let link = LinkConditions(delay: .milliseconds(1), jitter: .milliseconds(1))
        let mesh = DeliveryMesh(count: 2, seed: seed, link: link)
        let (a, b) = (mesh.nodes[0], mesh.nodes[1])
        let replay = SimulationSeeds.replay(seed)
        // B hears A; nothing B sends (its acknowledgements) reaches A.
        mesh.simulator.setLink(from: b, to: a, .down)
        let message = patternBytes(3_000, salt: 9)
        mesh[a].planSend("m", at: Self.at(10), payload: message, to: [b], timeout: .seconds(2))
        mesh.simulator.run(until: Self.at(3_000))
        #expect(mesh[a].completion("m")?.failures == [DeliveryProcess.nodeID(b): .timedOut], "\(replay)")
        expectMessages(mesh[b].payloads(from: a), [message], "\(replay): B got it, once:")
        #expect(mesh.violations.isEmpty, "\(replay): \(mesh.violations.prefix(3))")
    }

    @Test(
        "with deadlines shorter than the losses need, a send reported delivered was delivered, and none is stalled",
        arguments: SimulationSeeds.from())
    func abandonedSendsOnLossyLink(seed: UInt64) {
        let mesh = DeliveryMesh(count: 2, seed: seed)
        let (a, b) = (mesh.nodes[0], mesh.nodes[1])
        let bID = DeliveryProcess.nodeID(b)
        let replay = SimulationSeeds.replay(seed)
        mesh.simulator.setLink(
            from: a, to: b,
            LinkConditions(
                delay: .milliseconds(2), jitter: .milliseconds(2), lossProbability: 0.5,
                duplicationProbability: 0.1, reorderProbability: 0.3))
        mesh.simulator.setLink(from: b, to: a, LinkConditions(delay: .milliseconds(2), lossProbability: 0.3))
        mesh.simulator.at(Self.at(5_000), "heal") { simulator in
            simulator.resetLink(from: a, to: b)
            simulator.resetLink(from: b, to: a)
        }
        var sent: [[UInt8]] = []
        for sequence in 0..<60 {
            let payload = numberedPayload(
                from: 0, sequence: sequence, size: [50, 1_500, 4_000, 300, 6_000][sequence % 5])
            sent.append(payload)
            mesh[a].planSend(
                "m\(sequence)", at: Self.at(Int64(sequence) * 20), payload: payload, to: [b], timeout: .milliseconds(60)
            )
        }
        let last = numberedPayload(from: 0, sequence: 999, size: 3_000)
        mesh[a].planSend("after", at: Self.at(6_000), payload: last, to: [b], timeout: .seconds(5))
        mesh.simulator.run(until: Self.at(7_000))

        let got = mesh[b].payloads(from: a)
        let order = got.compactMap { payload in sent.firstIndex(of: payload) }
        #expect(
            order == order.sorted() && Set(order).count == order.count, "\(replay): out of order or twice: \(order)")
        var succeeded = 0, failed = 0
        for (sequence, payload) in sent.enumerated() {
            guard let completion = mesh[a].completion("m\(sequence)") else {
                Issue.record("\(replay): m\(sequence) never completed")
                continue
            }
            if completion.failures.isEmpty {
                succeeded += 1
                let arrived = got.contains(payload)
                #expect(arrived, "\(replay): m\(sequence) was reported delivered but never delivered")
            } else {
                failed += 1
                #expect(completion.failures == [bID: .timedOut], "\(replay): m\(sequence)")
            }
        }
        #expect(succeeded > 5 && failed > 5, "\(replay): \(succeeded) delivered, \(failed) timed out")
        #expect(got.last == last, "\(replay): the message after the losses was not delivered (stalled?)")
        #expect(mesh[a].completion("after")?.failures == [:], "\(replay)")
        #expect(got.count == order.count + 1, "\(replay): something was delivered that was never sent")
        #expect(mesh.violations.isEmpty, "\(replay): \(mesh.violations.prefix(3))")
    }

    @Test("removing a peer fails what is pending to it with departed, and only to it")
    func removedPeerDeparts() {
        let mesh = DeliveryMesh(count: 3, seed: 2)
        let (a, b, c) = (mesh.nodes[0], mesh.nodes[1], mesh.nodes[2])
        let bID = DeliveryProcess.nodeID(b)
        mesh.simulator.setLink(between: a, and: b, .down)
        mesh[a].planSend("both", at: Self.at(10), payload: patternBytes(4_000), to: [b, c])
        mesh[a].planSend("only b", at: Self.at(20), payload: [9], to: [b])
        mesh[a].plan(at: Self.at(1_000)) { process, now in process.removePeer(b, now: now) }
        mesh[a].planSend("after", at: Self.at(1_100), payload: [7], to: [b, c])
        mesh.simulator.run(until: Self.at(999))
        #expect(mesh[a].completion("both") == nil)
        expectMessages(mesh[c].payloads(from: a), [patternBytes(4_000)])
        mesh.simulator.run(until: Self.at(2_000))
        #expect(mesh[a].completion("both")?.failures == [bID: .departed])
        #expect(mesh[a].completion("both")?.time == Self.at(1_000))
        #expect(mesh[a].completion("only b")?.failures == [bID: .departed])
        #expect(mesh[a].completion("after")?.failures == [bID: .unknown])
        expectMessages(mesh[c].payloads(from: a), [patternBytes(4_000), [7]])
        #expect(mesh[a].instance.pendingSends == 0)
        #expect(!mesh[a].instance.peers.contains(bID))
        #expect(mesh[a].instance.sender(for: bID) == nil)
    }

    // MARK: message sizes

    @Test("1 byte, one fragment, one fragment + 1 and the largest message all arrive intact, reliably")
    func reliableSizes() {
        let settings = DeliveryInstance.Settings()
        #expect(settings.maxMessageSize == 256 * 1024)
        let fragment = settings.fragmentSize
        let mesh = DeliveryMesh(count: 2, seed: 3)
        let (a, b) = (mesh.nodes[0], mesh.nodes[1])
        let sizes = [1, fragment, fragment + 1, settings.maxMessageSize]
        let payloads = sizes.enumerated().map { patternBytes($0.element, salt: UInt8($0.offset)) }
        for (index, payload) in payloads.enumerated() {
            mesh[a].planSend("s\(index)", at: Self.at(Int64(index)), payload: payload, to: [b])
        }
        mesh[a].planSend("too big", at: Self.at(10), payload: patternBytes(settings.maxMessageSize + 1), to: [b])
        mesh.simulator.run(until: Self.at(5_000))
        expectMessages(mesh[b].payloads(from: a), payloads)
        #expect(
            mesh[a].refused["too big"] == .tooLarge(size: settings.maxMessageSize + 1, limit: settings.maxMessageSize))
        #expect(mesh[a].sendIDs["too big"] == nil)
        // No loss: one chunk per fragment, the boundary sizes split where they should.
        let chunks = 1 + 1 + 2 + (settings.maxMessageSize + fragment - 1) / fragment
        #expect(mesh[a].dataChunksSent[DeliveryProcess.nodeID(b)] == chunks)
        #expect(mesh[a].largestPayload <= settings.datagramBudget)
        #expect(mesh[a].largestPayload >= fragment, "full chunks were sent")
        #expect((0..<4).allSatisfy { mesh[a].completion("s\($0)")?.failures == [:] })
    }

    @Test("the same sizes arrive intact unreliably, and over the limit is refused")
    func unreliableSizes() {
        let settings = DeliveryInstance.Settings()
        let fragment = settings.datagramBudget - FrameCodec.headerLength - UnreliableFragment.overhead
        let mesh = DeliveryMesh(count: 2, seed: 4)
        let (a, b) = (mesh.nodes[0], mesh.nodes[1])
        let sizes = [1, fragment, fragment + 1, settings.maxMessageSize, 0]
        let payloads = sizes.enumerated().map { patternBytes($0.element, salt: UInt8($0.offset)) }
        for (index, payload) in payloads.enumerated() {
            mesh[a].planSend("u\(index)", at: Self.at(Int64(index) * 10), payload: payload, to: [b], mode: .unreliable)
        }
        mesh[a].planSend(
            "too big", at: Self.at(100), payload: patternBytes(settings.maxMessageSize + 1), to: [b], mode: .unreliable)
        mesh.simulator.run(until: Self.at(1_000))
        expectMessages(mesh[b].payloads(from: a, mode: .unreliable), payloads)
        #expect(mesh[a].fragmentsSent == 1 + 1 + 2 + (settings.maxMessageSize + fragment - 1) / fragment + 1)
        #expect(
            mesh[a].refused["too big"] == .tooLarge(size: settings.maxMessageSize + 1, limit: settings.maxMessageSize))
        #expect(mesh[a].largestPayload == settings.datagramBudget, "a full fragment fills the datagram exactly")
    }

    @Test("a refused message leaves no trace: nothing queued, nothing sent")
    func refusedSendQueuesNothing() throws {
        var instance = DeliveryInstance()
        let peer = NodeID(high: 0, low: 9)
        instance.addPeer(peer)
        let limit = instance.settings.maxMessageSize
        #expect(throws: DeliveryError.tooLarge(size: limit + 1, limit: limit)) {
            _ = try instance.send(patternBytes(limit + 1), to: [peer], mode: .reliable, now: Self.start)
        }
        #expect(throws: DeliveryError.tooLarge(size: limit + 1, limit: limit)) {
            _ = try instance.send(patternBytes(limit + 1), to: [peer], mode: .unreliable, now: Self.start)
        }
        #expect(instance.pendingSends == 0)
        #expect(instance.sender(for: peer)?.pendingChunks == 0)
        #expect(instance.nextDeadline == nil)
        #expect(instance.onTick(now: Self.start + .seconds(1)).isEmpty)
        #expect("\(DeliveryError.tooLarge(size: limit + 1, limit: limit))".contains("262145"))
        // Exactly at the limit is accepted.
        let (_, directives) = try instance.send(patternBytes(limit), to: [peer], mode: .reliable, now: Self.start)
        #expect(!directives.isEmpty)
        #expect(instance.pendingSends == 1)
    }

    @Test("the journal's stream and the application's share one channel; each message keeps its own")
    func streamsStayApart() throws {
        var sender = DeliveryInstance()
        var receiver = DeliveryInstance()
        let (a, b) = (NodeID(high: 0, low: 1), NodeID(high: 0, low: 2))
        sender.addPeer(b)
        receiver.addPeer(a)
        // The same bytes in both streams, one of them over several fragments.
        let big = patternBytes(sender.settings.fragmentSize * 3 + 5)
        var out: [DeliveryInstance.Directive] = []
        for (payload, stream) in [
            ([UInt8](big), DeliveryStream.journal), (big, .application), ([9], .journal), ([9], .application),
        ] {
            out += try sender.send(payload, to: [b], mode: .reliable, stream: stream, now: Self.start).directives
        }
        // Every other datagram arrives out of order: the stream is the message's, not the datagram's.
        var datagrams = out.compactMap { directive -> [Frame]? in
            if case let .send(_, frames) = directive { return frames } else { return nil }
        }
        datagrams.swapAt(0, datagrams.count - 1)
        var delivered: [(DeliveryStream, [UInt8])] = []
        for frames in datagrams {
            for case let .deliver(message) in receiver.onFrames(frames, from: a, now: Self.start) {
                delivered.append((message.stream, message.payload))
            }
        }
        #expect(delivered.map(\.0) == [.journal, .application, .journal, .application])
        #expect(delivered.map(\.1) == [big, big, [9], [9]])
        // The stream is the frame type's: a journal chunk is `journalData` on the wire.
        let journalFrames = datagrams.flatMap { $0 }.filter { frame in
            if case let .data(chunk) = frame { return chunk.stream == .journal } else { return false }
        }
        #expect(!journalFrames.isEmpty && journalFrames.allSatisfy { $0.type == .journalData })
        // The journal's stream has no unreliable mode.
        let (_, unreliable) = try sender.send([1], to: [b], mode: .unreliable, stream: .journal, now: Self.start)
        #expect(
            unreliable.contains { if case let .completed(_, failures) = $0 { failures[b] == .unknown } else { false } })
    }

    // MARK: unreliable delivery on a faulty network

    @Test(
        "unreliable messages are whole or absent, never twice, and incomplete ones are let go",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func unreliableUnderFaults(seed: UInt64) {
        let link = LinkConditions(
            delay: .milliseconds(1), jitter: .milliseconds(3), lossProbability: 0.05,
            duplicationProbability: 0.3, reorderProbability: 0.3, reorderDelay: .milliseconds(10),
            corruptionProbability: 0.01)
        let mesh = DeliveryMesh(count: 2, seed: seed, link: link)
        let (a, b) = (mesh.nodes[0], mesh.nodes[1])
        let replay = SimulationSeeds.replay(seed)
        var sent: [[UInt8]] = []
        for sequence in 0..<60 {
            let payload = numberedPayload(from: 0, sequence: sequence, size: [20, 1_500, 6_000][sequence % 3])
            sent.append(payload)
            mesh[a].planSend(
                "u\(sequence)", at: Self.at(Int64(sequence) * 5), payload: payload, to: [b], mode: .unreliable)
        }
        mesh.simulator.run(until: Self.at(1_000))
        let got = mesh[b].payloads(from: a, mode: .unreliable)
        #expect(Set(got).count == got.count, "\(replay): a message was delivered twice")
        #expect(got.allSatisfy { sent.contains($0) }, "\(replay): a message was delivered damaged")
        #expect(got.count > 30 && got.count < 60, "\(replay): \(got.count) of 60 (5% loss should cost a few)")
        #expect(mesh[b].instance.nextDeadline != nil, "\(replay): incomplete messages are waiting")
        // Past the reassembly timeout nothing is held and nothing is waited for.
        mesh.simulator.run(for: mesh[b].instance.settings.reassemblyTimeout + .seconds(1))
        #expect(mesh[b].instance.nextDeadline == nil, "\(replay)")
        #expect(mesh[b].payloads(from: a, mode: .unreliable).count == got.count)
        #expect(mesh[a].instance.retransmissions == 0, "unreliable mode never retransmits")
    }
}
