import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Receive-side flow control of the messenger (Docs/PROTOCOL.md §5, Flow control): while the
/// node's application consumer is behind, no new application message is taken (so none is
/// acknowledged); a consumer that drains nothing for the stall limit stops holding.
@Suite("Application consumer flow control")
struct ConsumerFlowTests {
    static let start = MeshInstant.zero

    static func at(_ milliseconds: Int64) -> MeshInstant { start + .milliseconds(milliseconds) }

    // MARK: the parts

    @Test("a held receiver refuses new application chunks, takes journal ones, advertises no window")
    func receiverHoldsApplicationChunks() {
        var receiver = ReliableReceiver(capacity: 64 * 1024)
        #expect(receiver.onData(DataChunk(tsn: 1, flags: 3, body: [1])).count == 1)
        receiver.holdsApplication = true
        #expect(receiver.onData(DataChunk(tsn: 2, flags: 3, body: [2])).isEmpty)
        #expect(receiver.cumulative == 1 && receiver.refused == 1 && receiver.refusedWhileHeld)
        #expect(receiver.ack.window == 0 && receiver.ack.ranges.isEmpty, "nothing of it acknowledged")
        // A journal chunk behind the refused one waits (in order), acknowledged as a range.
        #expect(receiver.onData(DataChunk(tsn: 3, flags: 3, body: [3], stream: .journal)).isEmpty)
        #expect(receiver.ack.ranges == [3...3])
        receiver.holdsApplication = false
        let delivered = receiver.onData(DataChunk(tsn: 2, flags: 3, body: [2]))
        #expect(delivered.map(\.payload) == [[2], [3]] && delivered.map(\.stream) == [.application, .journal])
        #expect(receiver.ack.window > 0)
    }

    @Test("a sender whose peer's window reopens sends again what went into the closed window, at once")
    func senderResendsWhenTheWindowReopens() {
        var sender = ReliableSender()
        sender.enqueue(messageID: 1, payload: [UInt8](repeating: 7, count: 3000), fragmentSize: 1000)
        let now = Self.start
        _ = sender.onAck(DeliveryAck(cumulative: 0, window: 0), now: now)
        let probe = sender.nextFrames(budget: 1 << 20, now: now)
        #expect(!probe.isEmpty, "a zero window still lets the minimum window go, as a probe")
        #expect(sender.nextFrames(budget: 1 << 20, now: now).isEmpty)
        // The receiver refused them and says its window is open again: no timeout needed.
        _ = sender.onAck(DeliveryAck(cumulative: 0, window: 64 * 1024), now: now + .milliseconds(1))
        let again = sender.nextFrames(budget: 1 << 20, now: now + .milliseconds(1))
        #expect(again.count == probe.count && sender.retransmissions == UInt64(probe.count))
    }

    @Test("a consumer that drains nothing for the limit is declared stalled and holds no more")
    func stalledConsumerStopsHolding() {
        var flow = ConsumerFlow(stallLimit: .seconds(3))
        flow.report(1, .behind, now: Self.at(0))
        flow.report(2, .behind, now: Self.at(0))
        flow.report(2, .behind, now: Self.at(2_000))  // consumer 2 drained some
        #expect(flow.nextDeadline == Self.at(3_000))
        #expect(flow.expire(now: Self.at(2_999)).isEmpty)
        #expect(flow.expire(now: Self.at(3_000)) == [1])
        #expect(flow.isHolding, "consumer 2 is behind but draining")
        flow.report(1, .behind, now: Self.at(3_100))
        #expect(flow.expire(now: Self.at(5_000)) == [2] && !flow.isHolding, "a stalled one cannot hold again")
        flow.report(1, .caughtUp, now: Self.at(5_100))
        flow.report(1, .behind, now: Self.at(5_200))
        #expect(flow.isHolding, "once caught up (reconnected), it counts again")
    }

    // MARK: in simulation

    static let link = LinkConditions(
        delay: .milliseconds(2), jitter: .milliseconds(1), lossProbability: 0.02,
        reorderProbability: 0.02, reorderDelay: .milliseconds(5))

    static func settings() -> DeliveryInstance.Settings {
        var settings = DeliveryInstance.Settings()
        settings.receiveCapacity = 128 * 1024
        return settings
    }

    @Test(
        "a slow consumer gets every acknowledged message; what waits for it stays bounded",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func slowConsumerGetsEverything(seed: UInt64) {
        let mesh = DeliveryMesh(count: 2, seed: seed, link: Self.link, settings: Self.settings())
        let (sender, receiver) = (mesh.nodes[0], mesh.nodes[1])
        let bound = 64 * 1024
        // 960 KiB to a reader of 300 KiB/s: it is behind most of the time, never stalled.
        mesh[receiver].addConsumer(bound: bound, bytesPerSecond: 300 * 1024, from: Self.start)
        let expected = (0..<60).map { numberedPayload(from: 0, sequence: $0, size: 16 * 1024) }
        for (index, payload) in expected.enumerated() {
            mesh[sender].planSend(
                "m\(index)", at: Self.at(Int64(index)), payload: payload, to: [receiver],
                timeout: .seconds(60))
        }
        let outcome = mesh.simulator.run(until: Self.at(30_000), checkEvery: .milliseconds(50)) { _ in
            (0..<60).allSatisfy { mesh[sender].completion("m\($0)") != nil }
        }
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome == .satisfied, "\(replay): not all sends completed by \(mesh.simulator.now)")
        #expect((0..<60).allSatisfy { mesh[sender].completion("m\($0)")?.failures == [:] }, "\(replay)")
        expectMessages(mesh[receiver].payloads(from: sender), expected, "\(replay):")
        let consumer = mesh[receiver].consumer
        #expect(consumer?.behindSince != nil, "\(replay): the consumer did fall behind")
        #expect(mesh[receiver].stalledConsumerAt == nil, "\(replay): a draining consumer is never cut off")
        // Held, the node hands it only what it had acknowledged already: the messages of the
        // receive buffer and the one in hand. Unheld, it would queue most of the 960 KiB.
        let ceiling = bound + Self.settings().receiveCapacity + 16 * 1024
        #expect((consumer?.largestQueued ?? .max) <= ceiling, "\(replay): \(consumer?.largestQueued ?? -1) queued")
        #expect(mesh.violations.isEmpty, "\(replay): \(mesh.violations.prefix(3))")
    }

    @Test(
        "a stalled consumer holds acceptance only for the stall limit; nothing is acknowledged meanwhile",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func stalledConsumerIsCutOff(seed: UInt64) {
        let mesh = DeliveryMesh(count: 2, seed: seed, link: Self.link, settings: Self.settings())
        let (sender, receiver) = (mesh.nodes[0], mesh.nodes[1])
        let limit = Self.settings().consumerStallLimit
        mesh[receiver].addConsumer(bound: 64 * 1024, bytesPerSecond: 0, from: Self.start)
        for index in 0..<40 {
            let payload = numberedPayload(from: 0, sequence: index, size: 16 * 1024)
            mesh[sender].planSend(
                "m\(index)", at: Self.at(Int64(index)), payload: payload, to: [receiver],
                timeout: .seconds(60))
        }
        // Sent while held, with a timeout shorter than the stall: it fails, honestly, and is skipped.
        mesh[sender].planSend("short", at: Self.at(500), payload: [1, 2, 3], to: [receiver], timeout: .seconds(1))
        let outcome = mesh.simulator.run(until: Self.at(30_000), checkEvery: .milliseconds(50)) { _ in
            (0..<40).allSatisfy { mesh[sender].completion("m\($0)") != nil }
        }
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome == .satisfied, "\(replay): not all sends completed by \(mesh.simulator.now)")
        guard let stalledAt = mesh[receiver].stalledConsumerAt else {
            Issue.record("\(replay): the stalled consumer was never cut off")
            return
        }
        let behindSince = mesh[receiver].consumerBehindSinceWhenCut ?? Self.start
        #expect(
            stalledAt - behindSince >= limit && stalledAt - behindSince < limit + .milliseconds(100),
            "\(replay): behind at \(behindSince), cut off at \(stalledAt)")
        // Between falling behind (plus a round trip for acks already under way) and the cut,
        // nothing was acknowledged: no send was told "delivered" for a message not taken.
        let heldCompletions = (0..<40).compactMap { mesh[sender].completion("m\($0)")?.time }
            .filter { $0 > behindSince + .milliseconds(50) && $0 < stalledAt }
        #expect(heldCompletions.isEmpty, "\(replay): \(heldCompletions.count) sends completed while held")
        #expect((0..<40).allSatisfy { mesh[sender].completion("m\($0)")?.failures == [:] }, "\(replay)")
        let shortFailures = mesh[sender].completion("short")?.failures
        #expect(shortFailures == [DeliveryProcess.nodeID(receiver): .timedOut], "\(replay)")
        #expect(!mesh[receiver].payloads(from: sender).contains([1, 2, 3]), "\(replay): the abandoned one is skipped")
        #expect(mesh.violations.isEmpty, "\(replay): \(mesh.violations.prefix(3))")
    }
}
