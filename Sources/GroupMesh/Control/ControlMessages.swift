import Foundation

/// The control socket's protocol (Docs/CLI.md §Control socket): one JSON object per line each
/// way. A request names a command; the node answers with one response line, except `listen`,
/// which answers `{"ok": true, "subscribed": true}` and then one line per received message
/// until the connection closes.
public struct ControlRequest: Codable, Sendable, Equatable {
    public enum Command: String, Codable, Sendable {
        case status, invite, leave, send, listen
        case attach, attachments, get, remove
        case removeMember = "remove-member"
    }

    public var command: Command
    /// `send`: the message body, base64.
    public var base64: String?
    /// `send`: recipients by id, unique id prefix or name; none means every member.
    public var to: [String]?
    /// `send`: best effort instead of acknowledged.
    public var unreliable: Bool?
    /// `attach`: the file to add (absolute); `get`: where to write the attachment (absolute).
    public var path: String?
    /// `attach`: metadata (UTF-8, usually JSON).
    public var metadata: String?
    /// `get`, `remove`: the attachment, by id or unique prefix; `remove-member`: the member, by
    /// id, unique id prefix or name.
    public var id: String?

    public init(command: Command, base64: String? = nil, to: [String]? = nil, unreliable: Bool? = nil,
                path: String? = nil, metadata: String? = nil, id: String? = nil) {
        self.command = command
        self.base64 = base64
        self.to = to
        self.unreliable = unreliable
        self.path = path
        self.metadata = metadata
        self.id = id
    }
}

public struct ControlResponse: Codable, Sendable, Equatable {
    public var ok: Bool
    public var error: String?
    public var status: StatusReport?
    public var invite: String?
    /// `send`: how many members acknowledged (reliable) or were sent to (unreliable).
    public var delivered: Int?
    public var subscribed: Bool?
    /// `listen`: one received message.
    public var message: ReceivedMessageInfo?
    /// `attach`: the new attachment's id.
    public var attachment: String?
    /// `attachments`: the attachment set, with metadata.
    public var attachments: [StatusReport.AttachmentInfo]?
    /// `get`: how far the fetch is, sent every 250 ms before the final answer.
    public var progress: TransferProgress?
    /// `remove-member`: the member removed (id) and the new key epoch's session id; `delivered`
    /// says how many members were handed the new key at once.
    public var member: String?
    public var session: String?

    public static func failure(_ message: String) -> ControlResponse {
        ControlResponse(ok: false, error: message)
    }

    public init(ok: Bool, error: String? = nil, status: StatusReport? = nil, invite: String? = nil,
                delivered: Int? = nil, subscribed: Bool? = nil, message: ReceivedMessageInfo? = nil,
                attachment: String? = nil, attachments: [StatusReport.AttachmentInfo]? = nil,
                progress: TransferProgress? = nil) {
        self.progress = progress
        self.attachment = attachment
        self.attachments = attachments
        self.ok = ok
        self.error = error
        self.status = status
        self.invite = invite
        self.delivered = delivered
        self.subscribed = subscribed
        self.message = message
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

/// Chunks held of an attachment being fetched.
public struct TransferProgress: Codable, Sendable, Equatable {
    public var chunksHave: Int
    public var chunks: Int
    public var size: UInt64
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
