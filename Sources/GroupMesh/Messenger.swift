import Foundation
import MeshCore
import MeshCrypto

/// Who sent a message, and how (GroupSessionMessenger.MessageContext).
public struct MessageContext: Sendable {
    public let source: Participant
    public let mode: Messenger.DeliveryMode
}

/// A message type that names itself on the wire, where its type name alone would be ambiguous
/// (two types of one name in different modules) or would change (a rename).
public protocol MessengerTagged {
    static var messengerTag: String { get }
}

/// Small messages to all members or a chosen few, the equivalent of GroupSessionMessenger.
///
/// ```swift
/// let messenger = Messenger(session: session)
/// try await messenger.send(PenStroke(point: p), to: .all)
/// for await (stroke, context) in await messenger.messages(of: PenStroke.self) { … }
/// ```
///
/// `.reliable` sends return once every target acknowledged, and throw
/// `MessengerError.notDelivered` naming those that did not (no acknowledgement before the
/// deadline, or gone meanwhile); later messages are never held up by one given up on.
/// `.unreliable` sends are best effort: they return once queued for the node (waiting only while
/// 256 KiB of them are queued), and a recipient that is no member is skipped, as a lost datagram
/// would be. Either throws once the session is left or ended. Bodies are limited to 256 KiB.
public final class Messenger: Sendable {
    public static let maxMessageSize = 256 * 1024
    /// The type tag of raw `Data` messages (and of `groupmesh send`).
    public static let dataType = "data"

    public enum DeliveryMode: Sendable, Equatable {
        case reliable
        case unreliable

        var wire: DeliveryInstance.Mode { self == .reliable ? .reliable : .unreliable }
    }

    /// Who a message goes to (GroupSessionMessenger's `Participants`). The local participant in
    /// a set is skipped, not an error.
    public enum Recipients: Sendable {
        case all
        case only(Set<Participant>)

        public static func only(_ participant: Participant) -> Recipients { .only([participant]) }
    }

    /// Why a member did not acknowledge a reliable message.
    public enum DeliveryFailure: String, Sendable, Equatable {
        /// No acknowledgement before the send's timeout.
        case timedOut
        /// It left or was declared dead first.
        case departed
        /// Not a member this node can reach (not known, or no keys yet).
        case unreachable
    }

    public let session: MeshSession
    public let deliveryMode: DeliveryMode
    /// How long a reliable send waits for acknowledgements.
    public let timeout: Duration

    /// The sends of the completion-handler form, in the order they were made: one task hands them
    /// to the node one after another, so they keep that order as awaited sends do.
    private let submissions: AsyncStream<Submission>.Continuation

    public init(session: MeshSession, deliveryMode: DeliveryMode = .reliable, timeout: Duration = .seconds(10)) {
        self.session = session
        self.deliveryMode = deliveryMode
        self.timeout = timeout
        let (queue, submissions) = AsyncStream.makeStream(of: Submission.self)
        self.submissions = submissions
        let node = session.node
        Task {
            for await submission in queue {
                await node.submitMessage(
                    submission.envelope, to: submission.targets, mode: submission.mode,
                    timeout: submission.timeout
                ) { result in
                    // Off the node's executor: the app's code never holds up the node. An
                    // unreliable send skips a recipient that is no member, as the async form does.
                    let error: (any Error)? =
                        switch result {
                        case .failure(.notDelivered) where submission.mode == .unreliable: nil
                        case let .failure(error): error
                        case .success: nil
                        }
                    Task { submission.completion(error) }
                }
            }
        }
    }

    /// Sends already asked for still go; the task that hands them over ends after the last.
    deinit { submissions.finish() }

    public func send(_ data: Data, to recipients: Recipients = .all) async throws {
        try await send(MessageEnvelope(type: Self.dataType, body: Array(data)), to: recipients)
    }

    public func send<Message: Codable & Sendable>(_ value: Message, to recipients: Recipients = .all) async throws {
        try await send(try Self.envelope(value), to: recipients)
    }

    /// Sends `data` and calls `completion` once, with nil or the error the async form would have
    /// thrown (GroupSessionMessenger's `send(_:to:completion:)`). Returns at once; successive sends
    /// go out in the order they were made. `completion` runs on a task of its own, not on the
    /// caller's thread or queue: hop to your main actor or queue to touch UI state.
    public func send(
        _ data: Data, to recipients: Recipients = .all,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        enqueue(MessageEnvelope(type: Self.dataType, body: Array(data)), to: recipients, completion: completion)
    }

    /// Sends an `Encodable` value, as `send(_:to:completion:)` for `Data` (a value that does not
    /// encode is handed to `completion` as the error, and nothing is sent).
    public func send<Message: Encodable>(
        _ value: Message, to recipients: Recipients = .all,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        do {
            enqueue(try Self.envelope(value), to: recipients, completion: completion)
        } catch {
            Task { completion(error) }
        }
    }

    private static func envelope<Message: Encodable>(_ value: Message) throws -> MessageEnvelope {
        MessageEnvelope(type: typeTag(Message.self), body: Array(try JSONEncoder().encode(value)))
    }

    private func enqueue(
        _ envelope: MessageEnvelope, to recipients: Recipients,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        let submission = Submission(
            envelope: envelope, targets: Self.targets(recipients), mode: deliveryMode.wire,
            timeout: deliveryMode == .reliable ? timeout : nil, completion: completion)
        if case .terminated = submissions.yield(submission) { Task { completion(MessengerError.notRunning) } }
    }

    private struct Submission: Sendable {
        let envelope: MessageEnvelope
        let targets: [NodeID]?
        let mode: DeliveryInstance.Mode
        let timeout: Duration?
        let completion: @Sendable ((any Error)?) -> Void
    }

    /// Received values of one type, with their context; other types are not seen here. A reader
    /// that falls more than 1 MiB behind holds the node's intake, as a `listen` does: senders
    /// keep their reliable messages until it reads (Docs/PROTOCOL.md §5, Flow control).
    public func messages<Message: Codable & Sendable>(of type: Message.Type) async -> Messages<Message> {
        let tag = Self.typeTag(type)
        return await messages(tag: tag) { envelope in
            try? JSONDecoder().decode(Message.self, from: Data(envelope.body))
        }
    }

    /// Received raw `Data` messages (including those sent by `groupmesh send`).
    public func messages(of type: Data.Type) async -> Messages<Data> {
        await messages(tag: Self.dataType) { envelope in Data(envelope.body) }
    }

    /// `codable:` and the type's name without its module, so that an app and a tool built as
    /// different modules exchange the same type; `MessengerTagged` names it explicitly.
    static func typeTag<Message>(_ type: Message.Type) -> String {
        if let tagged = type as? any MessengerTagged.Type { return "codable:" + tagged.messengerTag }
        return "codable:" + String(describing: type)
    }

    private func send(_ envelope: MessageEnvelope, to recipients: Recipients) async throws {
        _ = try await session.node.queueMessage(
            envelope, to: Self.targets(recipients), mode: deliveryMode.wire,
            timeout: deliveryMode == .reliable ? timeout : nil)
    }

    private static func targets(_ recipients: Recipients) -> [NodeID]? {
        switch recipients {
        case .all: nil
        case let .only(participants): participants.map(\.node)
        }
    }

    private func messages<Value: Sendable>(
        tag: String, decode: @escaping @Sendable (MessageEnvelope) -> Value?
    ) async -> Messages<Value> {
        Messages(inbox: await session.node.messageInbox { $0.type == tag }, decode: decode)
    }

    /// The messages of one type a member receives, in the order they arrive, as an async
    /// sequence (one reader at a time). It ends when the session is left or ended, or when the
    /// reading task is cancelled.
    public struct Messages<Message: Sendable>: AsyncSequence, Sendable {
        public typealias Element = (Message, MessageContext)
        package let inbox: MessageInbox
        let decode: @Sendable (MessageEnvelope) -> Message?

        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(inbox: inbox, decode: decode) }

        public struct AsyncIterator: AsyncIteratorProtocol {
            let inbox: MessageInbox
            let decode: @Sendable (MessageEnvelope) -> Message?

            public mutating func next() async -> Element? {
                while let message = await inbox.next() {
                    // A value that does not decode as the type (a member's bug) is skipped.
                    guard let value = decode(MessageEnvelope(type: message.type, body: message.body)) else { continue }
                    let context = MessageContext(
                        source: Participant(id: message.from, name: message.fromName),
                        mode: message.mode == .reliable ? .reliable : .unreliable)
                    return (value, context)
                }
                return nil
            }
        }
    }
}
