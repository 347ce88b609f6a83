import Foundation
import GroupMesh
import MeshCore
import MeshCrypto
import NIOConcurrencyHelpers
import Testing

/// The queue between `Messenger.send` and the node: order kept, one drain scheduled per batch,
/// unreliable senders held while it is full, everything failed once the node stopped.
@Suite("Send outbox")
struct SendOutboxTests {
    static func item(_ size: Int, tag: UInt8 = 0, reliable: SendOutbox.Reply? = nil) -> SendOutbox.Item {
        SendOutbox.Item(
            envelope: MessageEnvelope(type: "data", body: [UInt8](repeating: tag, count: size)), targets: nil,
            mode: reliable == nil ? .unreliable : .reliable, timeout: nil, reply: reliable)
    }

    @Test("the first message of a batch asks for the drain; the drain takes all, in order")
    func batchesInOrder() async {
        let outbox = SendOutbox()
        #expect(await outbox.push(Self.item(10, tag: 1)) == true)
        #expect(await outbox.push(Self.item(10, tag: 2)) == false)
        #expect(outbox.pushReliable(Self.item(10, tag: 3)) == false)
        #expect(outbox.takeAll().map { $0.envelope.body.first } == [1, 2, 3])
        #expect(outbox.takeAll().isEmpty)
        #expect(await outbox.push(Self.item(10, tag: 4)) == true, "a new batch asks again")
    }

    @Test("an unreliable sender waits while the outbox is full, and goes on once it is drained")
    func fullOutboxHoldsUnreliableSenders() async throws {
        let outbox = SendOutbox()
        let chunk = 64 * 1024
        for _ in 0..<(SendOutbox.limit / chunk) { _ = await outbox.push(Self.item(chunk)) }
        let done = NIOLockedValueBox(false)
        let sender = Task {
            _ = await outbox.push(Self.item(chunk, tag: 9))
            done.withLockedValue { $0 = true }
        }
        // Nothing frees room, so the sender must still be waiting after its task has had turns.
        for _ in 0..<50 { await Task.yield() }
        #expect(!done.withLockedValue { $0 })
        #expect(outbox.takeAll().count == SendOutbox.limit / chunk)
        await sender.value
        #expect(outbox.takeAll().map { $0.envelope.body.first } == [9])
    }

    @Test("once the node stopped: queued reliable sends fail, waiting senders go on, new sends are refused")
    func closeFailsEverything() async throws {
        let outbox = SendOutbox()
        let chunk = 64 * 1024
        for _ in 0..<(SendOutbox.limit / chunk) { _ = await outbox.push(Self.item(chunk)) }
        let waiting = Task { await outbox.push(Self.item(chunk)) }
        let reliable = Task {
            await withCheckedContinuation { (reply: SendOutbox.Reply) in
                _ = outbox.pushReliable(Self.item(10, reliable: reply))
            }
        }
        for _ in 0..<50 { await Task.yield() }
        outbox.close()
        #expect(await waiting.value == nil)
        #expect(await reliable.value == .failure(.stopped))
        #expect(await outbox.push(Self.item(1)) == nil)
        #expect(outbox.takeAll().isEmpty)
    }
}
