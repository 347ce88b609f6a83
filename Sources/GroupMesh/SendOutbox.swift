import MeshCore
import MeshCrypto
import NIOConcurrencyHelpers

/// Messages on their way from `Messenger.send` to the node, taken in batches.
///
/// An awaited call into the node hops to its event loop and back: two thread switches per
/// message, which cost more than the send itself, so a sender got out only as many messages as
/// the threads could switch. Queued here instead, the caller does not hop: the event loop takes
/// everything queued in one turn (one flush, writes batched), and a reliable send's caller is
/// resumed once, when its acknowledgements are in. Unreliable messages wait for nothing; their
/// caller waits only while `limit` bytes of them are queued, so a sender faster than the node
/// cannot grow the queue, and they are refused as soon as the node is leaving or ending (their
/// caller cannot be told later). Reliable ones are bounded by their callers, each waiting for its
/// own outcome, and always reach the node, which answers them.
package final class SendOutbox: Sendable {
    package typealias Reply = CheckedContinuation<Result<NodeResult, NodeError>, Never>

    package struct Item: Sendable {
        package let envelope: MessageEnvelope
        package let targets: [NodeID]?
        package let mode: DeliveryInstance.Mode
        package let timeout: Duration?
        /// Who waits for a reliable send's outcome (nil: an unreliable one, whose only failure
        /// is a recipient that is no member, skipped as a lost datagram would be).
        package let reply: Reply?

        package init(
            envelope: MessageEnvelope, targets: [NodeID]?, mode: DeliveryInstance.Mode, timeout: Duration?,
            reply: Reply?
        ) {
            self.envelope = envelope
            self.targets = targets
            self.mode = mode
            self.timeout = timeout
            self.reply = reply
        }
    }

    /// Bytes of unreliable messages queued before their caller waits for the node.
    package static let limit = 256 * 1024

    private struct State {
        var items: [Item] = []
        var unreliableBytes = 0
        var drainScheduled = false
        var waitingForRoom: [CheckedContinuation<Void, Never>] = []
        /// Why sends are refused from now on: the node is leaving, ending or stopped.
        var refusal: MessengerError?
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    /// Queues `item`; an unreliable one after waiting while the outbox is full. True when the
    /// caller must schedule the node's drain (none is scheduled yet); throws once sends are
    /// refused.
    package func push(_ item: Item) async throws(MessengerError) -> Bool {
        while true {
            let outcome: Result<Bool, MessengerError>? = state.withLockedValue { state in
                if let refusal = state.refusal { return .failure(refusal) }
                if item.reply == nil {
                    guard state.unreliableBytes < Self.limit else { return nil }
                    state.unreliableBytes += item.envelope.body.count
                }
                state.items.append(item)
                defer { state.drainScheduled = true }
                return .success(!state.drainScheduled)
            }
            if let outcome { return try outcome.get() }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let wait = state.withLockedValue { state in
                    guard state.refusal == nil, state.unreliableBytes >= Self.limit else { return false }
                    state.waitingForRoom.append(continuation)
                    return true
                }
                if !wait { continuation.resume() }
            }
        }
    }

    /// `push` for a reliable send, from a synchronous context (inside the continuation its
    /// caller waits on): never waits for room, and is not refused here: the node answers it
    /// (leaving, ending, or stopped, each with its own error). True when the caller must
    /// schedule the node's drain.
    package func pushReliable(_ item: Item) -> Bool {
        state.withLockedValue { state in
            state.items.append(item)
            defer { state.drainScheduled = true }
            return !state.drainScheduled
        }
    }

    /// Callers waiting for room, and messages queued (for tests).
    package var waitingForRoom: Int { state.withLockedValue { $0.waitingForRoom.count } }
    package var queuedCount: Int { state.withLockedValue { $0.items.count } }

    /// On the node: everything queued, in order; callers waiting for room go on.
    package func takeAll() -> [Item] {
        let (items, waiting) = state.withLockedValue { state in
            defer {
                state.items = []
                state.unreliableBytes = 0
                state.drainScheduled = false
                state.waitingForRoom = []
            }
            return (state.items, state.waitingForRoom)
        }
        for waiter in waiting { waiter.resume() }
        return items
    }

    /// The node takes no more sends (it is leaving or ending): every send from now on fails with
    /// `reason` (the first reason given stays). What is queued still goes to the node, which
    /// answers the reliable ones.
    package func refuse(_ reason: MessengerError) {
        let waiting = state.withLockedValue { state in
            state.refusal = state.refusal ?? reason
            defer { state.waitingForRoom = [] }
            return state.waitingForRoom
        }
        for waiter in waiting { waiter.resume() }
    }

    /// The node stopped: sends are refused (`reason`, unless one was given before), unreliable
    /// messages still queued are dropped, and reliable ones fail as `stopped`.
    package func close(_ reason: MessengerError) {
        refuse(reason)
        let items = takeAll()
        for item in items { item.reply?.resume(returning: .failure(.stopped)) }
    }
}

extension MeshNode {
    /// A message from the messenger, handed to the node without a hop to its event loop
    /// (`SendOutbox`). Returns how many members a reliable send reached (every one acknowledged);
    /// an unreliable send returns 0 once queued.
    nonisolated func queueMessage(
        _ envelope: MessageEnvelope, to targets: [NodeID]?, mode: DeliveryInstance.Mode, timeout: Duration?
    ) async throws(MessengerError) -> Int {
        guard envelope.body.count <= Messenger.maxMessageSize else {
            throw .tooLarge(size: envelope.body.count, limit: Messenger.maxMessageSize)
        }
        guard mode == .reliable else {
            let item = SendOutbox.Item(envelope: envelope, targets: targets, mode: mode, timeout: nil, reply: nil)
            if try await sendOutbox.push(item) { scheduleDrain() }
            return 0
        }
        let result = await withCheckedContinuation { (reply: SendOutbox.Reply) in
            let item = SendOutbox.Item(envelope: envelope, targets: targets, mode: mode, timeout: timeout, reply: reply)
            if sendOutbox.pushReliable(item) { scheduleDrain() }
        }
        // Only a failure needs the node (members' names for the error).
        if case let .success(.sent(recipients)) = result { return recipients }
        return try await sendOutcome(result).get()
    }

    private nonisolated func scheduleDrain() {
        eventLoop.execute { self.assumeIsolated { $0.drainSendOutbox() } }
    }

    /// Hands every queued message to the core, then writes what they made at once. Once the
    /// core takes no more sends, unreliable ones are refused from then on (reliable ones get the
    /// core's own answer).
    func drainSendOutbox() {
        let items = sendOutbox.takeAll()
        guard !closed else {
            for item in items { item.reply?.resume(returning: .failure(.stopped)) }
            return
        }
        if let refusal = sendRefusal { sendOutbox.refuse(refusal) }
        guard !items.isEmpty else { return }
        for item in items {
            let request = nextRequestID()
            if let reply = item.reply { register(.continuation(reply), for: request) }
            core.handle(
                .send(item.envelope, to: item.targets, mode: item.mode, timeout: item.timeout), request: request,
                now: now)
        }
        runEffects()
        rearm()
    }

    /// Why the core takes no more sends, if it does not: it is leaving or stopped (an end, ours
    /// or another member's, refuses them where it begins).
    var sendRefusal: MessengerError? { core.phase.isActive ? nil : notRunningReason }
}
