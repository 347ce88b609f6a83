import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// A data dir whose session ended, started again (`groupmesh run`, a `MeshSession`): before it
/// refuses, it tells the members `members.json` remembers that the session ended, and answers what
/// they send in it (`EndedSessionNotice`), for about two seconds. So a member that was offline
/// during the end learns it as soon as anyone who knows starts again. Best effort: a dir without
/// the ended epoch's key or the identity, or no socket at all, tells nobody.
enum EndedSessionNotifier {
    static func tell(_ configuration: NodeConfiguration, eventLoop: any EventLoop) async {
        let directory = configuration.dataDirectory
        guard directory.hasSession, let statement = directory.loadEndedStatement(),
            let epochs = try? directory.loadOrCreateSession(invited: nil),
            let identity = try? NodeIdentity.load(from: directory.identityPath)
        else { return }
        var random = SystemRandomNumberGenerator()
        guard
            let notice = EndedSessionNotice(
                statement: statement, epochs: epochs, localID: identity.nodeID,
                bootID: random.next(), remembered: directory.loadRememberedMembers(),
                wire: configuration.wire, seed: random.next(), now: now),
            !notice.addresses.isEmpty
        else { return }
        let done = eventLoop.makePromise(of: Void.self)
        let bootstrap = DatagramBootstrap(group: eventLoop).channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(EndedSessionHandler(notice: notice, done: done))
            }
        }
        // Where the node listened, so members (and NATs on the way) see it where they knew it; any
        // free port when that one is taken: the notice opens wherever it comes from.
        let channel: any Channel
        if let bound = try? await bootstrap.bind(host: configuration.listenHost, port: configuration.listenPort).get() {
            channel = bound
        } else if let bound = try? await bootstrap.bind(host: configuration.listenHost, port: 0).get() {
            channel = bound
        } else {
            done.succeed()
            return
        }
        try? await done.futureResult.get()
        try? await channel.close()
    }

    static var now: MeshInstant { MeshInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds) }
}

/// The notice's socket: its rounds on a timer, an answer to each datagram that earns one.
private final class EndedSessionHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>

    private var notice: EndedSessionNotice
    private let done: EventLoopPromise<Void>

    init(notice: EndedSessionNotice, done: EventLoopPromise<Void>) {
        self.notice = notice
        self.done = done
    }

    func channelActive(context: ChannelHandlerContext) {
        step(context: context)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        guard let source = PeerAddress(envelope.remoteAddress),
            let answer = notice.answer(envelope.data, from: source, now: EndedSessionNotifier.now)
        else { return }
        context.writeAndFlush(
            wrapOutboundOut(AddressedEnvelope(remoteAddress: envelope.remoteAddress, data: answer)),
            promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ICMP errors from members no longer there: nothing to do, the notice is best effort.
    }

    private func step(context: ChannelHandlerContext) {
        let now = EndedSessionNotifier.now
        for (datagram, address) in notice.tick(now: now) {
            guard let remote = try? address.socketAddress() else { continue }
            context.write(wrapOutboundOut(AddressedEnvelope(remoteAddress: remote, data: datagram)), promise: nil)
        }
        context.flush()
        guard !notice.isDone(now: now) else { return done.succeed() }
        let wait = TimeAmount.nanoseconds((notice.deadline - now).nanosecondsClamped)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: max(.milliseconds(1), wait)) {
            let (handler, context) = bound.value
            handler.step(context: context)
        }
    }
}
