import Foundation
import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOHTTP1
import NIOPosix

/// The port mapping's I/O (PROTOCOL.md §1f): a UDP socket for PCP, NAT-PMP and SSDP, HTTP/1.1
/// connections for UPnP, a timer, and a look at the default route every `networkCheck`, around
/// the pure `PortMappingInstance` that decides what to ask and what to believe. IPv4 only: the
/// gateway is the default route's of `/proc/net/route`.
///
/// Confined to the node's event loop: every method is called there, and every channel it opens
/// runs there.
final class PortMapper: @unchecked Sendable {
    /// Seconds asked for, in place of two hours: a test-only setting (the lab's renewals).
    static let lifetimeVariable = "GROUPMESH_PORT_MAPPING_LIFETIME"
    static let networkCheck = TimeAmount.seconds(10)
    /// How long `stop` waits for the delete to be written (and a UPnP delete to be answered).
    static let stopWait = TimeAmount.seconds(1)

    private let eventLoop: any EventLoop
    private let logger: Logger
    private var core: PortMappingInstance
    private let onChange: @Sendable (PeerAddress?) -> Void
    private var channel: (any Channel)?
    /// Connected to the gateway's port 5351, so the kernel reports its ICMP port unreachable
    /// (ECONNREFUSED): a gateway with no PCP or NAT-PMP server is known at once.
    private var gatewayChannel: (any Channel)?
    private var connectedGateway: UInt32?
    private var timer: Scheduled<Void>?
    private var timerDeadline: MeshInstant?
    private var networkTask: RepeatedTask?
    private var exchanges: [UInt64: HTTPExchange] = [:]
    private var stopped = false

    private var now: MeshInstant { MeshInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds) }

    /// `onChange` is told each address to advertise (nil: none any more), on the event loop.
    init(
        port: UInt16, disabledBecause disabled: String?, eventLoop: any EventLoop, logger: Logger,
        onChange: @escaping @Sendable (PeerAddress?) -> Void
    ) {
        var settings = PortMappingInstance.Settings()
        if let text = ProcessInfo.processInfo.environment[Self.lifetimeVariable], let seconds = UInt32(text),
            seconds >= 2
        {
            settings.lifetime = seconds
        }
        core = PortMappingInstance(
            settings: settings, internalPort: port, nonce: SecureRandom.bytes(12),
            disabledBecause: disabled)
        self.eventLoop = eventLoop
        self.logger = logger
        self.onChange = onChange
    }

    /// Opens the socket and asks the gateway (at once, then whenever the route changes).
    func start() {
        eventLoop.preconditionInEventLoop()
        guard core.phase != .disabled, !stopped else { return }
        let bootstrap = DatagramBootstrap(group: eventLoop)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(PortMappingReceiver(mapper: self))
                }
            }
        bootstrap.bind(host: "0.0.0.0", port: 0).whenComplete { [self] result in
            switch result {
            case let .success(bound):
                guard !stopped else { bound.close(promise: nil); return }
                channel = bound
                checkNetwork()
                networkTask = eventLoop.scheduleRepeatedTask(initialDelay: Self.networkCheck, delay: Self.networkCheck)
                { [self] _ in
                    checkNetwork()
                }
            case let .failure(error):
                logger.warning("port mapping: cannot open its UDP socket (\(error)); no mapping will be asked for")
            }
        }
    }

    /// Deletes the mapping held, waiting at most `stopWait`, and closes everything.
    func stop() -> EventLoopFuture<Void> {
        eventLoop.preconditionInEventLoop()
        guard !stopped else { return eventLoop.makeSucceededVoidFuture() }
        var pending = run(core.stop(now: now))
        stopped = true
        networkTask?.cancel()
        networkTask = nil
        timer?.cancel()
        timer = nil
        pending += exchanges.values.compactMap { $0.done?.futureResult }
        let finished = EventLoopFuture.andAllComplete(pending, on: eventLoop)
        let bounded = eventLoop.makePromise(of: Void.self)
        let limit = eventLoop.scheduleTask(in: Self.stopWait) { bounded.succeed() }
        finished.whenComplete { _ in
            limit.cancel(); bounded.succeed()
        }
        return bounded.futureResult.map { [self] in
            for exchange in exchanges.values { exchange.channel?.close(promise: nil) }
            exchanges = [:]
            channel?.close(promise: nil)
            channel = nil
            gatewayChannel?.close(promise: nil)
            gatewayChannel = nil
        }
    }

    /// What `status` shows.
    func info() -> StatusReport.PortMappingInfo {
        .init(core, now: now)
    }

    /// True once the first attempt ended: mapped, or given up (or there was nothing to ask).
    var settled: Bool { core.settled }

    // MARK: inputs

    private func checkNetwork() {
        guard !stopped else { return }
        let gateway = DefaultRoute.gateway()
        let local = gateway.flatMap(DefaultRoute.localAddress(toward:))
        guard let gateway, gateway != connectedGateway else {
            run(core.setNetwork(gateway: gateway, local: local, now: now))
            return
        }
        connectedGateway = gateway
        gatewayChannel?.close(promise: nil)
        gatewayChannel = nil
        DatagramBootstrap(group: eventLoop)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(PortMappingReceiver(mapper: self))
                }
            }
            .connect(host: PeerAddress(host: .ipv4(gateway), port: 0).hostString, port: Int(PCPMessage.serverPort))
            .whenComplete { [self] result in
                if case let .success(connected) = result {
                    if stopped || connectedGateway != gateway {
                        connected.close(promise: nil)
                    } else {
                        gatewayChannel = connected
                    }
                }
                guard !stopped, connectedGateway == gateway else { return }
                run(core.setNetwork(gateway: gateway, local: local, now: now))
            }
    }

    fileprivate func refused() {
        guard !stopped else { return }
        run(core.portUnreachable(now: now))
    }

    fileprivate func received(_ bytes: [UInt8], from source: PeerAddress) {
        guard !stopped else { return }
        run(core.receive(bytes, from: source, now: now))
    }

    private func answered(_ id: UInt64, _ result: Result<(status: Int, body: [UInt8]), HTTPExchangeError>) {
        exchanges[id]?.channel?.close(promise: nil)
        exchanges[id] = nil
        guard !stopped else { return }
        switch result {
        case let .success(answer): run(core.httpAnswered(id, status: answer.status, body: answer.body, now: now))
        case let .failure(error): run(core.httpFailed(id, reason: error.description, now: now))
        }
    }

    private func onTimer() {
        timerDeadline = nil
        guard !stopped else { return }
        run(core.tick(now: now))
    }

    // MARK: directives

    /// Carries out `directives`; the futures of what was written or asked (for `stop`).
    @discardableResult
    private func run(_ directives: [PortMappingDirective]) -> [EventLoopFuture<Void>] {
        var pending: [EventLoopFuture<Void>] = []
        for directive in directives {
            switch directive {
            case let .send(bytes, address):
                let connected = gatewayChannel.flatMap {
                    $0.remoteAddress.flatMap(PeerAddress.init) == address ? $0 : nil
                }
                guard let channel = connected ?? channel,
                    let remote = try? SocketAddress(ipAddress: address.hostString, port: Int(address.port))
                else { continue }
                let write = channel.writeAndFlush(
                    AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: bytes)))
                pending.append(write)
            case let .http(request):
                pending.append(startExchange(request))
            case let .mappingChanged(address):
                onChange(address)
            case let .log(level, message, metadata):
                logger.log(
                    level: Logger.Level(rawValue: level.rawValue) ?? .info, "\(TerminalText.escaped(message))",
                    metadata: Logger.Metadata(
                        metadata.map { ($0.key, .string(TerminalText.escaped($0.value))) },
                        uniquingKeysWith: { $1 }))
            }
        }
        if !stopped { rearm() }
        return pending
    }

    private func rearm() {
        guard let deadline = core.nextDeadline else {
            timer?.cancel()
            timer = nil
            timerDeadline = nil
            return
        }
        guard deadline != timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        let wait = deadline > now ? deadline - now : .zero
        timer = eventLoop.scheduleTask(in: .nanoseconds(wait.nanosecondsClamped)) { [self] in onTimer() }
    }

    // MARK: HTTP

    private struct HTTPExchange {
        var channel: (any Channel)?
        var done: EventLoopPromise<Void>?
    }

    /// One HTTP/1.1 request on its own connection (`Connection: close`), the answer's body read
    /// up to the request's bound; given up at its timeout.
    private func startExchange(_ request: PortMappingHTTPRequest) -> EventLoopFuture<Void> {
        let done = eventLoop.makePromise(of: Void.self)
        exchanges[request.id] = HTTPExchange(channel: nil, done: done)
        let id = request.id
        let answer = eventLoop.makePromise(of: (status: Int, body: [UInt8]).self)
        let timeout = TimeAmount.nanoseconds(request.timeout.nanosecondsClamped)
        let giveUp = eventLoop.scheduleTask(in: timeout) { answer.fail(HTTPExchangeError.timedOut) }
        answer.futureResult.whenComplete { [self] result in
            giveUp.cancel()
            done.succeed()
            answered(id, result.mapError { $0 as? HTTPExchangeError ?? .failed("\($0)") })
        }
        let host = request.to.hostString
        ClientBootstrap(group: eventLoop)
            .connectTimeout(timeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPAnswerReader(limit: request.maxBody, answer: answer))
                }
            }
            .connect(host: host, port: Int(request.to.port))
            .whenComplete { [self] result in
                switch result {
                case let .success(channel):
                    guard exchanges[id] != nil else { channel.close(promise: nil); return }
                    exchanges[id]?.channel = channel
                    var head = HTTPRequestHead(
                        version: .http1_1, method: request.method == "POST" ? .POST : .GET, uri: request.path)
                    head.headers.add(name: "Host", value: "\(host):\(request.to.port)")
                    head.headers.add(name: "Connection", value: "close")
                    head.headers.add(name: "User-Agent", value: "groupmesh/\(GroupMeshVersion.release) UPnP/1.1")
                    if let action = request.soapAction {
                        head.headers.add(name: "Content-Type", value: "text/xml; charset=\"utf-8\"")
                        head.headers.add(name: "SOAPAction", value: action)
                    }
                    head.headers.add(name: "Content-Length", value: "\(request.body.count)")
                    channel.write(HTTPClientRequestPart.head(head), promise: nil)
                    if !request.body.isEmpty {
                        channel.write(
                            HTTPClientRequestPart.body(.byteBuffer(ByteBuffer(bytes: request.body))), promise: nil)
                    }
                    channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
                case let .failure(error):
                    answer.fail(HTTPExchangeError.failed("cannot connect to \(host):\(request.to.port): \(error)"))
                }
            }
        return done.futureResult
    }
}

enum HTTPExchangeError: Error, CustomStringConvertible {
    case timedOut
    case tooLarge(Int)
    case failed(String)

    var description: String {
        switch self {
        case .timedOut: "the gateway did not answer over HTTP in time"
        case let .tooLarge(limit): "the gateway's HTTP answer is over \(limit / 1024) KiB"
        case let .failed(reason): reason
        }
    }
}

/// Reads one HTTP answer: its status and its body, failing past `limit` bytes or on a close
/// before the end.
private final class HTTPAnswerReader: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart

    private let limit: Int
    private let answer: EventLoopPromise<(status: Int, body: [UInt8])>
    private var status = 0
    private var body: [UInt8] = []

    init(limit: Int, answer: EventLoopPromise<(status: Int, body: [UInt8])>) {
        self.limit = limit
        self.answer = answer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head):
            status = Int(head.status.code)
        case var .body(part):
            guard body.count + part.readableBytes <= limit else {
                answer.fail(HTTPExchangeError.tooLarge(limit))
                context.close(promise: nil)
                return
            }
            body += part.readBytes(length: part.readableBytes) ?? []
        case .end:
            answer.succeed((status, body))
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        answer.fail(HTTPExchangeError.failed("the gateway closed the HTTP connection before its answer ended"))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        answer.fail(HTTPExchangeError.failed("HTTP: \(error)"))
        context.close(promise: nil)
    }
}

/// Hands the port-mapping socket's datagrams to the mapper (at most 2 KiB of each is looked at).
private final class PortMappingReceiver: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>

    private let mapper: PortMapper

    init(mapper: PortMapper) { self.mapper = mapper }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        guard let source = PeerAddress(envelope.remoteAddress) else { return }
        let bytes = envelope.data.readBytes(length: min(envelope.data.readableBytes, 2048)) ?? []
        mapper.received(bytes, from: source)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The connected socket's ICMP port unreachable; other errors leave it to the timers.
        if let error = error as? IOError, error.errnoCode == ECONNREFUSED { mapper.refused() }
    }
}

/// The IPv4 default route, from `/proc/net/route`.
enum DefaultRoute {
    /// The gateway of the default route with the lowest metric; nil without one.
    static func gateway(routes: String? = try? String(contentsOfFile: "/proc/net/route", encoding: .utf8)) -> UInt32? {
        guard let routes else { return nil }
        var best: (gateway: UInt32, metric: Int)?
        for line in routes.split(separator: "\n").dropFirst().prefix(4096) {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 8, fields[1] == "00000000", fields[7] == "00000000",
                let raw = UInt32(fields[2], radix: 16), let flags = UInt32(fields[3], radix: 16),
                flags & 0x3 == 0x3, let metric = Int(fields[6])
            else { continue }
            // The kernel prints the address as the host-order integer of its network-order bytes.
            let gateway = UInt32(bigEndian: raw)
            if best.map({ metric < $0.metric }) ?? true { best = (gateway, metric) }
        }
        return best?.gateway
    }

    /// Our address on the way to `gateway`: a UDP socket connected to it (nothing is sent).
    static func localAddress(toward gateway: UInt32) -> UInt32? {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = PCPMessage.serverPort.bigEndian
        remote.sin_addr.s_addr = gateway.bigEndian
        let connected = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { return nil }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { return nil }
        let address = UInt32(bigEndian: local.sin_addr.s_addr)
        return address == 0 ? nil : address
    }
}
