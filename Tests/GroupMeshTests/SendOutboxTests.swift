import Foundation
import GroupMesh
import MeshCore
import MeshCrypto
import NIOConcurrencyHelpers
import Testing

/// The queue between `Messenger.send` and the node: order kept, one drain scheduled per batch,
/// unreliable senders held while it is full and refused once the node takes no more, reliable
/// ones failed once it stopped.
@Suite("Send outbox")
struct SendOutboxTests {
    static func item(_ size: Int, tag: UInt8 = 0, reliable: SendOutbox.Reply? = nil) -> SendOutbox.Item {
        SendOutbox.Item(
            envelope: MessageEnvelope(type: "data", body: [UInt8](repeating: tag, count: size)), targets: nil,
            mode: reliable == nil ? .unreliable : .reliable, timeout: nil, reply: reliable)
    }

    /// Fills the outbox to its limit with unreliable messages.
    static func fill(_ outbox: SendOutbox) async throws {
        let chunk = 64 * 1024
        for _ in 0..<(SendOutbox.limit / chunk) { _ = try await outbox.push(item(chunk)) }
    }

    /// Waits (bounded) until `count` senders wait for room.
    static func waitForWaiters(_ outbox: SendOutbox, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while outbox.waitingForRoom < count, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(outbox.waitingForRoom == count)
    }

    @Test("the first message of a batch asks for the drain; the drain takes all, in order")
    func batchesInOrder() async throws {
        let outbox = SendOutbox()
        #expect(try await outbox.push(Self.item(10, tag: 1)) == true)
        #expect(try await outbox.push(Self.item(10, tag: 2)) == false)
        #expect(outbox.pushReliable(Self.item(10, tag: 3)) == false)
        #expect(outbox.takeAll().map { $0.envelope.body.first } == [1, 2, 3])
        #expect(outbox.takeAll().isEmpty)
        #expect(try await outbox.push(Self.item(10, tag: 4)) == true, "a new batch asks again")
    }

    @Test("an unreliable sender waits while the outbox is full, and goes on once it is drained")
    func fullOutboxHoldsUnreliableSenders() async throws {
        let outbox = SendOutbox()
        try await Self.fill(outbox)
        let sender = Task { try await outbox.push(Self.item(10, tag: 9)) }
        try await Self.waitForWaiters(outbox, 1)
        #expect(outbox.takeAll().count == SendOutbox.limit / (64 * 1024))
        #expect(try await sender.value == true)
        #expect(outbox.takeAll().map { $0.envelope.body.first } == [9])
    }

    @Test("refused: unreliable senders, waiting or new, get the reason; reliable ones still go to the node")
    func refusalStopsUnreliableSends() async throws {
        let outbox = SendOutbox()
        try await Self.fill(outbox)
        let waiting = Task { () -> MessengerError? in
            do throws(MessengerError) {
                _ = try await outbox.push(Self.item(10))
                return nil
            } catch { return error }
        }
        try await Self.waitForWaiters(outbox, 1)
        outbox.refuse(.sessionEnded(by: "ann"))
        outbox.refuse(.notRunning)
        #expect(await waiting.value == .sessionEnded(by: "ann"), "the first reason stays")
        await #expect(throws: MessengerError.sessionEnded(by: "ann")) { try await outbox.push(Self.item(1)) }
        _ = outbox.pushReliable(Self.item(1, tag: 7))
        #expect(outbox.takeAll().last?.envelope.body.first == 7)
    }

    @Test("closed: queued reliable sends fail as stopped and nothing stays queued")
    func closeFailsReliableSends() async throws {
        let outbox = SendOutbox()
        let reliable = Task {
            await withCheckedContinuation { (reply: SendOutbox.Reply) in
                _ = outbox.pushReliable(Self.item(10, reliable: reply))
            }
        }
        // Bounded: the task queues its send before anything closes.
        let deadline = ContinuousClock.now + .seconds(10)
        while outbox.queuedCount == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        outbox.close(.notRunning)
        #expect(await reliable.value == .failure(.stopped))
        #expect(outbox.takeAll().isEmpty)
        await #expect(throws: MessengerError.notRunning) { try await outbox.push(Self.item(1)) }
    }
}
