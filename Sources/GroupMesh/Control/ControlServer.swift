import Foundation
import NIOCore
import NIOPosix

/// The Unix-domain control socket (`DATA_DIR/control.sock`, mode 0600). Connections run on the
/// node's event loop, so requests reach the node without a hop.
enum ControlServer {
    static func bind(path: String, directoryPath: String, node: MeshNode, eventLoop: any EventLoop) async throws -> any Channel {
        let bindPath = UnixSocketPath.usable(for: path, directory: directoryPath)
        // The socket file is created owner-only by bind itself (no moment where another user could
        // connect before a chmod); umask is per process, so it is put back at once.
        let previousMask = umask(0o077)
        defer { umask(previousMask) }
        let channel = try await ServerBootstrap(group: eventLoop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ControlConnectionHandler(node: node))
                }
            }
            .bind(unixDomainSocketPath: bindPath.path, cleanupExistingSocketFile: true)
            .get()
        withExtendedLifetime(bindPath) {}
        chmod(path, 0o600)
        return channel
    }
}

/// Where the node writes its answers to one control connection. Used only on the node's event
/// loop, like the connection itself.
final class ControlResponder: @unchecked Sendable {
    private let context: ChannelHandlerContext
    private let eventLoop: any EventLoop
    private(set) var isClosed = false
    var onClose: (() -> Void)?

    init(context: ChannelHandlerContext) {
        self.context = context
        self.eventLoop = context.eventLoop
    }

    func send(_ response: ControlResponse) {
        guard eventLoop.inEventLoop else {
            eventLoop.execute { self.send(response) }
            return
        }
        guard !isClosed, var bytes = try? JSONEncoder().encode(response) else { return }
        bytes.append(UInt8(ascii: "\n"))
        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(bytes: bytes)), promise: nil)
    }

    func closed() {
        guard !isClosed else { return }
        isClosed = true
        onClose?()
        onClose = nil
    }
}

/// Reads newline-delimited JSON requests and hands each to the node with a responder.
final class ControlConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let node: MeshNode
    private var reader = ControlRequestReader()
    private var responder: ControlResponder?

    init(node: MeshNode) { self.node = node }

    func handlerAdded(context: ChannelHandlerContext) {
        responder = ControlResponder(context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        responder?.closed()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let incoming = unwrapInboundIn(data)
        guard let responder else { return }
        for item in reader.feed(incoming.readableBytesView) {
            switch item {
            case let .request(request):
                node.assumeIsolated { $0.handleControl(request, responder: responder) }
            case .malformed:
                responder.send(.failure("malformed control request"))
            case .tooLong:
                responder.send(.failure("control request over \(ControlRequestReader.maxLineBytes) bytes"))
                context.close(promise: nil)
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
