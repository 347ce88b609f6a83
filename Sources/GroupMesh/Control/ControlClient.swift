import Foundation
import MeshCore

/// The CLI's side of the control socket: blocking, bounded by a timeout, one request at a time.
public struct ControlClient: Sendable {
    public let directory: DataDirectory
    public var timeout: Duration = .seconds(30)

    public init(directory: DataDirectory) { self.directory = directory }

    public func send(_ request: ControlRequest) throws(GroupMeshError) -> ControlResponse {
        let connection = try connect()
        defer { close(connection) }
        guard var line = try? JSONEncoder().encode(request) else { throw .control("cannot encode request") }
        line.append(UInt8(ascii: "\n"))
        try writeAll(line, to: connection)
        let reply = try readLine(from: connection)
        let response = try Self.decode(reply)
        if case let .failure(message, kind) = response { throw .refused(message, kind: kind) }
        return response
    }

    /// Sends `request` and hands every response line to `handle` until it returns false (true is
    /// returned) or the node closes the connection (false: the node stopped, or was killed, before
    /// the answer was complete). For `listen` and `get` with progress. The first line is awaited
    /// within the timeout; the ones after it may come at any time.
    /// `closer`, when given, can close the connection from another thread (a signal handler's):
    /// the node then gives up what the request asked for, as when the client goes away.
    @discardableResult
    public func subscribe(
        _ request: ControlRequest, closer: ConnectionCloser? = nil, handle: (ControlResponse) -> Bool
    ) throws(GroupMeshError) -> Bool {
        let connection = try connect()
        closer?.opened(connection)
        defer {
            closer?.opened(nil)
            close(connection)
        }
        guard var line = try? JSONEncoder().encode(request) else { throw .control("cannot encode request") }
        line.append(UInt8(ascii: "\n"))
        try writeAll(line, to: connection)
        var first = true
        var buffer = Data()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let lineData = buffer[buffer.startIndex..<newline]
                buffer.removeSubrange(buffer.startIndex...newline)
                let response = try Self.decode(lineData)
                if case let .failure(message, kind) = response { throw .refused(message, kind: kind) }
                if first {
                    first = false
                    var forever = timeval(tv_sec: 0, tv_usec: 0)
                    setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &forever, socklen_t(MemoryLayout<timeval>.size))
                }
                if !handle(response) { return true }
            }
            let n = chunk.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                throw .control(
                    "the node did not answer within \(timeout); it may be busy or stuck: see its log, or restart it")
            }
            guard n > 0 else { return false }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    /// One answer line. JSON this build cannot read as an answer comes from a node of another
    /// version (one started before an upgrade lacks fields added since): say so, not "malformed".
    static func decode(_ line: Data) throws(GroupMeshError) -> ControlResponse {
        if let response = try? JSONDecoder().decode(ControlResponse.self, from: line) { return response }
        guard (try? JSONSerialization.jsonObject(with: line)) != nil else {
            throw .control("the node sent a malformed response")
        }
        throw .control(
            "the node's answer is not one this groupmesh can read: the node runs another version of groupmesh; use that one, or restart the node with this one"
        )
    }

    private func connect() throws(GroupMeshError) -> Int32 {
        let path = UnixSocketPath.usable(for: directory.controlSocketPath, directory: directory.path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .control(String(cString: strerror(errno))) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw .control("control socket path too long: \(path.path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        var seconds = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        withExtendedLifetime(path) {}
        guard result == 0 else {
            let code = errno
            close(fd)
            if code == ENOENT || code == ECONNREFUSED || code == ENOTDIR {
                throw .noNodeRunning(path: directory.path)
            }
            throw .control(
                "cannot reach the node at \(directory.controlSocketPath): \(String(cString: strerror(code)))")
        }
        return fd
    }

    private func writeAll(_ data: Data, to fd: Int32) throws(GroupMeshError) {
        var offset = 0
        while offset < data.count {
            // safe: non-empty
            let n = data.withUnsafeBytes { write(fd, $0.baseAddress! + offset, data.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw .control("cannot write to the node: \(String(cString: strerror(errno)))") }
            offset += n
        }
    }

    private func readLine(from fd: Int32) throws(GroupMeshError) -> Data {
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                throw .control(
                    "the node did not answer within \(timeout); it may be busy or stuck: see its log, or restart it")
            }
            guard n > 0 else {
                if data.isEmpty {
                    throw .control(
                        "the node closed the connection without answering; run groupmesh status to see whether it still runs"
                    )
                }
                return data
            }
            if let newline = chunk[0..<n].firstIndex(of: UInt8(ascii: "\n")) {
                data.append(contentsOf: chunk[0..<newline])
                return data
            }
            data.append(contentsOf: chunk[0..<n])
        }
    }
}

extension ControlClient {
    /// The node's `status --json` report.
    public func status() throws(GroupMeshError) -> StatusReport {
        guard case let .status(report) = try send(.status) else { throw .control("the node sent no status") }
        return report
    }

    /// The attachment set, with metadata (`attachments --json`).
    public func attachments() throws(GroupMeshError) -> [StatusReport.AttachmentInfo] {
        guard case let .attachments(list) = try send(.attachments) else {
            throw .control("the node sent no attachment list")
        }
        return list
    }

    /// The attachment of `list` that `text` names as the node resolves it (an id or a content
    /// hash, or a prefix of one), if one does.
    public static func resolve(_ text: String, in list: [StatusReport.AttachmentInfo]) -> StatusReport.AttachmentInfo? {
        try? AttachmentLookupError.find(text, in: list, id: \.id, content: \.content).get()
    }

    /// The attachment `text` names in the node's list, as the node itself resolves it.
    public func attachment(named text: String) throws(GroupMeshError) -> StatusReport.AttachmentInfo {
        try AttachmentLookupError.find(text, in: try attachments(), id: \.id, content: \.content)
            .mapError(GroupMeshError.init).get()
    }
}

/// A subscription's connection, closed from another thread (a signal handler's): `shutdown`, so
/// that the node sees the end at once while the descriptor stays the subscribing thread's to close.
/// One lock decides between the answer and the interruption: whichever comes first stands.
public final class ConnectionCloser: @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32?
    private var interrupted = false
    private var answered = false
    private var closedAfterAnswer = false

    public init() {}

    /// A connection opened after the interruption is shut at once.
    func opened(_ descriptor: Int32?) {
        lock.withLock {
            self.descriptor = descriptor
            if let descriptor, interrupted { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
    }

    /// The answer is complete: false when the interruption came first (it speaks, not the
    /// subscriber).
    public func finished() -> Bool {
        lock.withLock {
            guard !interrupted else { return false }
            descriptor = nil
            answered = true
            return true
        }
    }

    public enum Closing: Sendable, Equatable {
        /// The answer came first: nothing was closed.
        case answered
        /// Interrupted; `hadConnection` when a connection was open and is shut now.
        case closed(hadConnection: Bool)
    }

    /// Ends the subscription, unless its answer came first.
    public func close() -> Closing {
        lock.withLock {
            if answered {
                closedAfterAnswer = true
                return .answered
            }
            interrupted = true
            guard let descriptor else { return .closed(hadConnection: false) }
            shutdown(descriptor, Int32(SHUT_RDWR))
            return .closed(hadConnection: true)
        }
    }

    /// Whether `close` came before the answer: what the subscriber saw since is not its to report.
    public var wasInterrupted: Bool { lock.withLock { interrupted } }

    /// Whether `close` came after the answer: the command decides what that signal still stops.
    public var wasClosedAfterAnswer: Bool { lock.withLock { closedAfterAnswer } }
}
