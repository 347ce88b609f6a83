/// The control socket's protocol (Docs/CLI.md §Control socket): one JSON object per line each
/// way. A request names a command; the node answers with one response line (or, for streaming
/// commands, several, the last with `"done": true`).
public struct ControlRequest: Codable, Sendable, Equatable {
    public enum Command: String, Codable, Sendable {
        case status, invite, leave
    }

    public var command: Command

    public init(command: Command) { self.command = command }
}

public struct ControlResponse: Codable, Sendable, Equatable {
    public var ok: Bool
    public var error: String?
    public var status: StatusReport?
    public var invite: String?

    public static func failure(_ message: String) -> ControlResponse {
        ControlResponse(ok: false, error: message)
    }

    public init(ok: Bool, error: String? = nil, status: StatusReport? = nil, invite: String? = nil) {
        self.ok = ok
        self.error = error
        self.status = status
        self.invite = invite
    }
}
