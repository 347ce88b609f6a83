import Foundation
import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// The node's I/O: a UDP channel, the control socket, one timer, and the store, around the one
/// pure core (`NodeInstance`) that takes every protocol decision. The actor runs on the
/// channel's event loop (`unownedExecutor`), so a datagram reaches the core without a thread
/// hop; each input goes to the core with the time, and `runEffects` carries out what it asks,
/// in order. Nothing here decides what to send, store or tell whom.
package actor MeshNode {
    package nonisolated let configuration: NodeConfiguration
    package nonisolated let nodeID: NodeID
    /// The bound UDP address.
    package nonisolated let localAddress: PeerAddress
    let eventLoop: any EventLoop
    let logger: Logger
    var core: NodeInstance
    /// The UDP socket; reopened on the same port if NIO closes it under us (`datagramsClosed`).
    private(set) var channel: any Channel
    /// When the UDP socket was reopened lately (at most `maxReopensPerMinute`).
    private var reopenedAt: [MeshInstant] = []
    static let maxReopensPerMinute = 5
    private var controlChannel: (any Channel)?
    /// LAN discovery's sockets (none when the node is not on a LAN, or with `--no-lan-discovery`).
    var lanBeacon: LANBeacon?
    var controlConnections: ControlConnections?
    /// `listen` connections, handed each message as it is delivered (no queue between).
    var listeners: [ControlResponder] = []
    private var storage: StorageWorker
    /// Where a given-up load's output path is marked, for the store to leave it unwritten.
    nonisolated let exportCancellations: ExportCancellations
    nonisolated let sendOutbox = SendOutbox()
    let socketBuffers: SocketBuffers
    /// What the shell counts itself: the core never sees these.
    var sendErrors: UInt64 = 0
    /// Destinations the kernel would refuse (no route, broadcast): never handed to the channel,
    /// which one such send would close.
    var destinations: DestinationCheck
    var simulatedDrops: UInt64 = 0
    /// The CPU time relaying for others took (`RelayCPU`).
    var relayCPU = RelayCPU()
    /// Messages a reader (a `listen`, or a `messages()` stream) was too far behind to be given.
    var messagesDroppedForSlowReaders: UInt64 = 0
    /// Why the node stopped by itself, when it did (an identity conflict).
    package private(set) var stopReason: GroupMeshError?
    /// The session's life as the Swift API shows it, and what invalidates it when it stops.
    package private(set) var sessionState = SessionState.waiting
    private(set) var invalidation: InvalidationReason?
    var stateSubscribers = Subscribers<SessionState>()
    /// A leave or an end of ours is under way: it stops the node itself once it is out.
    private var departing = false
    let slot: NodeSlot
    private var lossRandom = SplitMix64(seed: SecureRandom.uint64())

    private var drained: [NodeEffect] = []
    private var timer: Scheduled<Void>?
    private var timerDeadline: MeshInstant?
    private var nextRequest: UInt64 = 0
    private var nextConsumer: UInt64 = 0
    private var runningEffects = false
    private var waiters: [RequestID: RequestWaiter] = [:]
    var viewSubscribers = Subscribers<[Member]>()
    var messageInboxes = MessageInboxes()
    var attachmentSubscribers = Subscribers<[Attachment]>()
    /// What happened, numbered, the last 1,024 kept (`groupmesh events`).
    var eventFeed = EventFeed()
    /// `events` connections, handed each event as it happens.
    var eventListeners: [ControlResponder] = []
    let eventHandlers: EventHandlers?
    /// While leaving: the last datagram written, so the sockets close only after it went out.
    var lastWrite: EventLoopFuture<Void>?
    private(set) var trackLastWrite = false
    private(set) var closed = false
    /// The data dir may hold the mark that its invite was said to be out of date: removed once a
    /// member lets the node in.
    private var inviteMarkMayStand = false
    private var stopWaiters: [CheckedContinuation<Void, Never>] = []
    /// The counts as swift-metrics figures, published every second while the node runs.
    var metrics: NodeMetrics
    private var metricsPublisher: RepeatedTask?
    /// Asks the gateway to map our UDP port (PortMapper); nil before `begin`.
    var portMapper: PortMapper?
    /// `--stun` and `--turn`: the servers' clients (MeshNode+Traversal).
    var traversal: ServerTraversal?
    /// Birthday rounds' sockets, and the routes through the ones that were hit (MeshNode+Birthday).
    var birthday = BirthdaySocketTable()

    package nonisolated var unownedExecutor: UnownedSerialExecutor {
        eventLoop.executor.asUnownedSerialExecutor()
    }

    var now: MeshInstant { MeshInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds) }

    // MARK: start

    /// Binds the UDP socket and the control socket, restores what the data dir holds, and joins
    /// through the invite, `--join` and the members remembered from the last run.
    package static func start(
        identity: NodeIdentity, epochs: KeyEpochs, configuration: NodeConfiguration,
        eventLoop: any EventLoop, logger: Logger
    ) async throws(GroupMeshError) -> MeshNode {
        let node = try await prepare(
            identity: identity, epochs: epochs, configuration: configuration,
            eventLoop: eventLoop, logger: logger)
        try await node.join()
        return node
    }

    /// Binds the UDP socket and restores what the data dir holds, without joining: the node is
    /// `waiting`, takes no datagram, and its streams can be subscribed to before `join`.
    package static func prepare(
        identity: NodeIdentity, epochs: KeyEpochs, configuration: NodeConfiguration,
        eventLoop: any EventLoop, logger: Logger
    ) async throws(GroupMeshError) -> MeshNode {
        // A name given is kept for the starts that give none (once this start stands): a restart
        // stays who it was.
        var configuration = configuration
        let directory = configuration.dataDirectory
        let given = configuration.name
        let kept = directory.loadName()
        configuration.name = given ?? kept
        let slot = NodeSlot()
        let channel = try await bindDatagrams(configuration, eventLoop: eventLoop, slot: slot)
        let buffers = await SocketBuffers.enlarge(channel)
        guard let socketAddress = channel.localAddress, let address = PeerAddress(socketAddress) else {
            try? await channel.close()
            throw .bindFailed(address: configuration.listenDescription, reason: "the socket has no local address")
        }
        let probesPaths = await DontFragment.apply(to: channel, ipv6: address.isIPv6)
        let store: AttachmentStore
        let restored: NodeInstance.Restored
        do {
            store = try AttachmentStore(directory: configuration.dataDirectory)
            // The chunks lost are missing, and fetched again; the user should still hear of it.
            for line in await store.damage { logger.warning("chunk store: \(line)") }
            if let damaged = directory.setAsideDamagedMembers() { logger.warning("\(damaged)") }
            if let damaged = directory.removeDamagedRivals() { logger.warning("\(damaged)") }
            var found = await store.restore(epochs: epochs, remembered: directory.loadRememberedMembers())
            // A dir founded before the mark existed says so only in `members.json`: marked now.
            // Unless a member let this node in (its introduction is kept): then the flag was an
            // older release's guess, after a damaged file, and is dropped.
            if found.remembered.introductions.contains(where: { $0.member == identity.nodeID }) {
                found.remembered.founder = false
            } else if found.remembered.founder, !directory.founded {
                try? directory.markFounded()
            }
            found.founded = found.remembered.founder || directory.founded
            found.foundingNonce = directory.loadFoundingNonce()
            restored = found
        } catch {
            try? await channel.close()
            throw error
        }
        if let given, given != kept {
            do { try directory.saveName(given) } catch {
                logger.warning("the name is not kept for the next start: \(error)")
            }
        }
        return MeshNode(
            identity: identity, restored: restored, configuration: configuration, channel: channel,
            address: address, buffers: buffers, probesPaths: probesPaths, store: store, slot: slot,
            eventLoop: eventLoop, logger: logger)
    }

    /// Takes datagrams, opens the control socket, and joins through the invite, `--join` and
    /// the members remembered from the last run. A failure invalidates the session.
    package func join() async throws(GroupMeshError) {
        guard sessionState == .waiting else {
            if case let .invalidated(reason) = sessionState { throw .control("the session is over (\(reason))") }
            return
        }
        slot.node = self
        inviteMarkMayStand = configuration.dataDirectory.hasInviteOutOfDateMark
        watchDatagrams()
        if configuration.controlSocket {
            do {
                let connections = ControlConnections(eventLoop: eventLoop)
                let control = try await ControlServer.bind(
                    path: configuration.dataDirectory.controlSocketPath,
                    directoryPath: configuration.dataDirectory.path,
                    node: self, connections: connections, eventLoop: eventLoop)
                adoptControl(control, connections: connections)
            } catch {
                let failure = GroupMeshError.dataDirectory(
                    path: configuration.dataDirectory.path, reason: "control socket: \(error)")
                invalidation = .failedToStart(failure.description)
                await stop()
                throw failure
            }
        }
        await openLANBeacon()
        begin()
        setState(.joined)
    }

    /// The new state to every state stream; an invalidation is the last thing they see.
    private func setState(_ state: SessionState) {
        guard !sessionState.isInvalidated else { return }
        sessionState = state
        stateSubscribers.yield(state)
        if state.isInvalidated { stateSubscribers.finishAll() }
    }

    /// Closes a node that never joined (its session was dropped).
    package func stopIfWaiting() async {
        if sessionState == .waiting { await stop() }
    }

    package func stateUpdates() -> AsyncStream<SessionState> {
        stateSubscribers.add(buffering: .bufferingNewest(8), initial: sessionState)
    }

    private init(
        identity: NodeIdentity, restored: NodeInstance.Restored, configuration: NodeConfiguration,
        channel: any Channel, address: PeerAddress, buffers: SocketBuffers, probesPaths: Bool,
        store: AttachmentStore, slot: NodeSlot, eventLoop: any EventLoop, logger: Logger
    ) {
        self.slot = slot
        eventHandlers =
            configuration.eventHandlers.isEmpty
            ? nil
            : EventHandlers(
                specs: configuration.eventHandlers, timeout: configuration.eventHandlerTimeout,
                environment: [
                    "GROUPMESH_NODE_ID": identity.nodeID.hex,
                    "GROUPMESH_DATA_DIR": configuration.dataDirectory.path,
                ],
                logger: logger)
        let addresses = Self.inviteAddresses(configuration: configuration, bound: address)
        let boot = NodeInstance.Boot(
            identity: identity, ephemeral: .generate(), bootID: Self.newBootID(),
            name: configuration.name ?? "node-" + String(identity.nodeID.hex.prefix(6)),
            addresses: addresses, localAddress: address, unixTime: UInt64(max(0, time(nil))))
        var settings = configuration.settings
        settings.logLevel = NodeLogLevel(logger.logLevel)
        // Without don't-fragment, pieces stay at the size every path carries.
        if !probesPaths { settings.pathMTU.ladder = [] }
        self.configuration = configuration
        nodeID = identity.nodeID
        localAddress = address
        destinations = DestinationCheck(local: address)
        self.eventLoop = eventLoop
        self.logger = logger
        self.channel = channel
        socketBuffers = buffers
        storage = StorageWorker(store: store)
        exportCancellations = store.cancelledExports
        let labels = configuration.metricsLabels.sorted { $0.key < $1.key }
        for (name, _) in labels where NodeMetrics.reservedLabels.contains(name) {
            logger.warning("metrics label '\(name)' is one the metrics use themselves; left out")
        }
        metrics = NodeMetrics(
            dimensions: labels.filter { !NodeMetrics.reservedLabels.contains($0.key) }.map { ($0.key, $0.value) })
        core = NodeInstance(
            boot: boot, restored: restored, settings: settings, random: SodiumRandomNumberGenerator(),
            now: MeshInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds))
    }

    /// The start time in Unix seconds, then 32 random bits: two live boots of one identity (a
    /// copied data dir) agree on which started later (PROTOCOL.md §4, identity conflicts).
    static func newBootID() -> UInt64 {
        UInt64(UInt32(clamping: time(nil))) << 32 | (SecureRandom.uint64() & 0xFFFF_FFFF)
    }

    /// NIO closes a datagram channel on a send error it does not expect (`EPERM` from an outbound
    /// firewall rule; `DestinationCheck` keeps the others away): the node would run on, deaf.
    private func watchDatagrams() {
        let watched = channel
        watched.closeFuture.whenComplete { [self] _ in
            eventLoop.execute { self.assumeIsolated { $0.datagramsClosed(watched) } }
        }
    }

    /// The UDP socket closed, not by `stop`: it is opened again on the same port, at most five
    /// times a minute; past that, or if the port cannot be had, the node stops and says why.
    private func datagramsClosed(_ watched: any Channel) {
        guard !closed, watched === channel else { return }
        sendErrors += 1
        reopenedAt = reopenedAt.filter { now < $0 + .seconds(60) }
        guard reopenedAt.count < Self.maxReopensPerMinute else {
            logger.critical(
                "the UDP socket on \(localAddress) was closed by a send the kernel refused, \(Self.maxReopensPerMinute) times within a minute; stopping (an outbound firewall rule refusing members' addresses?)"
            )
            stopReason = .bindFailed(
                address: localAddress.description, reason: "the UDP socket kept being closed by refused sends")
            Task { await stop() }
            return
        }
        reopenedAt.append(now)
        // Whichever destination refused the send, the next writes to each find it again.
        destinations.unconfirmAll()
        logger.error("the UDP socket on \(localAddress) was closed by a send the kernel refused; reopening it")
        Task { await reopenDatagrams() }
    }

    private func reopenDatagrams() async {
        guard !closed else { return }
        var rebinding = configuration
        rebinding.listenPort = Int(localAddress.port)
        do {
            let reopened = try await Self.bindDatagrams(rebinding, eventLoop: eventLoop, slot: slot)
            _ = await SocketBuffers.enlarge(reopened)
            _ = await DontFragment.apply(to: reopened, ipv6: localAddress.isIPv6)
            guard !closed else { try? await reopened.close(); return }
            channel = reopened
            watchDatagrams()
            writabilityChanged(reopened.isWritable)
        } catch {
            guard !closed else { return }
            logger.critical("cannot reopen the UDP socket on \(localAddress): \(error); stopping")
            stopReason = error
            await stop()
        }
    }

    private func adoptControl(_ control: any Channel, connections: ControlConnections) {
        controlChannel = control
        controlConnections = connections
    }

    private func begin() {
        guard sessionState == .waiting else { return }
        storage.start { [self] ticket, result in
            eventLoop.execute { self.assumeIsolated { $0.storageCompleted(ticket, result) } }
        }
        eventFeed.start(session: core.session.sessionID, removed: Set(core.epochs.removed))
        core.start(seeds: (configuration.invite?.token.addresses ?? []) + configuration.join.map(\.peer), now: now)
        runEffects()
        startPortMapping()
        startTraversal()
        if metrics.isReporting {
            metricsPublisher = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .seconds(1)) { [self] _ in
                assumeIsolated { $0.publishMetrics() }
            }
        }
        logger.info(
            "started",
            metadata: [
                "address": "\(localAddress)", "node": "\(nodeID)",
                "receiveBuffer": "\(socketBuffers.receive)",
            ])
        if socketBuffers.isSmall {
            logger.warning(
                "the UDP receive buffer is \(socketBuffers.receive / 1024) KiB: bursts of chunk pieces will be lost and asked for again; raise it with `sysctl -w net.core.rmem_max=4194304`"
            )
        }
    }

    // MARK: inputs

    /// Runs `command` in the core and waits for its completion.
    func perform(_ command: NodeCommand) async -> Result<NodeResult, NodeError> {
        await withCheckedContinuation { continuation in
            submit(command, request: nextRequestID(), to: .continuation(continuation))
        }
    }

    /// `perform`, given up when the calling task is cancelled: the core is told (`cancel`), and the
    /// command completes as `cancelled`. `onCancel` runs at once, on the cancelling thread.
    func performCancellable(
        _ command: NodeCommand, onCancel cancelled: @escaping @Sendable () -> Void = {}
    )
        async -> Result<NodeResult, NodeError>
    {
        let request = nextRequestID()
        return await withTaskCancellationHandler {
            // Checked in the same job that submits: a cancel after it is handled after the submit.
            guard !Task.isCancelled else { return .failure(.cancelled) }
            return await withCheckedContinuation { continuation in
                submit(command, request: request, to: .continuation(continuation))
            }
        } onCancel: {
            cancelled()
            eventLoop.execute { self.assumeIsolated { $0.cancel(request) } }
        }
    }

    private func cancel(_ request: RequestID) {
        core.cancel(request, now: now)
        runEffects()
        rearm()
    }

    func nextRequestID() -> RequestID {
        nextRequest += 1
        return RequestID(nextRequest)
    }

    /// Hands `command` to the core at once; `completion` gets its result later, on this actor.
    /// Commands submitted one after another reach the core in that order, whenever they complete.
    func submit(_ command: NodeCommand, completion: @escaping @Sendable (Result<NodeResult, NodeError>) -> Void) {
        submit(command, request: nextRequestID(), to: .callback(completion))
    }

    /// How far one application consumer is behind (`ConsumerFlow`), as the shell measured it.
    func reportConsumer(_ consumer: UInt64, _ report: ConsumerFlow.Report) {
        core.applicationConsumer(consumer, report, now: now)
        // Reported as a message was written, the effects loop under way carries these out.
        guard !runningEffects else { return }
        runEffects()
        rearm()
    }

    func nextConsumerID() -> UInt64 {
        nextConsumer += 1
        return nextConsumer
    }

    /// Someone waits for `request` (registered before the core sees it: the completion may be
    /// among the command's own effects).
    func register(_ waiter: RequestWaiter, for request: RequestID) {
        waiters[request] = waiter
    }

    private func submit(_ command: NodeCommand, request: RequestID, to waiter: RequestWaiter) {
        // Registered first: the completion may be among the command's own effects.
        waiters[request] = waiter
        core.handle(command, request: request, now: now)
        runEffects()
        rearm()
    }

    /// A UDP read, split into its datagrams when GRO coalesced several. True when one of them
    /// opened under a member's key.
    @discardableResult
    func receive(_ envelope: AddressedEnvelope<ByteBuffer>) -> Bool {
        guard let address = PeerAddress(envelope.remoteAddress) else { return false }
        guard let segment = envelope.metadata?.segmentSize, segment > 0, envelope.data.readableBytes > segment else {
            return receive(envelope.data, from: address)
        }
        // Coalesced by GRO: equal-sized datagrams back to back, the last one possibly shorter.
        var data = envelope.data
        var authenticated = false
        while data.readableBytes > 0, let datagram = data.readSlice(length: min(segment, data.readableBytes)) {
            if receive(datagram, from: address) { authenticated = true }
        }
        return authenticated
    }

    @discardableResult
    private func receive(_ datagram: ByteBuffer, from address: PeerAddress) -> Bool {
        if configuration.simulatedLoss > 0,
            Double(lossRandom.next() >> 11) / Double(1 << 53) < configuration.simulatedLoss
        {
            simulatedDrops += 1
            return false
        }
        var (datagram, address) = (datagram, address)
        var route: TraversalRoute?
        if traversal != nil {
            guard let taken = traversalReceive(datagram, from: address) else { return false }
            (datagram, address, route) = taken
        }
        let instant = now
        let cpuBefore = relayCPU.start(now: instant)
        let relayAsksBefore = relayAsks
        let authenticated = core.handle(datagram: datagram, from: address, now: instant)
        // Only a datagram the core opened moves a route: a forged source moves nothing.
        if authenticated, let route { traversalHeard(route) }
        runEffects()
        if relayAsks != relayAsksBefore { relayCPU.relayed(since: cpuBefore, now: instant) }
        return authenticated
    }

    /// Forwards others asked of us: carried, dropped over the budget or refused.
    private var relayAsks: UInt64 {
        let counters = core.relayService.counters
        return counters.forwardedDatagrams &+ counters.droppedOverRate &+ counters.refused
    }

    /// The end of a read batch: what it brought is acknowledged, and the timer re-armed, once.
    func readBatchComplete() {
        core.endReadBatch(now: now)
        runEffects()
        rearm()
    }

    private func onTimer() {
        timer = nil
        timerDeadline = nil
        // The monotonic clock stops while the machine sleeps; the wall clock does not.
        core.setUnixTime(UInt64(max(0, time(nil))), at: now)
        core.tick(now: now)
        runEffects()
        rearm()
    }

    private func storageCompleted(_ ticket: StorageTicket, _ result: Result<StorageOutcome, StorageFailure>) {
        core.storageCompleted(ticket, result, now: now)
        runEffects()
        rearm()
    }

    func writabilityChanged(_ writable: Bool) {
        core.setWritable(writable)
    }

    func countSendError() { sendErrors += 1 }

    func channelFlush() {
        channel.flush()
        if birthday.routesWritten { flushBirthdayRoutes() }
    }

    // MARK: effects

    /// Carries out what the core asked, in order: the only place where its effects happen.
    func runEffects() {
        // Nothing to do is the common case after a datagram (an acknowledgement waits for the
        // end of the read batch): asked by draining, which copies nothing. A core left leaving
        // without a datagram to write (nobody to tell) must still be stopped.
        guard core.drainEffects(into: &drained) else { return stopIfLeft() }
        runningEffects = true
        defer { runningEffects = false }
        var wrote = false, viewChanged = false, attachmentsChanged = false
        // The departure is among these effects: the sockets close only once it is written.
        if core.phase == .leaving { trackLastWrite = true }
        repeat {
            for effect in drained {
                switch effect {
                case let .send(datagram, address):
                    write(datagram, to: address)
                    wrote = true
                case let .sendShortLived(datagram, address, hops):
                    writeShortLived(datagram, to: address, hops: hops)
                case let .sendSegments(batch, segmentSize, count, address):
                    writeSegments(batch, segmentSize: segmentSize, count: count, to: address)
                    wrote = true
                case let .openBirthdaySockets(request):
                    openBirthdaySockets(request)
                case let .storage(request, ticket):
                    storage.submit(request, ticket)
                case let .announceOnLAN(bytes):
                    lanBeacon?.announce(bytes)
                case let .complete(request, result):
                    waiters.removeValue(forKey: request)?.complete(with: result)
                case let .event(.message(message)):
                    if !messageInboxes.isEmpty { deliverToInboxes(message) }
                    if !listeners.isEmpty { deliverToListeners(message) }
                case let .event(.applicationConsumerStalled(consumer)):
                    cutStalledConsumer(consumer)
                case .event(.attachmentsChanged):
                    attachmentsChanged = true
                case let .event(.memberChanged(member)):
                    viewChanged = true
                    publish(eventFeed.memberChanged(member, now: Date()))
                case let .event(.epochChanged(session)):
                    viewChanged = true
                    publish(
                        eventFeed.epochChanged(
                            session, removed: Set(core.epochs.removed), members: core.members, time: Date()))
                case .event(.memberForgotten):
                    viewChanged = true
                case let .event(.identityConflict(twin, stopping)):
                    guard stopping else { break }
                    let addresses = twin.map(\.description).joined(separator: ", ")
                    stopReason = .identityConflict(twin: addresses)
                    invalidation = .identityConflict(twin: addresses)
                    Task { await self.stop() }
                case let .event(.sessionEnded(by, name)):
                    invalidation = .ended(by: by == nodeID ? "this member" : Self.displayName(name, by))
                    sendOutbox.refuse(notRunningReason)
                    viewChanged = true
                    let address = core.membership.member(by)?.address?.description ?? ""
                    publish(eventFeed.sessionEnded(by: .init(id: by.hex, name: name, address: address), now: Date()))
                case let .event(.removedFromSession(by)):
                    invalidation = .removed(by: core.displayName(of: by))
                    configuration.dataDirectory.saveRemoved(by: core.displayName(of: by))
                    sendOutbox.refuse(notRunningReason)
                    Task { await self.stop() }
                case let .event(.natDetected(behaviour, reflexive)):
                    // The adopted address stays when the verdict changes: named only with the
                    // behaviour that makes it where members reach us.
                    let address = behaviour == .endpointIndependent ? reflexive.map { ", public address \($0)" } : nil
                    configuration.announce?("nat: \(behaviour.rawValue)" + (address ?? ""))
                case let .event(.waitingForFirstMember(progress)):
                    configuration.announce?(JoinNotice.waiting(progress, invited: joinsThroughInvite))
                case .event(.inviteOutOfDate):
                    // A member that took part was left out while away, whatever it joined with
                    // (an invite given again at a restart included).
                    let invited =
                        core.joinProgress != nil && joinsThroughInvite && configuration.dataDirectory.tookPartInNothing
                    // The next invite may replace a session this dir took no part in.
                    if invited {
                        configuration.dataDirectory.markInviteOutOfDate()
                        inviteMarkMayStand = true
                    }
                    configuration.announce?(JoinNotice.outOfDate(invited: invited))
                case let .event(.joinedAfterWaiting(member, name, address, waited)):
                    viewChanged = true
                    configuration.announce?(
                        JoinNotice.joined(member: member, name: name, address: address, waited: waited))
                case let .event(.protocolGap(member, name, theirs, ours)):
                    // One line per member boot: told, else logged.
                    let line = ProtocolGapNotice.line(member: member, name: name, theirs: theirs, ours: ours)
                    if let announce = configuration.announce { announce(line) } else { logger.warning("\(line)") }
                case let .event(.log(record)):
                    // The core's records name members by what they call themselves: escaped, as
                    // every line a member's words reach a terminal by.
                    logger.log(
                        level: Logger.Level(rawValue: record.level.rawValue) ?? .error,
                        "\(TerminalText.escaped(record.message))",
                        metadata: Logger.Metadata(
                            record.metadata.map { ($0.key, .string(TerminalText.escaped($0.value))) },
                            uniquingKeysWith: { $1 }))
                }
            }
            drained.removeAll(keepingCapacity: true)
            // Let in at last (what was said of the invite was false, or the node was handed the
            // epoch): the dir took part, and no later invite replaces its session.
            if inviteMarkMayStand, core.phase == .running {
                inviteMarkMayStand = false
                configuration.dataDirectory.clearInviteOutOfDate()
            }
        } while core.drainEffects(into: &drained)
        if wrote { channel.flush() }
        if birthday.routesWritten { flushBirthdayRoutes() }
        stopIfLeft()
        if viewChanged, !viewSubscribers.isEmpty { viewSubscribers.yield(core.members) }
        if attachmentsChanged, !attachmentSubscribers.isEmpty { attachmentSubscribers.yield(attachmentList()) }
        if attachmentsChanged {
            let list = core.attachments.map { entry in
                (
                    entry: entry, complete: core.complete.contains(entry.content),
                    state: core.availability(of: entry).state
                )
            }
            publish(eventFeed.attachmentsChanged(list, now: Date()))
        }
    }

    /// Left without a command of ours (another member ended the session): stop once the
    /// departure is written.
    private func stopIfLeft() {
        guard core.phase == .leaving, !departing else { return }
        departing = true
        Task {
            if let lastWrite = self.lastWrite { try? await lastWrite.get() }
            await self.stop()
        }
    }

    /// Keeps exactly one timer armed, at the core's next deadline.
    func rearm() {
        guard let deadline = core.nextDeadlineInPlace() else {
            timer?.cancel()
            timer = nil
            timerDeadline = nil
            return
        }
        guard deadline != timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = eventLoop.scheduleTask(deadline: .uptimeNanoseconds(deadline.nanoseconds)) { [self] in
            assumeIsolated { $0.onTimer() }
        }
    }

    // MARK: lifecycle

    /// Leaves gracefully: once other members hold what only this node holds (unless not
    /// `waitingForReplication`), the departure goes out, and once the kernel has it everything
    /// closes. Nil when the node had stopped already.
    @discardableResult
    package func leave(waitingForReplication: Bool = true) async -> LeaveReport? {
        let report = await depart(waitingForReplication: waitingForReplication)
        if invalidation == nil { invalidation = .left }
        await stop()
        return report
    }

    /// The leave without the stop: the control socket answers in between.
    func depart(waitingForReplication: Bool) async -> LeaveReport? {
        guard !closed, core.phase.isActive, sessionState == .joined else { return nil }
        departing = true
        sendOutbox.refuse(.notRunning)
        let result = await perform(.leave(waitingForReplication: waitingForReplication))
        if case .success = result, invalidation == nil { invalidation = .left }
        if let lastWrite { try? await lastWrite.get() }
        guard case let .success(.left(report)) = result else { return nil }
        return report
    }

    /// Ends the session for every member (`groupmesh end`): they are told, then this node
    /// leaves and stops. Every member's session is invalidated with reason `ended`.
    package func end() async throws(GroupMeshError) {
        let result = await beginEnd()
        await stop()
        try result.get()
    }

    /// The end without the stop: the control socket answers in between.
    func beginEnd() async -> Result<Void, GroupMeshError> {
        guard !closed, core.phase.isActive, sessionState == .joined else { return .failure(.notRunning) }
        departing = true
        sendOutbox.refuse(.sessionEnded(by: "this member"))
        let result = await perform(.end)
        if let lastWrite { try? await lastWrite.get() }
        if case let .failure(error) = result, error != .stopped {
            return .failure(GroupMeshError(error, names: { core.displayName(of: $0) }))
        }
        return .success(())
    }

    static func displayName(_ name: String, _ id: NodeID) -> String {
        name.isEmpty ? String(id.hex.prefix(12)) : "\(name) (\(id.hex.prefix(12)))"
    }

    /// Closes the sockets without telling anyone (as a crash would, but cleanly). Storage already
    /// asked for is done first (an add in the log still completes).
    package func stop() async {
        guard !closed else { return }
        await stopTraversal()
        guard !closed else { return }
        closed = true
        sendOutbox.close(notRunningReason)
        setState(.invalidated(reason: invalidation ?? .stopped))
        core.stop(now: now)
        runEffects()
        if let portMapper { try? await portMapper.stop().get() }
        timer?.cancel()
        timer = nil
        metricsPublisher?.cancel()
        metricsPublisher = nil
        if sessionState != .waiting, metrics.isReporting { publishMetrics() }
        controlConnections?.stop()
        if let controlChannel { try? await controlChannel.close() }
        closeBirthdaySockets()
        // After the server socket: a `listen` that sees its end asks whether the node still runs.
        for listener in listeners + eventListeners { listener.close() }
        try? await channel.close()
        await lanBeacon?.close()
        lanBeacon = nil
        controlChannel = nil
        viewSubscribers.finishAll()
        messageInboxes.finishAll()
        attachmentSubscribers.finishAll()
        eventHandlers?.finish()
        await storage.finish()
        let waiting = stopWaiters
        stopWaiters = []
        for waiter in waiting { waiter.resume() }
    }

    package func waitUntilStopped() async {
        guard !closed else { return }
        await withCheckedContinuation { stopWaiters.append($0) }
    }

    var isClosed: Bool { closed }

    /// An address of ours learnt outside the session (a port mapping), or lost: our record and
    /// invites say so.
    func setExternalAddress(_ address: PeerAddress?, from source: AddressDiscovery.ExternalSource) {
        guard !closed else { return }
        core.setExternalAddress(address, from: source, now: now)
        runEffects()
    }
}

/// Who waits for a command's result: an `await`ing caller, or a callback (the completion-handler
/// API, which must not wait for one send before submitting the next).
enum RequestWaiter {
    case continuation(CheckedContinuation<Result<NodeResult, NodeError>, Never>)
    case callback(@Sendable (Result<NodeResult, NodeError>) -> Void)

    func complete(with result: Result<NodeResult, NodeError>) {
        switch self {
        case let .continuation(continuation): continuation.resume(returning: result)
        case let .callback(callback): callback(result)
        }
    }
}
