import Foundation
import MeshCore
import NIOCore
import NIOPosix

/// The Unix-domain control socket (`DATA_DIR/control.sock`, mode 0600). Connections run on the
/// node's event loop, so requests reach the node without a hop.
enum ControlServer {
    /// A client's unread output past this makes the channel unwritable (an `events` stream then
    /// drops; a `listen` is behind, and the node holds new messages instead: `MessageBacklog`).
    static let writeBuffer = ChannelOptions.Types.WriteBufferWaterMark(low: 256 * 1024, high: 1024 * 1024)

    static func bind(
        path: String, directoryPath: String, node: MeshNode, connections: ControlConnections,
        eventLoop: any EventLoop
    ) async throws -> any Channel {
        let bindPath = UnixSocketPath.usable(for: path, directory: directoryPath)
        // The socket file is created owner-only by bind itself (no moment where another user could
        // connect before a chmod); umask is per process, so it is put back at once.
        let previousMask = umask(0o077)
        defer { umask(previousMask) }
        let channel = try await ServerBootstrap(group: eventLoop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // Out of descriptors, accept fails at once and the socket stays readable: without a
            // pause the event loop spins on it. NIO's async bind adds this; ours must.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptBackoffHandler(backoffProvider: connections.acceptFailed))
                }
            }
            .childChannelOption(.writeBufferWaterMark, value: writeBuffer)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        ControlConnectionHandler(node: node, connections: connections))
                }
            }
            .bind(unixDomainSocketPath: bindPath.path, cleanupExistingSocketFile: true)
            .get()
        withExtendedLifetime(bindPath) {}
        chmod(path, 0o600)
        return channel
    }
}

/// The node's open control connections, on its event loop (ControlConnectionTable decides).
final class ControlConnections: @unchecked Sendable {
    private let eventLoop: any EventLoop
    private var table: ControlConnectionTable
    private var responders: [Int: ControlResponder] = [:]
    private var sweep: RepeatedTask?
    /// Connections refused (all busy) or closed for idleness or to make room.
    private(set) var refused: UInt64 = 0
    private(set) var closedIdle: UInt64 = 0

    init(eventLoop: any EventLoop, settings: ControlConnectionTable.Settings = .init()) {
        self.eventLoop = eventLoop
        self.table = ControlConnectionTable(settings: settings)
        // Checked four times per timeout: an idle connection lives at most 1.25 timeouts.
        let (seconds, attoseconds) = settings.idleTimeout.components
        let period = TimeAmount.nanoseconds(max(1_000_000, (seconds * 1_000_000_000 + attoseconds / 1_000_000_000) / 4))
        sweep = eventLoop.scheduleRepeatedTask(initialDelay: period, delay: period) { [weak self] _ in
            self?.closeExpired()
        }
    }

    static var now: Duration { .nanoseconds(Int64(NIODeadline.now().uptimeNanoseconds)) }

    /// Registers a new connection, closing the idlest one to make room; nil: refused.
    func admit(_ responder: ControlResponder) -> Int? {
        eventLoop.preconditionInEventLoop()
        let (id, admission) = table.admit(now: Self.now)
        switch admission {
        case .refused:
            refused += 1
            return nil
        case let .admittedEvicting(evicted):
            closedIdle += 1
            responders.removeValue(forKey: evicted)?.close()
        case .admitted:
            break
        }
        responders[id] = responder
        return id
    }

    func requestStarted(_ id: Int) { table.requestStarted(id, now: Self.now) }
    func requestAnswered(_ id: Int) { table.requestAnswered(id, now: Self.now) }
    func subscribed(_ id: Int) { table.subscribed(id) }

    func closed(_ id: Int) {
        table.closed(id)
        responders[id] = nil
    }

    /// `accept` failed: out of descriptors, close the idlest connection so the next accept (a
    /// CLI command) gets one. Returns how long to wait before accepting again.
    func acceptFailed(_ error: IOError) -> TimeAmount {
        if error.errnoCode == EMFILE || error.errnoCode == ENFILE, let id = table.evictIdlest(now: Self.now) {
            closedIdle += 1
            responders.removeValue(forKey: id)?.close()
            return .milliseconds(10)
        }
        return .milliseconds(250)
    }

    private func closeExpired() {
        for id in table.expired(now: Self.now) {
            closedIdle += 1
            responders.removeValue(forKey: id)?.close()
        }
    }

    func stop() {
        sweep?.cancel()
        sweep = nil
    }
}

/// Where the node writes its answers to one control connection. Used only on the node's event
/// loop, like the connection itself. Answers and a `listen`'s messages are always written (the
/// node stops taking messages while a `listen` is behind, so what it writes is bounded); an
/// `events` stream's lines only while the client keeps up (the channel is writable): past that
/// they are counted, the client gets one `dropped` line when it drains, and is disconnected
/// once it is `maxEventsBehind`.
final class ControlResponder: @unchecked Sendable {
    /// A stalled `events` client (a paused pager) is disconnected after missing this many lines
    /// in a row; until then it costs the node at most the channel's write buffer.
    static let maxEventsBehind = 1_000
    /// Over this many bytes not yet taken by the client's socket, a `listen` is behind; under
    /// `caughtUpBytes` it has caught up (the channel's own watermarks).
    static let behindBytes = ControlServer.writeBuffer.high
    static let caughtUpBytes = ControlServer.writeBuffer.low
    /// How often a behind `listen` is looked at for progress.
    static let backlogPoll = TimeAmount.milliseconds(100)
    /// A `listen` behind for this long, however much it drains, is cut: while it is behind the
    /// node takes no new application messages and the journal waits behind them.
    static let maxBehind = TimeAmount.seconds(30)
    /// Never more unsent than this, whatever comes (a backstop: holding bounds what reliable
    /// messages can add, and unreliable ones are dropped while behind).
    static let maxUnsentBytes = 64 << 20

    /// Cleared once closed: the context holds the handler, which holds this responder.
    private var context: ChannelHandlerContext?
    private let eventLoop: any EventLoop
    private weak var connections: ControlConnections?
    private var id: Int?
    private(set) var isClosed = false
    /// Messages not written since the last one that was.
    private(set) var messagesDropped = 0
    var onClose: (() -> Void)?
    /// Called for each line this client missed (the node counts them).
    var onDrop: (() -> Void)?
    /// A `listen`'s id as an application consumer, and where its backlog is reported.
    var consumerID: UInt64?
    var onBacklog: ((ConsumerFlow.Report) -> Void)?
    private var backlog = MessageBacklog()
    private var backlogPoll: RepeatedTask?

    init(context: ChannelHandlerContext, connections: ControlConnections?) {
        self.context = context
        self.eventLoop = context.eventLoop
        self.connections = connections
    }

    /// Registers with the connection table; false: the node has no room (every connection busy).
    func admit() -> Bool {
        guard let connections else { return true }
        id = connections.admit(self)
        return id != nil
    }

    func requestStarted() {
        if let id { connections?.requestStarted(id) }
    }

    func send(_ response: ControlResponse) {
        guard eventLoop.inEventLoop else {
            eventLoop.execute { self.send(response) }
            return
        }
        guard !isClosed else { return }
        switch response {
        // Lines of a stream or of progress: the request is still under way.
        case .progress, .message, .dropped, .leaving, .event, .missed: break
        case .subscribed: if let id { connections?.subscribed(id) }
        default: if let id { connections?.requestAnswered(id) }
        }
        write(response)
    }

    /// One message for a `listen`: always written. Over `behindBytes` unsent the node is told
    /// the client is behind (and holds new messages), then told again each time the client
    /// drained some, until it is under `caughtUpBytes`.
    func sendMessage(_ message: ReceivedMessageInfo) {
        eventLoop.preconditionInEventLoop()
        guard !isClosed, context != nil else { return }
        // An unreliable message carries no promise: while the client is behind it is dropped,
        // counted, and reported with one `dropped` line once the client caught up.
        if backlog.isBehind, message.mode != "reliable" {
            messagesDropped += 1
            onDrop?()
            return
        }
        backlog.written += write(.message(message))
        if let unsent = unsentBytes, unsent > Self.maxUnsentBytes { return close() }
        guard !backlog.isBehind, let unsent = unsentBytes, unsent > Self.behindBytes else { return }
        backlog.fellBehind(unsent: unsent, at: .now())
        onBacklog?(.behind)
        let period = Self.backlogPoll
        backlogPoll = eventLoop.scheduleRepeatedTask(initialDelay: period, delay: period) { [weak self] _ in
            self?.checkBacklog()
        }
    }

    /// Bytes written to the connection and not yet taken by its socket.
    private var unsentBytes: Int? {
        try? context?.channel.syncOptions?.getOption(.bufferedWritableBytes)
    }

    private func checkBacklog() {
        guard !isClosed, let unsent = unsentBytes else { return }
        if let since = backlog.behindSince, NIODeadline.now() - since > Self.maxBehind { return close() }
        switch backlog.check(unsent: unsent, caughtUpBelow: Self.caughtUpBytes) {
        case .caughtUp:
            backlogPoll?.cancel()
            backlogPoll = nil
            reportDrops()
            onBacklog?(.caughtUp)
        case .drainedSome:
            onBacklog?(.behind)
        case .noProgress:
            break
        }
    }

    /// One line of an `events` stream; dropped (and counted) while the client is behind.
    func sendStreamed(_ response: ControlResponse) {
        eventLoop.preconditionInEventLoop()
        guard !isClosed, let context else { return }
        guard context.channel.isWritable else {
            messagesDropped += 1
            onDrop?()
            if messagesDropped >= Self.maxEventsBehind { close() }
            return
        }
        reportDrops()
        write(response)
    }

    /// The client drained what was written: tell it what it missed.
    func writabilityChanged() {
        if context?.channel.isWritable == true { reportDrops() }
    }

    private func reportDrops() {
        guard messagesDropped > 0 else { return }
        write(.dropped(messages: messagesDropped))
        messagesDropped = 0
    }

    /// Returns the bytes written.
    @discardableResult
    private func write(_ response: ControlResponse) -> Int {
        guard let context, var bytes = try? JSONEncoder().encode(response) else { return 0 }
        bytes.append(UInt8(ascii: "\n"))
        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(bytes: bytes)), promise: nil)
        return bytes.count
    }

    /// Closes the connection from the node's side (idle, evicted, or too far behind).
    func close() {
        guard !isClosed else { return }
        context?.close(promise: nil)
        closed()
    }

    func closed() {
        guard !isClosed else { return }
        isClosed = true
        context = nil
        backlogPoll?.cancel()
        backlogPoll = nil
        // Gone: it holds nothing any more.
        if backlog.isBehind { onBacklog?(.caughtUp) }
        onBacklog = nil
        if let id { connections?.closed(id) }
        onClose?()
        onClose = nil
        onDrop = nil
    }
}

/// How far a `listen` is behind: what was written to it, what its socket took, and whether it
/// took more since it was last said to be behind (progress, which keeps it from being cut off).
struct MessageBacklog {
    enum Check: Equatable { case caughtUp, drainedSome, noProgress }

    var written = 0
    private(set) var isBehind = false
    /// When it last fell behind (nil while caught up).
    private(set) var behindSince: NIODeadline?
    private var drainedWhenReported = 0

    mutating func fellBehind(unsent: Int, at now: NIODeadline) {
        isBehind = true
        behindSince = now
        drainedWhenReported = written - unsent
    }

    mutating func check(unsent: Int, caughtUpBelow: Int) -> Check {
        guard isBehind else { return .noProgress }
        if unsent <= caughtUpBelow {
            isBehind = false
            behindSince = nil
            return .caughtUp
        }
        let drained = written - unsent
        guard drained > drainedWhenReported else { return .noProgress }
        drainedWhenReported = drained
        return .drainedSome
    }
}

/// Reads newline-delimited JSON requests and hands each to the node with a responder.
final class ControlConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let node: MeshNode
    private let connections: ControlConnections?
    private var reader = ControlRequestReader()
    private var responder: ControlResponder?

    init(node: MeshNode, connections: ControlConnections?) {
        self.node = node
        self.connections = connections
    }

    func channelActive(context: ChannelHandlerContext) {
        let responder = ControlResponder(context: context, connections: connections)
        self.responder = responder
        if !responder.admit() {
            responder.send(
                .failure(
                    "the node has \(ControlConnectionTable.Settings().limit) control connections busy; try again when one ends"
                ))
            responder.close()
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        responder?.closed()
        responder = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        responder?.closed()
        responder = nil
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        responder?.writabilityChanged()
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let incoming = unwrapInboundIn(data)
        guard let responder, !responder.isClosed else { return }
        for item in reader.feed(incoming.readableBytesView) {
            // An earlier request of this read may have closed the connection (a failed write).
            guard !responder.isClosed else { return }
            switch item {
            case let .request(request):
                responder.requestStarted()
                node.assumeIsolated { $0.handleControl(request, responder: responder) }
            case .malformed:
                responder.requestStarted()
                responder.send(.failure("malformed control request"))
            case .tooLong:
                responder.send(.failure("control request over \(ControlRequestReader.maxLineBytes) bytes"))
                responder.close()
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// A path short enough for `sun_path` (108 bytes on Linux). A longer one is reached through
/// `/proc/self/fd/N/`, a short alias for the directory held open while the socket is used.
final class UnixSocketPath {
    static let limit = 100
    let path: String
    private let directoryDescriptor: Int32?

    private init(path: String, directoryDescriptor: Int32?) {
        self.path = path
        self.directoryDescriptor = directoryDescriptor
    }

    deinit { if let directoryDescriptor { close(directoryDescriptor) } }

    static func usable(for path: String, directory: String) -> UnixSocketPath {
        guard path.utf8.count > limit else { return UnixSocketPath(path: path, directoryDescriptor: nil) }
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return UnixSocketPath(path: path, directoryDescriptor: nil) }
        let name = String(path.split(separator: "/").last ?? "control.sock")
        return UnixSocketPath(path: "/proc/self/fd/\(fd)/\(name)", directoryDescriptor: fd)
    }
}
