import Foundation
import MeshCore

/// The control socket's protocol (Docs/CLI.md §Control socket): one JSON object per line each
/// way. A request names a command; the node answers with one response line, except `listen`,
/// which answers `{"ok": true, "subscribed": true}` and then one line per received message
/// until the connection closes, and `get`, which sends progress lines before its answer.
public enum ControlRequest: Sendable, Equatable {
    case status
    case invite
    /// Leave once other members hold what only this node holds (`now`: at once).
    case leave(now: Bool = false)
    /// End the session for every member; answered `{"ok": true}` once they were told.
    case end
    /// One round trip to a member (id, unique id prefix or name).
    case ping(String)
    /// The event stream: `{"ok": true, "subscribed": true}`, then one `event` line each. With
    /// `after`, the events after that sequence number the node still holds come first (a
    /// `missed` line says how many it no longer holds).
    case events(after: UInt64?)
    /// A message to the members named (by id, unique id prefix or name; none: every member).
    case send(body: [UInt8], to: [String], unreliable: Bool)
    case listen
    /// Add the file at `path` (absolute) with `metadata` (UTF-8, usually JSON).
    case attach(path: String, metadata: String?)
    case attachments
    /// Write the attachment (id or unique prefix) to `path` (absolute), as a file of `mode`
    /// (the client's 0666 less its umask; nil: the node's umask decides). Not `replace`: a file
    /// already at `path` is kept and the request fails. The client closing the connection before
    /// the answer gives the fetch up (`MeshNode.performCancellable`).
    case get(attachment: String, path: String, mode: UInt32? = nil, replace: Bool = true)
    case remove(attachment: String)
    /// Remove a member (id, unique id prefix or name) with a new key epoch; with the members it
    /// introduced if `withIntroduced`, but those of `keep` (ids, prefixes or names; a value that
    /// is no member's is split at commas), or none of them (`keepIntroduced`).
    case removeMember(String, withIntroduced: Bool = false, keep: [String] = [], keepIntroduced: Bool = false)
}

extension ControlRequest {
    /// A `listen` client that reads nothing this long while messages wait for it (a paused
    /// pager) is disconnected; until then the node takes no new messages (Docs/CLI.md §listen).
    public static let listenStallLimit = DeliveryInstance.Settings().consumerStallLimit
}

extension ControlRequest: Codable {
    private enum Command: String, Codable {
        case status, invite, leave, send, listen, end, ping, events
        case attach, attachments, get, remove
        case removeMember = "remove-member"
    }

    private enum CodingKeys: String, CodingKey {
        case command, base64, to, unreliable, path, metadata, id, mode, now, after, replace, withIntroduced, keep,
            keepIntroduced
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(Command.self, forKey: .command) {
        case .status: self = .status
        case .invite: self = .invite
        case .leave: self = .leave(now: try container.decodeIfPresent(Bool.self, forKey: .now) ?? false)
        case .listen: self = .listen
        case .end: self = .end
        case .attachments: self = .attachments
        case .send:
            guard let body = Data(base64Encoded: try container.decode(String.self, forKey: .base64)) else {
                throw DecodingError.dataCorruptedError(forKey: .base64, in: container, debugDescription: "not base64")
            }
            self = .send(
                body: Array(body), to: try container.decodeIfPresent([String].self, forKey: .to) ?? [],
                unreliable: try container.decodeIfPresent(Bool.self, forKey: .unreliable) ?? false)
        case .attach:
            self = .attach(
                path: try container.decode(String.self, forKey: .path),
                metadata: try container.decodeIfPresent(String.self, forKey: .metadata))
        case .get:
            let mode = try container.decodeIfPresent(UInt32.self, forKey: .mode)
            guard mode.map({ $0 <= 0o777 }) ?? true else {
                throw DecodingError.dataCorruptedError(
                    forKey: .mode, in: container, debugDescription: "not a file mode")
            }
            self = .get(
                attachment: try container.decode(String.self, forKey: .id),
                path: try container.decode(String.self, forKey: .path), mode: mode,
                replace: try container.decodeIfPresent(Bool.self, forKey: .replace) ?? true)
        case .remove:
            self = .remove(attachment: try container.decode(String.self, forKey: .id))
        case .removeMember:
            self = .removeMember(
                try container.decode(String.self, forKey: .id),
                withIntroduced: try container.decodeIfPresent(Bool.self, forKey: .withIntroduced) ?? false,
                keep: try container.decodeIfPresent([String].self, forKey: .keep) ?? [],
                keepIntroduced: try container.decodeIfPresent(Bool.self, forKey: .keepIntroduced) ?? false)
        case .ping:
            self = .ping(try container.decode(String.self, forKey: .id))
        case .events:
            self = .events(after: try container.decodeIfPresent(UInt64.self, forKey: .after))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .status: try container.encode(Command.status, forKey: .command)
        case .invite: try container.encode(Command.invite, forKey: .command)
        case let .leave(now):
            try container.encode(Command.leave, forKey: .command)
            try container.encode(now, forKey: .now)
        case .listen: try container.encode(Command.listen, forKey: .command)
        case .end: try container.encode(Command.end, forKey: .command)
        case .attachments: try container.encode(Command.attachments, forKey: .command)
        case let .send(body, to, unreliable):
            try container.encode(Command.send, forKey: .command)
            try container.encode(Data(body).base64EncodedString(), forKey: .base64)
            try container.encode(to, forKey: .to)
            try container.encode(unreliable, forKey: .unreliable)
        case let .attach(path, metadata):
            try container.encode(Command.attach, forKey: .command)
            try container.encode(path, forKey: .path)
            try container.encodeIfPresent(metadata, forKey: .metadata)
        case let .get(attachment, path, mode, replace):
            try container.encode(Command.get, forKey: .command)
            try container.encode(attachment, forKey: .id)
            try container.encode(path, forKey: .path)
            try container.encodeIfPresent(mode, forKey: .mode)
            if !replace { try container.encode(false, forKey: .replace) }
        case let .remove(attachment):
            try container.encode(Command.remove, forKey: .command)
            try container.encode(attachment, forKey: .id)
        case let .removeMember(member, withIntroduced, keep, keepIntroduced):
            try container.encode(Command.removeMember, forKey: .command)
            try container.encode(member, forKey: .id)
            if withIntroduced { try container.encode(true, forKey: .withIntroduced) }
            if !keep.isEmpty { try container.encode(keep, forKey: .keep) }
            if keepIntroduced { try container.encode(true, forKey: .keepIntroduced) }
        case let .ping(member):
            try container.encode(Command.ping, forKey: .command)
            try container.encode(member, forKey: .id)
        case let .events(after):
            try container.encode(Command.events, forKey: .command)
            try container.encodeIfPresent(after, forKey: .after)
        }
    }
}

/// One line from the node. On the wire every answer has `ok`; a failure has `error`, and each
/// other case the one key that names it (Docs/CLI.md).
public enum ControlResponse: Sendable, Equatable {
    /// A failure as the client shows it, with its kind.
    static func refusal(_ error: GroupMeshError) -> ControlResponse { .failure(error.description, kind: error.kind) }
    static func refusal(_ error: MessengerError) -> ControlResponse { .failure(error.description, kind: error.kind) }

    /// `{"ok": true}` (leave).
    case done
    /// The one line to show, and the kind of failure (`kind` on the wire, absent for `other`).
    case failure(String, kind: FailureKind = .other)
    case status(StatusReport)
    case invite(String)
    /// `send`: how many members acknowledged (reliable) or were sent to (unreliable).
    case sent(delivered: Int)
    /// `listen`: subscribed; messages follow.
    case subscribed
    case message(ReceivedMessageInfo)
    /// `events`: this many lines were not sent because the client was not reading them.
    case dropped(messages: Int)
    /// `attach`, `get`, `remove`: the attachment's id.
    case attachment(String)
    case attachments([StatusReport.AttachmentInfo])
    /// `get`: how far the fetch is, every 250 ms before the final answer.
    case progress(TransferProgress)
    /// `ping`: the round trip.
    case pong(PongInfo)
    /// `events`: one event.
    case event(MeshEvent)
    /// `events --after`: this many events after it are no longer held (the ring holds 1,024).
    case missed(UInt64)
    /// `leave`: the handover under way (at once, then every 500 ms while it lasts).
    case leaving(StatusReport.LeavingInfo)
    /// `leave`: the departure is out; what was handed over and what became unavailable.
    case left(LeaveSummary)
    /// `remove-member`: the member removed, the new epoch's session id, and how many live members
    /// were handed its key at once.
    /// The member removed (id), the new session, how many were handed it at once, and the
    /// members it introduced that went with it (ids).
    case memberRemoved(member: String, session: String, delivered: Int, introduced: [String] = [])
}

extension ControlResponse: Codable {
    private enum CodingKeys: String, CodingKey {
        case ok, error, kind, status, invite, delivered, subscribed, message, dropped, attachment, attachments,
            progress, member, session, introduced
        case leaving, left, pong, event, missed
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard try container.decode(Bool.self, forKey: .ok) else {
            self = .failure(
                try container.decodeIfPresent(String.self, forKey: .error) ?? "the node refused the request",
                kind: (try? container.decodeIfPresent(FailureKind.self, forKey: .kind)) ?? .other)
            return
        }
        if let status = try container.decodeIfPresent(StatusReport.self, forKey: .status) {
            self = .status(status)
        } else if let invite = try container.decodeIfPresent(String.self, forKey: .invite) {
            self = .invite(invite)
        } else if try container.decodeIfPresent(Bool.self, forKey: .subscribed) == true {
            self = .subscribed
        } else if let message = try container.decodeIfPresent(ReceivedMessageInfo.self, forKey: .message) {
            self = .message(message)
        } else if let dropped = try container.decodeIfPresent(Int.self, forKey: .dropped) {
            self = .dropped(messages: dropped)
        } else if let progress = try container.decodeIfPresent(TransferProgress.self, forKey: .progress) {
            self = .progress(progress)
        } else if let attachments = try container.decodeIfPresent(
            [StatusReport.AttachmentInfo].self, forKey: .attachments)
        {
            self = .attachments(attachments)
        } else if let event = try container.decodeIfPresent(MeshEvent.self, forKey: .event) {
            self = .event(event)
        } else if let missed = try container.decodeIfPresent(UInt64.self, forKey: .missed) {
            self = .missed(missed)
        } else if let pong = try container.decodeIfPresent(PongInfo.self, forKey: .pong) {
            self = .pong(pong)
        } else if let leaving = try container.decodeIfPresent(StatusReport.LeavingInfo.self, forKey: .leaving) {
            self = .leaving(leaving)
        } else if let left = try container.decodeIfPresent(LeaveSummary.self, forKey: .left) {
            self = .left(left)
        } else if let member = try container.decodeIfPresent(String.self, forKey: .member) {
            self = .memberRemoved(
                member: member, session: try container.decodeIfPresent(String.self, forKey: .session) ?? "",
                delivered: try container.decodeIfPresent(Int.self, forKey: .delivered) ?? 0,
                introduced: try container.decodeIfPresent([String].self, forKey: .introduced) ?? [])
        } else if let attachment = try container.decodeIfPresent(String.self, forKey: .attachment) {
            self = .attachment(attachment)
        } else if let delivered = try container.decodeIfPresent(Int.self, forKey: .delivered) {
            self = .sent(delivered: delivered)
        } else {
            self = .done
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if case let .failure(message, kind) = self {
            try container.encode(false, forKey: .ok)
            if kind != .other { try container.encode(kind, forKey: .kind) }
            return try container.encode(message, forKey: .error)
        }
        try container.encode(true, forKey: .ok)
        switch self {
        case .done, .failure: break
        case let .status(report): try container.encode(report, forKey: .status)
        case let .invite(text): try container.encode(text, forKey: .invite)
        case let .sent(delivered): try container.encode(delivered, forKey: .delivered)
        case .subscribed: try container.encode(true, forKey: .subscribed)
        case let .message(message): try container.encode(message, forKey: .message)
        case let .dropped(messages): try container.encode(messages, forKey: .dropped)
        case let .attachment(id): try container.encode(id, forKey: .attachment)
        case let .attachments(list): try container.encode(list, forKey: .attachments)
        case let .progress(progress): try container.encode(progress, forKey: .progress)
        case let .pong(info): try container.encode(info, forKey: .pong)
        case let .event(event): try container.encode(event, forKey: .event)
        case let .missed(count): try container.encode(count, forKey: .missed)
        case let .leaving(info): try container.encode(info, forKey: .leaving)
        case let .left(info): try container.encode(info, forKey: .left)
        case let .memberRemoved(member, session, delivered, introduced):
            try container.encode(member, forKey: .member)
            try container.encode(session, forKey: .session)
            try container.encode(delivered, forKey: .delivered)
            if !introduced.isEmpty { try container.encode(introduced, forKey: .introduced) }
        }
    }
}

/// A received message as `listen --json` prints it.
public struct ReceivedMessageInfo: Codable, Sendable, Equatable {
    public var from: String
    public var fromName: String
    public var mode: String
    public var type: String
    /// The body when it is valid UTF-8, else nil and `base64` is set.
    public var text: String?
    public var base64: String?
}

/// One round trip of `ping`: to whom, over which address, how long.
public struct PongInfo: Codable, Sendable, Equatable {
    public var member: String
    public var name: String
    public var address: String
    /// Nil: no answer within 2 s.
    public var rttMs: Double?
}

/// What a leave did (`LeaveReport`): attachments other members took first, and those no
/// member that stays holds whole.
public struct LeaveSummary: Codable, Sendable, Equatable {
    /// Attachment ids.
    public var handedOver: [String]
    public var unavailable: [String]
    /// No other member was alive.
    public var alone: Bool

    package init(_ report: LeaveReport) {
        handedOver = report.handedOver.map(\.hex)
        unavailable = report.unavailable.map(\.hex)
        alone = report.alone
    }
}

/// How far a `get` is: chunks and bytes held here, and how many members are sending.
public struct TransferProgress: Codable, Sendable, Equatable {
    public var chunksHave: Int
    public var chunks: Int
    public var size: UInt64
    /// Bytes of the chunks held (nil from a node of an earlier version: estimate from chunks).
    public var bytesHave: UInt64?
    /// Members with a request for one of its chunks under way now.
    public var holdersSending: Int?

    public init(chunksHave: Int, chunks: Int, size: UInt64, bytesHave: UInt64? = nil, holdersSending: Int? = nil) {
        self.chunksHave = chunksHave
        self.chunks = chunks
        self.size = size
        self.bytesHave = bytesHave
        self.holdersSending = holdersSending
    }

    /// `bytesHave`, or what `chunksHave` of `chunks` come to.
    public var bytes: UInt64 {
        if let bytesHave { return bytesHave }
        return chunks == 0 ? size : size * UInt64(chunksHave) / UInt64(chunks)
    }
}

/// The request side of a control connection, without the socket: bytes in, whole lines out,
/// each decoded to a request or reported malformed; a line that grows past `maxLineBytes`
/// without its newline ends the connection. Fuzzed (`make fuzz`, selector 8) and property-tested.
public struct ControlRequestReader: Sendable {
    public static let maxLineBytes = 1 << 20

    public enum Item: Sendable, Equatable {
        case request(ControlRequest)
        /// A line that is not a request (not JSON, not an object, an unknown command…).
        case malformed
        /// More than `maxLineBytes` without a newline: answer once and close.
        case tooLong
    }

    private var pending: [UInt8] = []
    public private(set) var isClosed = false

    public init() {}

    public static func decode(line: some Collection<UInt8>) -> ControlRequest? {
        try? JSONDecoder().decode(ControlRequest.self, from: Data(line))
    }

    public mutating func feed(_ bytes: some Collection<UInt8>) -> [Item] {
        guard !isClosed else { return [] }
        pending.append(contentsOf: bytes)
        var items: [Item] = []
        var start = 0
        while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
            items.append(Self.decode(line: pending[start..<newline]).map(Item.request) ?? .malformed)
            start = newline + 1
        }
        pending.removeFirst(start)
        if pending.count > Self.maxLineBytes {
            pending = []
            isClosed = true
            items.append(.tooLong)
        }
        return items
    }
}
