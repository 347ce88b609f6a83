import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// The node: owns the UDP channel and the protocol state, and interprets what the state
/// machines ask for. It runs on the channel's event loop (see `unownedExecutor`), so a received
/// datagram reaches it without a thread hop.
public actor MeshNode {
    public let identity: NodeIdentity
    public let session: SessionSecret
    public let bootID: UInt64
    public let configuration: NodeConfiguration
    private let eventLoop: any EventLoop
    private let logger: Logger
    private var codec: DatagramCodec
    private var channel: (any Channel)?
    public private(set) var counters = NodeCounters()
    public private(set) var localAddress: PeerAddress?

    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        eventLoop.executor.asUnownedSerialExecutor()
    }

    public init(identity: NodeIdentity, session: SessionSecret, configuration: NodeConfiguration,
                eventLoop: any EventLoop, logger: Logger) {
        self.identity = identity
        self.session = session
        self.bootID = SecureRandom.uint64()
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.logger = logger
        self.codec = DatagramCodec(session: session, localID: identity.nodeID, localBootID: bootID,
                                   configuration: configuration.wire)
    }

    public nonisolated var nodeID: NodeID { identity.nodeID }

    /// Binds the UDP socket; returns the address actually bound (port 0 becomes a real port).
    @discardableResult
    public func start() async throws(GroupMeshError) -> PeerAddress {
        let listen = "\(configuration.listenHost):\(configuration.listenPort)"
        let bootstrap = DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(DatagramReceiver(node: self))
                }
            }
        let bound: any Channel
        do {
            bound = try await bootstrap.bind(host: configuration.listenHost, port: configuration.listenPort).get()
        } catch {
            throw .bindFailed(address: listen, reason: "\(error)")
        }
        channel = bound
        guard let socketAddress = bound.localAddress, let address = PeerAddress(socketAddress) else {
            throw .bindFailed(address: listen, reason: "the socket has no local address")
        }
        localAddress = address
        logger.info("listening", metadata: ["address": "\(address)", "node": "\(nodeID)"])
        return address
    }

    /// Closes the socket. Safe to call more than once.
    public func stop() async {
        guard let channel else { return }
        self.channel = nil
        try? await channel.close()
    }

    /// Addresses for invites: `--advertise` if given, else the listen address, else (bound to a
    /// wildcard) every non-loopback interface address, else loopback.
    public func inviteAddresses() -> [PeerAddress] {
        if !configuration.advertise.isEmpty { return configuration.advertise }
        guard let localAddress else { return [] }
        if !localAddress.isUnspecified { return [localAddress] }
        let interfaces = ((try? System.enumerateDevices()) ?? [])
            .compactMap { device in device.address.flatMap(PeerAddress.init) }
            .filter { !$0.isLoopback && !$0.isUnspecified && ($0.isIPv6 == localAddress.isIPv6 || !localAddress.isIPv6) }
            .filter { !$0.isLinkLocalIPv6 }
            .map { PeerAddress(host: $0.host, port: localAddress.port) }
        let unique = Array(Set(interfaces)).sorted()
        if !unique.isEmpty { return Array(unique.prefix(InviteToken.maxAddresses)) }
        let loopback = localAddress.isIPv6 ? "::1" : "127.0.0.1"
        return [PeerAddress(host: PeerAddress.parseHost(loopback) ?? localAddress.host, port: localAddress.port)]
    }

    public func invite() -> InviteToken {
        InviteToken(secret: session, addresses: inviteAddresses())
    }

    // MARK: datagrams

    func receive(_ envelope: AddressedEnvelope<ByteBuffer>) {
        counters.datagramsReceived += 1
        counters.bytesReceived += UInt64(envelope.data.readableBytes)
        switch codec.open(envelope.data) {
        case let .failure(reason):
            counters.countDrop(reason)
            logger.trace("dropped datagram", metadata: ["reason": "\(reason.rawValue)", "from": "\(envelope.remoteAddress)"])
        case let .success(opened):
            handle(opened, from: envelope.remoteAddress)
        }
    }

    private func handle(_ datagram: OpenedDatagram, from remote: SocketAddress) {
        for frame in datagram.frames {
            switch frame {
            case let .ping(ping):
                if let reply = codec.seal([.pong(Pong(token: ping.token))], to: datagram.header.sender) {
                    send(reply, to: remote)
                }
            case .pong:
                break
            }
        }
    }

    private func send(_ datagram: ByteBuffer, to remote: SocketAddress) {
        guard let channel else { return }
        counters.datagramsSent += 1
        counters.bytesSent += UInt64(datagram.readableBytes)
        channel.writeAndFlush(AddressedEnvelope(remoteAddress: remote, data: datagram), promise: nil)
    }
}

/// Hands each datagram to the node on the event loop the node runs on.
private final class DatagramReceiver: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let node: MeshNode

    init(node: MeshNode) { self.node = node }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        node.assumeIsolated { $0.receive(envelope) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ICMP errors (port unreachable from a departed peer) surface here; they are not fatal.
        node.assumeIsolated { $0.countSendError() }
    }
}

extension MeshNode {
    fileprivate func countSendError() { counters.sendErrors += 1 }
}

extension PeerAddress {
    init?(_ address: SocketAddress) {
        guard let port = address.port, port >= 0, port <= Int(UInt16.max) else { return nil }
        switch address {
        case let .v4(v4):
            let value = UInt32(bigEndian: v4.address.sin_addr.s_addr)
            self.init(host: .ipv4(value), port: UInt16(port))
        case let .v6(v6):
            var raw = v6.address.sin6_addr
            let bytes = withUnsafeBytes(of: &raw) { Array($0) }
            self.init(ipv6: bytes, port: UInt16(port))
        default:
            return nil
        }
    }

    var isLinkLocalIPv6: Bool {
        if case let .ipv6(high, _) = host { return high >> 54 == 0x3fa }
        return false
    }

    public func socketAddress() throws -> SocketAddress {
        try SocketAddress(ipAddress: hostString, port: Int(port))
    }
}
