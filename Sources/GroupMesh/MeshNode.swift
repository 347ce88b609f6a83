import Foundation
import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// The node: owns the UDP channel, the control socket and the protocol state machines, feeds
/// them datagrams and time, and carries out their directives. It runs on the channel's event
/// loop (see `unownedExecutor`), so a datagram reaches it without a thread hop.
public actor MeshNode {
    public nonisolated let identity: NodeIdentity
    /// The current epoch's secret (MeshNode+Epochs.swift).
    public internal(set) var session: SessionSecret
    var epochs: KeyEpochs
    /// Codecs of the earlier epochs, by session id: for members that have not caught up.
    var earlierCodecs: [SessionID: DatagramCodec] = [:]
    /// After an epoch change, beacons in the epoch it left (MeshNode+Epochs.swift).
    var epochBeaconAt: MeshInstant?
    var epochBeaconsLeft = 0
    public nonisolated let bootID: UInt64
    public nonisolated let configuration: NodeConfiguration
    let eventLoop: any EventLoop
    let logger: Logger
    let ephemeral = EphemeralKeyPair.generate()
    var codec: DatagramCodec
    var membership: MembershipInstance?
    var delivery: DeliveryInstance
    /// Sends waiting for their acknowledgements, by send id.
    var pendingSends: [UInt64: CheckedContinuation<[NodeID: DeliveryInstance.Failure], Never>] = [:]
    var messageSubscribers: [UInt64: AsyncStream<InboundMessage>.Continuation] = [:]
    // The journal and its attachments (MeshNode+Journal.swift).
    var journal: JournalInstance?
    var store: AttachmentStore?
    var manifests: [SHA256Digest: Manifest] = [:] {
        didSet { chunkLocations = Self.locations(of: manifests) }
    }
    /// Where each known chunk sits (one place is enough for the seeding rule).
    var chunkLocations: [SHA256Digest: ChunkRef] = [:]

    static func locations(of manifests: [SHA256Digest: Manifest]) -> [SHA256Digest: ChunkRef] {
        var locations: [SHA256Digest: ChunkRef] = [:]
        for (id, manifest) in manifests {
            for (index, digest) in manifest.chunks.enumerated() where locations[digest] == nil {
                locations[digest] = ChunkRef(attachment: id, index: index)
            }
        }
        return locations
    }
    /// Attachments whose every chunk is on disk.
    var complete: Set<SHA256Digest> = []
    var fetching: Set<SHA256Digest> = []
    /// After a chunk could not be stored (a full disk), fetches start only when asked (`get`)
    /// until then: replication would fetch chunks only to fail to store them again.
    var replicationPausedUntil: MeshInstant?
    var transfer = TransferScheduler(seed: SecureRandom.uint64())
    /// Chunks being put together from pieces (MeshNode+Transfer.swift).
    var assembler: ChunkAssembler
    /// Chunk reads under way for other members, until their pieces are written.
    var serving: Set<ServeBudget.Key> = []
    /// Bytes of each chunk sent to each member lately: past two copies a second, a chunk we keep
    /// in memory is read again for that member instead (MeshNode+Transfer.swift).
    var serveBudget = ServeBudget()
    /// Chunks just served, for re-asks of their lost pieces (MeshNode+Transfer.swift).
    var recentChunks = RecentChunks(capacity: recentChunkCapacity)
    /// Where each live member is reached, kept from membership changes: looking it up in the
    /// membership instance per datagram sent would copy the instance.
    var peerAddresses: [NodeID: PeerAddress] = [:]
    private var lossRandom = SplitMix64(seed: SecureRandom.uint64())
    /// Chunk requests in flight, by digest: which chunks of which attachments they are for.
    var requested: [SHA256Digest: [ChunkRef]] = [:]
    /// What this node holds of the attachments it is fetching.
    var localBitmaps: [SHA256Digest: ChunkBitmap] = [:]
    var dirtyBitmaps: Set<SHA256Digest> = []
    var nextBitmapAnnouncement = MeshInstant.zero
    var lastProgress: [SHA256Digest: MeshInstant] = [:]
    /// When each fetch started and how many chunks it needed (for the "fetched" log line).
    var fetchStartedAt: [SHA256Digest: MeshInstant] = [:]
    var fetchNeeded: [SHA256Digest: Int] = [:]
    var fetchWaiters: [SHA256Digest: [CheckedContinuation<Result<Manifest, GroupMeshError>, Never>]] = [:]
    var chunkWaiters: [SHA256Digest: ChunkWait] = [:]
    var attachmentSubscribers: [UInt64: AsyncStream<[AttachmentEntry]>.Continuation] = [:]
    var holderWaiters: [CheckedContinuation<Void, Never>] = []
    private var channel: (any Channel)?
    private var controlChannel: (any Channel)?
    private var timer: Scheduled<Void>?
    private var timerDeadline: MeshInstant?
    private var known: KnownMembers
    var knownMembers: KnownMembers { known }
    private var knownDirty = false
    private(set) var stopped = false
    /// While leaving: the future of the last datagram written, to close only after it went out.
    private var trackLastWrite = false
    private var lastWrite: EventLoopFuture<Void>?
    private var stopWaiters: [CheckedContinuation<Void, Never>] = []
    var viewSubscribers: [UInt64: AsyncStream<[Member]>.Continuation] = [:]
    private var nextSubscriberID: UInt64 = 0

    func nextSubscriptionID() -> UInt64 {
        nextSubscriberID += 1
        return nextSubscriberID
    }

    var channelAllocator: ByteBufferAllocator { channel?.allocator ?? ByteBufferAllocator() }
    public internal(set) var counters = NodeCounters()
    public private(set) var localAddress: PeerAddress?
    private(set) var socketBuffers = SocketBuffers(receive: 0, send: 0)

    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        eventLoop.executor.asUnownedSerialExecutor()
    }

    public init(identity: NodeIdentity, epochs: KeyEpochs, configuration: NodeConfiguration,
                eventLoop: any EventLoop, logger: Logger) {
        let session = epochs.current
        self.identity = identity
        self.session = session
        self.epochs = epochs
        self.bootID = SecureRandom.uint64()
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.logger = logger
        self.known = KnownMembers.load(from: configuration.dataDirectory)
        self.codec = DatagramCodec(session: session, localID: identity.nodeID, localBootID: bootID,
                                   configuration: configuration.wire)
        for secret in epochs.previousSecrets {
            earlierCodecs[secret.sessionID] = DatagramCodec(session: secret, localID: identity.nodeID,
                                                            localBootID: bootID, configuration: configuration.wire)
        }
        var deliverySettings = DeliveryInstance.Settings()
        deliverySettings.datagramBudget = codec.maxPairwisePayload
        deliverySettings.maxMessageSize = Messenger.maxMessageSize + 1 + MessageEnvelope.maxTagBytes
        self.delivery = DeliveryInstance(settings: deliverySettings)
        self.assembler = ChunkAssembler(settings: .init(pieceSize: codec.maxPairwisePayload - ChunkPiece.overhead))
    }

    public nonisolated var nodeID: NodeID { identity.nodeID }

    var now: MeshInstant { MeshInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds) }

    // MARK: lifecycle

    /// Binds the UDP socket and the control socket, then joins through the invite, `--join` and
    /// the members remembered from the last run. Returns the bound UDP address.
    @discardableResult
    public func start() async throws(GroupMeshError) -> PeerAddress {
        let listen = "\(configuration.listenHost):\(configuration.listenPort)"
        var bootstrap = DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            // Bursts of chunk datagrams outrun the default buffers (about 200 KiB) before the
            // reader drains them; losses there would cost retransmissions for nothing.
            .channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(SocketBuffers.wanted))
            .channelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(SocketBuffers.wanted))
            .channelOption(.maxMessagesPerRead, value: 64)
            // Wants are refused while more than this waits to be written (MeshNode+Transfer).
            .channelOption(.writeBufferWaterMark, value: .init(low: 1 << 20, high: 4 << 20))
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(DatagramReceiver(node: self))
                }
            }
        if Self.receiveOffload {
            // GRO: a burst of equal-sized pieces from one sender arrives as one buffer of up to
            // 64 KiB, split back into datagrams in `receive`.
            bootstrap = bootstrap
                .channelOption(.datagramReceiveOffload, value: true)
                .channelOption(.datagramReceiveSegmentSize, value: true)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 65_536))
        } else {
            bootstrap = bootstrap
                .channelOption(.datagramVectorReadMessageCount, value: 32)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 32 * 2048))
        }
        let bound: any Channel
        do {
            bound = try await bootstrap.bind(host: configuration.listenHost, port: configuration.listenPort).get()
        } catch {
            throw .bindFailed(address: listen, reason: "\(error)")
        }
        channel = bound
        socketBuffers = await SocketBuffers.enlarge(bound)
        guard let socketAddress = bound.localAddress, let address = PeerAddress(socketAddress) else {
            throw .bindFailed(address: listen, reason: "the socket has no local address")
        }
        localAddress = address

        if configuration.controlSocket {
            do {
                controlChannel = try await ControlServer.bind(path: configuration.dataDirectory.controlSocketPath,
                                                              directoryPath: configuration.dataDirectory.path,
                                                              node: self, eventLoop: eventLoop)
            } catch {
                try? await bound.close()
                throw .dataDirectory(path: configuration.dataDirectory.path, reason: "control socket: \(error)")
            }
        }

        let record = MemberRecord(signingKey: identity.publicKey, name: configuration.name ?? defaultName,
                                  addresses: inviteAddresses(), incarnation: known.incarnation + 1,
                                  bootID: bootID, ephemeralKey: ephemeral.publicKey)
        var instance = MembershipInstance(record: record, authority: Ed25519Authority(identity: identity),
                                          settings: .profile(configuration.profile),
                                          datagramBudget: codec.maxHelloPayload, seed: SecureRandom.uint64(), now: now)
        let seeds = Array(Set((configuration.invite?.addresses ?? []) + configuration.join + known.addresses))
            .filter { $0 != address && !record.addresses.contains($0) }.sorted()
        _ = instance.exclude(epochs.removed, now: now)
        let directives = instance.join(seeds, now: now)
        membership = instance
        try await startJournal(now: now)
        known.incarnation = record.incarnation
        saveKnownMembers()
        perform(directives)
        rearm()
        logger.info("started", metadata: ["address": "\(address)", "node": "\(nodeID)", "seeds": "\(seeds.count)",
                                          "receiveBuffer": "\(socketBuffers.receive)"])
        if socketBuffers.isSmall {
            logger.warning("the UDP receive buffer is \(socketBuffers.receive / 1024) KiB: bursts of chunk pieces will be lost and asked for again; raise it with `sysctl -w net.core.rmem_max=4194304`")
        }
        return address
    }

    private var defaultName: String { "node-" + String(nodeID.hex.prefix(6)) }

    /// Leaves gracefully: tells the members, lets the datagrams go out, then closes everything.
    public func leave() async {
        guard !stopped else { return }
        if var instance = membership {
            let directives = instance.leave(now: now)
            membership = instance
            // Wait for the departure's datagrams to be handed to the kernel before closing
            // (writes complete in order, so the last one stands for all).
            trackLastWrite = true
            perform(directives)
            if let last = lastWrite { try? await last.get() }
        }
        await stop()
    }

    /// Closes the sockets without telling anyone (as a crash would, but cleanly).
    public func stop() async {
        guard !stopped else { return }
        stopped = true
        timer?.cancel()
        timer = nil
        saveKnownMembers()
        if let controlChannel { try? await controlChannel.close() }
        if let channel { try? await channel.close() }
        controlChannel = nil
        channel = nil
        for subscriber in viewSubscribers.values { subscriber.finish() }
        viewSubscribers = [:]
        for subscriber in messageSubscribers.values { subscriber.finish() }
        messageSubscribers = [:]
        for (_, continuation) in pendingSends { continuation.resume(returning: [:]) }
        pendingSends = [:]
        let waiters = stopWaiters
        stopWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    public func waitUntilStopped() async {
        guard !stopped else { return }
        await withCheckedContinuation { stopWaiters.append($0) }
    }

    // MARK: what the node knows

    /// Every member this node knows of, itself first.
    public var members: [Member] { membership?.view ?? [] }

    /// Snapshots of the member list, now and after every change.
    public func memberUpdates() -> AsyncStream<[Member]> {
        let (stream, continuation) = AsyncStream<[Member]>.makeStream(bufferingPolicy: .bufferingNewest(1))
        nextSubscriberID += 1
        let id = nextSubscriberID
        viewSubscribers[id] = continuation
        continuation.yield(members)
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { await self.unsubscribe(id) }
        }
        return stream
    }

    private func unsubscribe(_ id: UInt64) { viewSubscribers[id] = nil }

    /// Addresses for invites and our record: `--advertise` if given, else the listen address,
    /// else (bound to a wildcard) every non-loopback interface address, else loopback.
    public func inviteAddresses() -> [PeerAddress] {
        if !configuration.advertise.isEmpty { return configuration.advertise }
        guard let localAddress else { return [] }
        if !localAddress.isUnspecified { return [localAddress] }
        let interfaces = ((try? System.enumerateDevices()) ?? [])
            .compactMap { device in device.address.flatMap(PeerAddress.init) }
            .filter { !$0.isLoopback && !$0.isUnspecified && !$0.isLinkLocalIPv6 }
            .filter { $0.isIPv6 == localAddress.isIPv6 }
            .map { PeerAddress(host: $0.host, port: localAddress.port) }
        let unique = Array(Set(interfaces)).sorted()
        if !unique.isEmpty { return Array(unique.prefix(MemberRecord.maxAddresses)) }
        let loopback = localAddress.isIPv6 ? "::1" : "127.0.0.1"
        return [PeerAddress(host: PeerAddress.parseHost(loopback) ?? localAddress.host, port: localAddress.port)]
    }

    public func invite() -> InviteToken {
        InviteToken(secret: session, addresses: inviteAddresses())
    }

    public func status() -> StatusReport {
        let view = members
        let me = view.first
        let selfInfo = StatusReport.SelfInfo(
            id: nodeID.hex, name: me?.record.name ?? defaultName,
            address: (me?.address ?? localAddress).map(\.description) ?? "",
            session: session.sessionID.description, keyEpoch: epochs.transitions.count,
            profile: configuration.profile.rawValue,
            localHealth: membership?.localHealth.score ?? 0,
            receiveBuffer: socketBuffers.receive, sendBuffer: socketBuffers.send)
        let memberInfos = view.map { member in
            StatusReport.MemberInfo(id: member.id.hex, name: member.record.name,
                                    address: member.address?.description ?? "", state: member.status.rawValue,
                                    incarnation: member.incarnation,
                                    rttMs: member.rtt.map { ($0.milliseconds * 1000).rounded() / 1000 })
        }
        let counterInfo = StatusReport.Counters(
            datagramsSent: counters.datagramsSent, datagramsReceived: counters.datagramsReceived,
            bytesSent: counters.bytesSent, bytesReceived: counters.bytesReceived, dropped: counters.dropped,
            sendErrors: counters.sendErrors, retransmissions: delivery.retransmissions,
            chunksFetched: counters.chunksFetched, chunksServed: counters.chunksServed,
            chunksRejected: counters.chunksRejected, chunkPayloadBytesSent: counters.chunkPayloadBytesSent,
            pieceReasks: assembler.reasks, piecesUnsolicited: counters.piecesUnsolicited,
            wantsRefused: counters.wantsRefused, simulatedDrops: counters.simulatedDrops,
            requestTimeouts: transfer.timeouts, handoversSent: counters.handoversSent,
            handoversRefused: counters.handoversRefused)
        return StatusReport(self: selfInfo, members: memberInfos, attachments: [], counters: counterInfo)
    }

    // MARK: control socket

    func handleControl(_ request: ControlRequest, responder: ControlResponder) {
        switch request.command {
        case .status:
            Task {
                var report = self.status()
                report.attachments = await self.attachmentInfos()
                responder.send(ControlResponse(ok: true, status: report))
            }
        case .invite:
            responder.send(ControlResponse(ok: true, invite: invite().text))
        case .leave:
            // Answer first, then leave: the CLI waits for the node to exit.
            responder.send(ControlResponse(ok: true))
            eventLoop.execute { [self] in
                assumeIsolated { node in
                    node.beginLeave()
                }
            }
        case .send:
            controlSend(request, responder: responder)
        case .listen:
            controlListen(responder: responder)
        case .attach, .attachments, .get, .remove:
            controlJournal(request, responder: responder)
        case .removeMember:
            do {
                let (id, handedTo) = try removeMember(request.id ?? "")
                var response = ControlResponse(ok: true, delivered: handedTo)
                response.member = id.hex
                response.session = session.sessionID.description
                responder.send(response)
            } catch {
                responder.send(.failure(error.description))
            }
        }
    }

    private func beginLeave() {
        Task { await leave() }
    }

    // MARK: datagrams and time

    func receive(_ envelope: AddressedEnvelope<ByteBuffer>) {
        guard let segment = envelope.metadata?.segmentSize, segment > 0, envelope.data.readableBytes > segment else {
            return receive(envelope.data, from: envelope.remoteAddress)
        }
        // Coalesced by GRO: equal-sized datagrams back to back, the last one possibly shorter.
        var data = envelope.data
        while data.readableBytes > 0, let datagram = data.readSlice(length: min(segment, data.readableBytes)) {
            receive(datagram, from: envelope.remoteAddress)
        }
    }

    private func receive(_ datagram: ByteBuffer, from remote: SocketAddress) {
        if configuration.simulatedLoss > 0,
           Double(lossRandom.next() >> 11) / Double(1 << 53) < configuration.simulatedLoss {
            counters.simulatedDrops += 1
            return
        }
        counters.datagramsReceived += 1
        counters.bytesReceived += UInt64(datagram.readableBytes)
        switch codec.open(datagram) {
        case .failure(.foreign):
            receiveEarlierEpoch(datagram, from: remote)
        case let .failure(reason):
            counters.countDrop(reason)
            logger.trace("dropped datagram", metadata: ["reason": "\(reason.rawValue)", "from": "\(remote)"])
        case let .success(opened):
            handle(opened, from: remote)
        }
    }

    /// One datagram. The timer is re-armed once per read batch (`readBatchComplete`), not here.
    private func handle(_ datagram: OpenedDatagram, from remote: SocketAddress) {
        guard !stopped, let address = PeerAddress(remote) else { return }
        let time = now
        // Mutated in place: a copy of the instance would copy its tables on every datagram.
        // A handover comes alone, from a member that may not be in our view yet: it is not taken
        // as an answer to our join.
        if datagram.header.keyKind == .hello, case .epochHandover = datagram.frames.first {
            for case let .epochHandover(handover) in datagram.frames {
                receiveHandover(handover, header: datagram.header, from: address)
            }
            return
        }
        // Membership speaks only in hello datagrams (a member is probed before its keys are
        // known); pairwise ones, most of all a transfer's pieces, are not its business.
        if datagram.header.keyKind == .hello {
            perform(membership?.onFrames(datagram.frames, from: datagram.header.sender, address: address, now: time) ?? [])
        }
        // Messenger frames count only under pairwise keys: then the header's sender is proven.
        if datagram.header.keyKind == .pairwise {
            perform(delivery.onFrames(datagram.frames, from: datagram.header.sender, now: time, deferAcks: true))
            receiveTransfer(datagram.frames, from: datagram.header.sender)
        }
    }

    private func onTimer() {
        timer = nil
        timerDeadline = nil
        guard var instance = membership, !stopped else { return }
        let time = now
        let directives = instance.onTick(now: time)
        membership = instance
        perform(directives)
        perform(delivery.onTick(now: time))
        if var instance = journal {
            let out = instance.onTick(now: time)
            journal = instance
            perform(journalDirectives: out)
        }
        expireChunkRequests(now: time)
        transferTick(now: time)
        sendEpochBeacons(now: time)
        if knownDirty { saveKnownMembers() }
        rearm()
    }

    /// Keeps exactly one timer armed, at the membership's next deadline.
    func rearm() {
        // The deadline is read through the optional: binding the instance would copy it.
        guard !stopped, var deadline = membership?.nextDeadline else { return }
        if let deliveryDeadline = delivery.nextDeadline { deadline = min(deadline, deliveryDeadline) }
        if let journalDeadline { deadline = min(deadline, journalDeadline) }
        if let epochBeaconAt { deadline = min(deadline, epochBeaconAt) }
        guard deadline != timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = eventLoop.scheduleTask(deadline: .uptimeNanoseconds(deadline.nanoseconds)) { [self] in
            assumeIsolated { $0.onTimer() }
        }
    }

    func perform(_ directives: [MembershipDirective]) {
        guard !directives.isEmpty else { return }
        var viewChanged = false
        var newMember = false
        for directive in directives {
            switch directive {
            case let .send(frames, _, address):
                let datagram = codec.sealHello(frames, nonce: .random(), allocator: channel?.allocator ?? .init())
                send(datagram, to: address)
            case let .memberChanged(member):
                viewChanged = true
                if member.status != .left, !known.members.contains(where: { $0.id == member.id.hex }) { newMember = true }
                peerAddresses[member.id] = member.status.isGone ? nil : member.address
                knownDirty = true
                if member.status.isGone {
                    // Keys and channels stay until the member is forgotten or a new boot shows
                    // up: a member declared dead that refutes resumes where it was.
                    perform(delivery.failPending(member.id, now: now))
                    if var instance = journal {
                        let out = instance.memberLeft(member.id)
                        journal = instance
                        perform(journalDirectives: out)
                    }
                    transfer.removePeer(member.id)
                    assembler.removeHolder(member.id)
                } else if codec.installedBoot(of: member.id) != member.record.bootID
                            || !delivery.peers.contains(member.id),
                          let keys = PairwiseKeys.derive(session: session, local: ephemeral,
                                                         peerPublicKey: member.record.ephemeralKey) {
                    // A new boot of a member starts its channels afresh: what was pending to the
                    // old boot is reported as not delivered.
                    if codec.installedBoot(of: member.id) != nil {
                        perform(delivery.removePeer(member.id, now: now))
                    }
                    codec.installPeer(member.id, bootID: member.record.bootID, keys: keys)
                    delivery.addPeer(member.id)
                    if var instance = journal {
                        // A new boot may have lost what it was sent: start its journal sync afresh.
                        _ = instance.memberLeft(member.id)
                        let out = instance.memberJoined(member.id)
                        journal = instance
                        perform(journalDirectives: out)
                    }
                } else {
                    // Back from a (false) death with the same boot: resume journal sync.
                    delivery.addPeer(member.id)
                    if var instance = journal {
                        let out = instance.memberJoined(member.id)
                        journal = instance
                        perform(journalDirectives: out)
                    }
                }
                logger.info("member changed", metadata: ["member": "\(member.id)", "state": "\(member.status.rawValue)",
                                                         "incarnation": "\(member.incarnation)"])
            case let .memberForgotten(id):
                viewChanged = true
                peerAddresses[id] = nil
                known.members.removeAll { $0.id == id.hex }
                knownDirty = true
                codec.removePeer(id)
                perform(delivery.removePeer(id, now: now))
            }
        }
        if let me = membership?.me, me.incarnation != known.incarnation {
            known.incarnation = me.incarnation
            knownDirty = true
        }
        // A member met for the first time is written down at once (other changes wait for the
        // timer): a node that crashes right after joining must still find the mesh again.
        if newMember { saveKnownMembers() }
        if viewChanged {
            let view = members
            for subscriber in viewSubscribers.values { subscriber.yield(view) }
        }
    }

    private func saveKnownMembers() {
        knownDirty = false
        // The view is merged into what was remembered, not written over it: just after a restart
        // the view is empty, and a crash then must not forget where the members were. Dead
        // members stay too (if both ends of a link die in turn, each restart must still know
        // where the other was); a member that left, or that membership forgot, is dropped.
        var entries = Dictionary(known.members.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
        for member in members.dropFirst() {
            entries[member.id.hex] = member.status == .left ? nil
                : KnownMembers.Entry(id: member.id.hex, name: member.record.name,
                                     addresses: member.record.addresses.map(\.description))
        }
        known.members = entries.values.sorted { $0.id < $1.id }
        do {
            try known.save(to: configuration.dataDirectory)
        } catch {
            logger.warning("cannot save members", metadata: ["error": "\(error)"])
        }
    }

    /// Writes a datagram; `flush: false` leaves it for `flushDatagrams()`, so a burst goes to
    /// the kernel in as few system calls as NIO can manage.
    func send(_ datagram: ByteBuffer, to address: PeerAddress, flush: Bool = true) {
        guard let channel, let remote = try? address.socketAddress() else { return }
        counters.datagramsSent += 1
        counters.bytesSent += UInt64(datagram.readableBytes)
        let envelope = AddressedEnvelope(remoteAddress: remote, data: datagram)
        if trackLastWrite {
            lastWrite = channel.writeAndFlush(envelope)
        } else if flush {
            channel.writeAndFlush(envelope, promise: nil)  // no future per datagram on the hot path
        } else {
            channel.write(envelope, promise: nil)
        }
    }

    func flushDatagrams() { channel?.flush() }

    var isWritable: Bool { channel?.isWritable ?? false }

    static let receiveOffload = System.supportsUDPReceiveOffload
    static let segmentationOffload = System.supportsUDPSegmentationOffload

    /// Writes `count` datagrams of `segmentSize` bytes (the last may be shorter) that sit back to
    /// back in `batch` as one segmented send (GSO), or one by one where the kernel cannot.
    func sendSegmented(_ batch: ByteBuffer, segmentSize: Int, count: Int, to address: PeerAddress) {
        guard count > 1, Self.segmentationOffload, let channel, let remote = try? address.socketAddress() else {
            var rest = batch
            while rest.readableBytes > 0, let datagram = rest.readSlice(length: min(segmentSize, rest.readableBytes)) {
                send(datagram, to: address, flush: false)
            }
            return
        }
        counters.datagramsSent += UInt64(count)
        counters.bytesSent += UInt64(batch.readableBytes)
        let metadata = AddressedEnvelope<ByteBuffer>.Metadata(ecnState: .transportNotCapable, packetInfo: nil,
                                                              segmentSize: segmentSize)
        channel.write(AddressedEnvelope(remoteAddress: remote, data: batch, metadata: metadata), promise: nil)
    }

    fileprivate func countSendError() { counters.sendErrors += 1 }

    /// The end of a read batch: acknowledge what it brought, once per peer.
    fileprivate func readBatchComplete() {
        guard !stopped else { return }
        perform(delivery.flushAcks(now: now))
        channel?.flush()
        rearm()
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

    func channelReadComplete(context: ChannelHandlerContext) {
        node.assumeIsolated { $0.readBatchComplete() }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ICMP errors (port unreachable from a departed peer) surface here; they are not fatal.
        node.assumeIsolated { $0.countSendError() }
    }
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
