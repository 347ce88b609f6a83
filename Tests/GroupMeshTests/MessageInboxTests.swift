import Foundation
import GroupMesh
import MeshCore
import MeshCrypto
import MeshTestKit
import NIOConcurrencyHelpers
import Testing

/// The Swift API's receive-side flow control: a `messages(of:)` reader that falls behind holds
/// the node's intake, as a `listen` does, instead of queueing without bound.
@Suite("Message inbox")
struct MessageInboxTests {
    static func message(_ index: Int, size: Int, mode: DeliveryInstance.Mode = .reliable) -> NodeMessage {
        var body = [UInt8](repeating: 0, count: size)
        withUnsafeBytes(of: UInt32(index).bigEndian) { body.replaceSubrange(0..<4, with: $0) }
        return NodeMessage(from: NodeID(high: 1, low: 1), fromName: "a", mode: mode, type: "data", body: body)
    }

    static func index(_ message: NodeMessage?) -> Int? {
        message.map { Int($0.body[0]) << 24 | Int($0.body[1]) << 16 | Int($0.body[2]) << 8 | Int($0.body[3]) }
    }

    static func inbox(_ reports: NIOLockedValueBox<[ConsumerFlow.Report]>) -> MessageInbox {
        MessageInbox(consumer: 7, accepts: { $0.type == "data" }) { report in
            reports.withLockedValue { $0.append(report) }
        }
    }

    @Test(
        "behind over 1 MiB (said once), unreliable dropped meanwhile, progress said as it reads, caught up under 256 KiB"
    )
    func behindAndCaughtUp() async {
        let reports = NIOLockedValueBox<[ConsumerFlow.Report]>([])
        let inbox = Self.inbox(reports)
        var fell = 0
        for index in 0..<20 {
            let delivery = inbox.deliver(Self.message(index, size: 64 << 10))
            if delivery.fellBehind { fell += 1 }
            #expect(delivery.dropped == 0)
        }
        #expect(fell == 1, "behind is said once, when the queue passes 1 MiB")
        #expect(inbox.deliver(Self.message(99, size: 100, mode: .unreliable)).dropped == 1)
        var order: [Int] = []
        for _ in 0..<20 { order.append(Self.index(await inbox.next()) ?? -1) }
        #expect(order == Array(0..<20), "in order, the unreliable one dropped")
        let said = reports.withLockedValue { $0 }
        #expect(said.last == .caughtUp && said.filter { $0 == .caughtUp }.count == 1, "\(said)")
        #expect(said.dropLast().allSatisfy { $0 == .behind } && said.count > 2, "progress while behind: \(said)")
        #expect(inbox.peakBytes == 20 << 16)
        // Caught up: unreliable messages wait again.
        #expect(inbox.deliver(Self.message(100, size: 100, mode: .unreliable)).dropped == 0)
    }

    @Test("a stalled reader holds nothing and keeps the newest 4,096; reading it down says caught up")
    func stalledKeepsTheNewest() async {
        let reports = NIOLockedValueBox<[ConsumerFlow.Report]>([])
        let inbox = Self.inbox(reports)
        for index in 0..<17 { _ = inbox.deliver(Self.message(index, size: 64 << 10)) }
        inbox.markStalled()
        var dropped = 0
        for index in 17..<(17 + MessageInbox.stalledLimit + 100) {
            let delivery = inbox.deliver(Self.message(index, size: 16))
            #expect(!delivery.fellBehind, "a stalled reader is not behind again")
            dropped += delivery.dropped
        }
        #expect(dropped == 117, "the oldest beyond the newest 4,096 are dropped and counted")
        #expect(Self.index(await inbox.next()) == 117)
        #expect(reports.withLockedValue { $0 } == [.caughtUp], "under 256 KiB: caught up (it holds again when behind)")
    }

    @Test("a stalled reader keeps at most 4 MiB however few the messages; a second reader waiting at once is ended")
    func stalledBytesAndOneReader() async throws {
        let reports = NIOLockedValueBox<[ConsumerFlow.Report]>([])
        let inbox = Self.inbox(reports)
        for index in 0..<5 { _ = inbox.deliver(Self.message(index, size: 256 << 10)) }
        inbox.markStalled()
        var dropped = 0
        for index in 5..<40 { dropped += inbox.deliver(Self.message(index, size: 256 << 10)).dropped }
        #expect(dropped == 24, "the oldest beyond 4 MiB (16 messages of 256 KiB) are dropped")
        #expect(Self.index(await inbox.next()) == 24)

        let idle = Self.inbox(reports)
        let first = Task { await idle.next() }
        try await waitUntil("the first reader waits", timeout: .seconds(10)) { idle.hasWaitingReader }
        #expect(await idle.next() == nil, "a second reader at once is ended, not left hanging")
        _ = idle.deliver(Self.message(7, size: 10))
        #expect(Self.index(await first.value) == 7, "the first still gets what comes")
    }

    @Test(
        "after the node stops, what waits is still read, then the sequence ends; a cancelled wait ends it for that task only"
    )
    func finishAndCancel() async {
        let reports = NIOLockedValueBox<[ConsumerFlow.Report]>([])
        let inbox = Self.inbox(reports)
        let waiting = Task { await inbox.next() }
        waiting.cancel()
        #expect(await waiting.value == nil)
        _ = inbox.deliver(Self.message(1, size: 10))
        inbox.finish()
        #expect(Self.index(await inbox.next()) == 1, "delivered after a cancelled wait, before the stop")
        #expect(await inbox.next() == nil)
        #expect(inbox.deliver(Self.message(2, size: 10)).dropped == 0)
        #expect(await inbox.next() == nil, "nothing is taken after the stop")
    }

    @Test("in process: a reader that reads late gets every reliable message in order, and the node held them meanwhile")
    func readerHoldsTheNode() async throws {
        let sessions = try await MessengerTests.cluster(["ada", "bea"])
        defer { Task { await MessengerTests.tearDown(sessions) } }
        let ada = Messenger(session: sessions[0], timeout: .seconds(60))
        let inbox = await Messenger(session: sessions[1]).messages(of: Data.self)
        let count = 96
        let outcomes = NIOLockedValueBox<[Int: Bool]>([:])
        for index in 0..<count {
            var body = Data(count: 64 << 10)
            body[0] = UInt8(index)
            ada.send(body, to: .all) { error in outcomes.withLockedValue { $0[index] = error == nil } }
        }
        // Nobody reads: the queue passes its bound and the node holds what is still to come.
        try await waitUntil("the reader fell behind", timeout: .seconds(30)) {
            inbox.inbox.peakBytes > MessageInbox.behindBytes
        }
        let received = await MessengerTests.collect(inbox, count: count, within: .seconds(60))
        #expect(received.map { Int($0.0[0]) } == Array(0..<count), "every message, in order")
        #expect(
            // Over the bound by at most what was acknowledged before the hold: a window and a message.
            inbox.inbox.peakBytes <= MessageInbox.behindBytes + (1 << 20) + (64 << 10),
            "what waited stayed near the bound (\(inbox.inbox.peakBytes) bytes) instead of all \(count << 16)")
        try await waitUntil("every send completed", timeout: .seconds(30)) {
            outcomes.withLockedValue { $0.count } == count
        }
        #expect(outcomes.withLockedValue { $0.values.allSatisfy { $0 } }, "every send was delivered")
        #expect(await sessions[1].node.status().counters.messagesDroppedForSlowReaders == 0)
    }
}
