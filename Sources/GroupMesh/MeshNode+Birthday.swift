#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// A birthday round's hard side (PROTOCOL.md §1c): the core asks for many sockets, each sending
/// one short-lived punch to the other member's public address; the first that hears from that
/// address becomes the route to it (everything the core sends there leaves through it, as
/// `TurnRoutes` sends through the allocation by destination), and the others close at once.
/// The core never knows which socket a datagram used. Sockets that cannot be opened (EMFILE, a
/// full port range) mean fewer mappings, or no round: counted, never fatal.
struct BirthdaySocketTable {
    /// The sockets of the round under way: none hit yet.
    struct Pending {
        var round: UInt64
        var peer: NodeID
        var target: PeerAddress
        var channels: [any Channel] = []
        var binding: Int
        var closesAt: MeshInstant
    }

    /// A socket that was hit: the route to `target`, while the core sends the member there.
    struct Route {
        var peer: NodeID
        var channel: any Channel
        var lastHeard: MeshInstant
    }

    var pending: Pending?
    var routes: [PeerAddress: Route] = [:]
    var nextRound: UInt64 = 0
    var checker: RepeatedTask?
    /// Written to since the last flush: flushed once per batch, as the main socket is.
    var routesWritten = false
    /// What `status --json` shows (counters.birthday).
    var socketsOpened: UInt64 = 0
    var socketsFailed: UInt64 = 0
    var roundsWithoutSockets: UInt64 = 0
    var hits: UInt64 = 0
    var strayDatagrams: UInt64 = 0

    /// Whatever the core asks: one round's sockets at a time, this many at most.
    static let maxSockets = 256
    /// Routes kept at once (a member each); past that, the one heard from least lately goes.
    static let maxRoutes = 16
    /// A route nothing came through for this long is closed (the core's keepalives come far more
    /// often on a path in use).
    static let routeIdle: Duration = .seconds(120)
    static let checkInterval = TimeAmount.seconds(1)
}

extension MeshNode {
    /// Opens the sockets the core asked for, and sends its punch from each once bound.
    func openBirthdaySockets(_ request: BirthdaySockets) {
        guard !isClosed else { return }
        closePendingBirthdaySockets()
        guard let remote = try? request.target.socketAddress(), request.target.isIPv6 == localAddress.isIPv6 else {
            birthday.roundsWithoutSockets += 1
            return
        }
        birthday.nextRound += 1
        let round = birthday.nextRound
        // Never more than a quarter of the descriptors this process may still open: the store,
        // the control socket and the main socket need theirs.
        let count = max(0, min(request.count, BirthdaySocketTable.maxSockets, Self.spareDescriptors() / 4))
        birthday.pending = .init(
            round: round, peer: request.peer, target: request.target, binding: count,
            closesAt: now + request.lifetime)
        let slot = self.slot
        let ttl = Self.hopLimitOption(ipv6: localAddress.isIPv6)
        let bootstrap = DatagramBootstrap(group: eventLoop)
            .channelOption(ttl, value: SocketOptionValue(request.hops))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(BirthdayReceiver(slot: slot))
                }
            }
        // On the main socket's address when it has one: the mappings must be made on the host
        // the other side probes (a multi-homed or VPN host could leave by another).
        let host = localAddress.isUnspecified ? (localAddress.isIPv6 ? "::" : "0.0.0.0") : localAddress.hostString
        for _ in 0..<count {
            bootstrap.bind(host: host, port: 0).whenComplete { [self] result in
                assumeIsolated { node in
                    node.birthdaySocketBound(result, round: round, datagram: request.datagram, to: remote)
                }
            }
        }
        startBirthdayChecks()
    }

    private func birthdaySocketBound(
        _ result: Result<any Channel, any Error>, round: UInt64, datagram: ByteBuffer,
        to remote: SocketAddress
    ) {
        switch result {
        case let .success(channel):
            guard !isClosed, birthday.pending?.round == round else {
                channel.close(promise: nil)
                return
            }
            birthday.socketsOpened += 1
            birthday.pending?.channels.append(channel)
            // A socket NIO closes (a send error) is no route any more: the core falls back at once.
            channel.closeFuture.whenComplete { [self] _ in
                assumeIsolated { node in node.birthdayChannelClosed(channel) }
            }
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: remote, data: datagram), promise: nil)
        case let .failure(error):
            birthday.socketsFailed += 1
            if birthday.socketsFailed == 1 || birthday.socketsFailed % 1000 == 0 {
                logger.notice("birthday round: a socket could not be opened (\(error)); fewer mappings this round")
            }
        }
        guard birthday.pending?.round == round else { return }
        birthday.pending?.binding -= 1
        if birthday.pending?.binding == 0, birthday.pending?.channels.isEmpty == true {
            birthday.roundsWithoutSockets += 1
            birthday.pending = nil
        }
    }

    /// A datagram on one of the round's sockets (or on a route): a round's socket that hears from
    /// its target is tried as the route, and kept if the core took the datagram as the member's.
    fileprivate func birthdayReceive(_ envelope: AddressedEnvelope<ByteBuffer>, on channel: any Channel) {
        guard !isClosed, let address = PeerAddress(envelope.remoteAddress) else { return }
        if let route = birthday.routes[address], route.channel === channel {
            birthday.routes[address]?.lastHeard = now
            receive(envelope)
            return
        }
        guard let pending = birthday.pending, pending.target == address,
            pending.channels.contains(where: { $0 === channel })
        else {
            birthday.strayDatagrams += 1
            return
        }
        // The route first, at a full TTL (its short-lived punch is out): the core's answer to this
        // datagram must leave through this socket and reach the member.
        let previous = birthday.routes[address]
        birthday.routes[address] = .init(peer: pending.peer, channel: channel, lastHeard: now)
        if let options = channel.syncOptions {
            _ = try? options.setOption(Self.hopLimitOption(ipv6: localAddress.isIPv6), value: -1)
        }
        let authenticated = receive(envelope)
        guard authenticated, core.pathAddress(of: pending.peer) == address else {
            // Not the member's (or not new): the socket stays a candidate.
            birthday.routes[address] = previous
            return
        }
        previous.map { $0.channel.close(promise: nil) }
        birthday.hits += 1
        birthday.pending?.channels.removeAll { $0 === channel }
        closePendingBirthdaySockets()
        if birthday.routes.count > BirthdaySocketTable.maxRoutes,
            let oldest = birthday.routes.min(by: { $0.value.lastHeard < $1.value.lastHeard })
        {
            oldest.value.channel.close(promise: nil)
            birthday.routes[oldest.key] = nil
        }
        logger.info("birthday round: a socket was hit; \(pending.peer) is reached through it at \(address)")
    }

    fileprivate func birthdayChannelClosed(_ channel: any Channel) {
        birthday.pending?.channels.removeAll { $0 === channel }
        for (address, route) in birthday.routes where route.channel === channel { birthday.routes[address] = nil }
    }

    /// Descriptors this process may still open (its soft limit less those open), or 1,024 when
    /// that cannot be read.
    static func spareDescriptors() -> Int {
        var limit = rlimit()
        #if canImport(Glibc)
            let resource = Int32(RLIMIT_NOFILE.rawValue)
        #else
            let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return 1024 }
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        return max(0, Int(min(limit.rlim_cur, 1 << 20)) - open)
    }

    /// Whether `address` is sent to through a socket a birthday round found.
    func birthdayRoute(to address: PeerAddress) -> (any Channel)? {
        birthday.routes.isEmpty ? nil : birthday.routes[address]?.channel
    }

    func flushBirthdayRoutes() {
        birthday.routesWritten = false
        for route in birthday.routes.values { route.channel.flush() }
    }

    private func closePendingBirthdaySockets() {
        guard let pending = birthday.pending else { return }
        for channel in pending.channels { channel.close(promise: nil) }
        birthday.pending = nil
    }

    private func startBirthdayChecks() {
        guard birthday.checker == nil else { return }
        birthday.checker = eventLoop.scheduleRepeatedTask(
            initialDelay: BirthdaySocketTable.checkInterval,
            delay: BirthdaySocketTable.checkInterval
        ) { [self] _ in
            assumeIsolated { $0.checkBirthdaySockets() }
        }
    }

    /// Once a second: a round's sockets past their lifetime close; a route closes once the core
    /// no longer sends its member there (relayed again, moved, gone) or nothing came for a while.
    private func checkBirthdaySockets() {
        let now = now
        if let pending = birthday.pending, now >= pending.closesAt { closePendingBirthdaySockets() }
        for (address, route) in birthday.routes
        where core.pathAddress(of: route.peer) != address || now >= route.lastHeard + BirthdaySocketTable.routeIdle {
            route.channel.close(promise: nil)
            birthday.routes[address] = nil
        }
        if birthday.pending == nil, birthday.routes.isEmpty {
            birthday.checker?.cancel()
            birthday.checker = nil
        }
    }

    /// At stop: every socket of every round.
    func closeBirthdaySockets() {
        closePendingBirthdaySockets()
        for route in birthday.routes.values { route.channel.close(promise: nil) }
        birthday.routes = [:]
        birthday.checker?.cancel()
        birthday.checker = nil
    }

    func birthdayInfo() -> StatusReport.BirthdayInfo {
        StatusReport.BirthdayInfo(
            roundsTried: core.birthday.roundsTried, roundsSucceeded: core.birthday.roundsSucceeded,
            probesSent: core.birthday.probesSent, socketsAsked: core.birthday.socketsAsked,
            socketsOpened: birthday.socketsOpened, socketsFailed: birthday.socketsFailed,
            roundsWithoutSockets: birthday.roundsWithoutSockets, socketsHit: birthday.hits,
            routes: birthday.routes.count, strayDatagrams: birthday.strayDatagrams)
    }

    static func hopLimitOption(ipv6: Bool) -> ChannelOptions.Types.SocketOption {
        ipv6
            ? .init(level: .init(rawValue: CInt(IPPROTO_IPV6)), name: .init(rawValue: IPV6_UNICAST_HOPS))
            : .init(level: .init(rawValue: CInt(IPPROTO_IP)), name: .init(rawValue: IP_TTL))
    }
}

extension StatusReport {
    /// Birthday rounds (PROTOCOL.md §1c): tried and succeeded (this node's part in each), probes
    /// sent, the hard side's sockets asked for, opened, failed to open, hit, and the routes kept.
    public struct BirthdayInfo: Codable, Sendable, Equatable {
        public var roundsTried: UInt64
        public var roundsSucceeded: UInt64
        public var probesSent: UInt64
        public var socketsAsked: UInt64
        public var socketsOpened: UInt64
        public var socketsFailed: UInt64
        public var roundsWithoutSockets: UInt64
        public var socketsHit: UInt64
        public var routes: Int
        /// Datagrams on a round's sockets from anyone but the member's address: dropped.
        public var strayDatagrams: UInt64
    }
}

/// Hands what a round's socket reads to the node, with the socket it came on.
private final class BirthdayReceiver: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let slot: NodeSlot

    init(slot: NodeSlot) { self.slot = slot }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        let channel = context.channel
        slot.node?.assumeIsolated { $0.birthdayReceive(envelope, on: channel) }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        slot.node?.assumeIsolated { $0.readBatchComplete() }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ICMP errors (the short-lived punch's time exceeded, a port unreachable): not fatal.
    }
}
