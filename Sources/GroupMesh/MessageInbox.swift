import MeshCore
import NIOConcurrencyHelpers
import NIOCore

/// The messages waiting for one `Messenger.messages(of:)` sequence, and how far its reader is
/// behind: the receive-side flow control of the Swift API, as a `listen`'s backlog is for the
/// command line (Docs/PROTOCOL.md §5, Flow control).
///
/// Over `behindBytes` queued, the node is told the reader is behind: it takes no new application
/// message from its peers, whose senders hold them. It is told again each time the reader took
/// `progressBytes` more (so a reader that keeps reading is not declared stalled), and told that it
/// caught up once under `caughtUpBytes`. Unreliable messages are dropped while it is behind. A
/// reader the node declared stalled (it took nothing for the stall limit), or one behind for
/// `maxBehind` however much it read, holds the node no longer: it keeps the newest `stalledLimit`
/// messages (and at most `stalledBytes`), dropping older ones, until it catches up.
/// Drops are counted, never silent.
package final class MessageInbox: @unchecked Sendable {
    package static let behindBytes = 1 << 20
    package static let caughtUpBytes = 256 << 10
    package static let progressBytes = 64 << 10
    package static let stalledLimit = 4_096
    /// A stalled reader keeps at most this many bytes, however few the messages.
    package static let stalledBytes = 4 << 20
    /// Behind for this long, however much it reads, a reader holds the node no longer: one
    /// slower than what comes would hold every pair's journal for good (a `listen` is cut).
    static let maxBehind = Duration.seconds(30)

    /// The reader's id as an application consumer of the node.
    package let consumer: UInt64
    /// Messages of other types never wait here: a sequence nobody reads must not hold the others.
    package let accepts: @Sendable (NodeMessage) -> Bool
    /// How the reader's progress reaches the node (on the node's actor, in order).
    private let report: @Sendable (ConsumerFlow.Report) async -> Void

    private let lock = NIOLock()
    private var queue = CircularBuffer<NodeMessage>()
    private var queuedBytes = 0
    private var waiter: CheckedContinuation<NodeMessage?, Never>?
    private var finished = false
    private var behind = false
    private var stalled = false
    private var takenSinceReport = 0
    private var behindSince = ContinuousClock.now
    private var peak = 0

    /// The most bytes that waited at once.
    package var peakBytes: Int { lock.withLock { peak } }
    /// Whether the reader is behind now (holding the node).
    package var isBehind: Bool { lock.withLock { behind } }
    /// Whether a reader waits for the next message.
    package var hasWaitingReader: Bool { lock.withLock { waiter != nil } }

    package init(
        consumer: UInt64, accepts: @escaping @Sendable (NodeMessage) -> Bool,
        report: @escaping @Sendable (ConsumerFlow.Report) async -> Void
    ) {
        self.consumer = consumer
        self.accepts = accepts
        self.report = report
    }

    /// What handing one message over did, for the node.
    package struct Delivery {
        /// Behind now: the node holds new application messages.
        package var fellBehind = false
        /// Messages dropped for this reader (an unreliable one while behind, or the oldest of a
        /// stalled reader's).
        package var dropped = 0
    }

    /// On the node: one received message for this reader.
    package func deliver(_ message: NodeMessage) -> Delivery {
        var delivery = Delivery()
        let resumed: CheckedContinuation<NodeMessage?, Never>? = lock.withLock {
            guard !finished else { return nil }
            if let waiter {
                self.waiter = nil
                return waiter
            }
            if behind || stalled, message.mode == .unreliable {
                delivery.dropped = 1
                return nil
            }
            queue.append(message)
            queuedBytes += message.body.count
            peak = max(peak, queuedBytes)
            if stalled {
                while queue.count > Self.stalledLimit || (queue.count > 1 && queuedBytes > Self.stalledBytes),
                    let oldest = queue.popFirst()
                {
                    queuedBytes -= oldest.body.count
                    delivery.dropped += 1
                }
            } else if !behind, queuedBytes > Self.behindBytes {
                behind = true
                takenSinceReport = 0
                behindSince = .now
                delivery.fellBehind = true
            }
            return nil
        }
        resumed?.resume(returning: message)
        return delivery
    }

    /// On the node: the reader took nothing for the stall limit. It no longer holds the node.
    package func markStalled() {
        lock.withLock {
            guard behind else { return }
            behind = false
            stalled = true
        }
    }

    /// On the node, once it stops: what is queued can still be read, then the sequence ends.
    package func finish() {
        let resumed: CheckedContinuation<NodeMessage?, Never>? = lock.withLock {
            finished = true
            defer { waiter = nil }
            return waiter
        }
        resumed?.resume(returning: nil)
    }

    /// The reader: the next message, waiting for one; nil once the node stopped and everything
    /// queued was read, or when the reading task is cancelled.
    package func next() async -> NodeMessage? {
        if let taken = take() {
            if let progress = taken.progress { await report(progress) }
            return taken.message
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<NodeMessage?, Never>) in
                let ready: NodeMessage?? = lock.withLock {
                    if let message = queue.popFirst() {
                        queuedBytes -= message.body.count
                        return .some(message)
                    }
                    // One reader at a time: a second one waiting at once is ended, not left hanging.
                    if finished || Task.isCancelled || waiter != nil { return .some(nil) }
                    waiter = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let resumed: CheckedContinuation<NodeMessage?, Never>? = lock.withLock {
                defer { waiter = nil }
                return waiter
            }
            resumed?.resume(returning: nil)
        }
    }

    /// The oldest queued message, and what the node is to hear of the reader's progress.
    private func take() -> (message: NodeMessage, progress: ConsumerFlow.Report?)? {
        lock.withLock {
            guard let message = queue.popFirst() else { return nil }
            queuedBytes -= message.body.count
            guard behind || stalled else { return (message, nil) }
            if queuedBytes < Self.caughtUpBytes {
                behind = false
                stalled = false
                return (message, .caughtUp)
            }
            guard behind else { return (message, nil) }
            takenSinceReport += message.body.count
            guard takenSinceReport >= Self.progressBytes else { return (message, nil) }
            takenSinceReport = 0
            guard ContinuousClock.now - behindSince < Self.maxBehind else {
                // Too slow for too long: it keeps the newest, and the node takes messages again.
                behind = false
                stalled = true
                return (message, .caughtUp)
            }
            return (message, .behind)
        }
    }
}

/// The node's readers, held weakly: a sequence the app let go of holds nothing.
struct MessageInboxes {
    private struct Entry {
        weak var inbox: MessageInbox?
        package let consumer: UInt64
    }
    private var entries: [Entry] = []
    /// Once the node stopped: a reader asked for later ends at once.
    private var isFinished = false

    var isEmpty: Bool { entries.isEmpty }

    mutating func add(_ inbox: MessageInbox) {
        guard !isFinished else { return inbox.finish() }
        entries.append(Entry(inbox: inbox, consumer: inbox.consumer))
    }

    /// Hands each live reader to `body` (once per received message: no array is built); a reader
    /// the app let go of is dropped, and `gone` gets its consumer id.
    mutating func forEachLive(gone: (UInt64) -> Void, _ body: (MessageInbox) -> Void) {
        var sawGone = false
        for entry in entries {
            if let inbox = entry.inbox {
                body(inbox)
            } else {
                sawGone = true
                gone(entry.consumer)
            }
        }
        if sawGone { entries.removeAll { $0.inbox == nil } }
    }

    func inbox(_ consumer: UInt64) -> MessageInbox? {
        entries.first { $0.consumer == consumer }?.inbox
    }

    mutating func finishAll() {
        isFinished = true
        for entry in entries { entry.inbox?.finish() }
        entries = []
    }
}
