import MeshCrypto
import NIOCore

/// One whole GroupMesh node as a pure value: membership, the messenger, the journal, the swarm
/// and the key epochs, and every decision that routes between them. It reads no clock, opens
/// no socket or file, calls no global random source and starts no task. The NIO actor
/// `MeshNode` and the simulation's `SimNode` are two short drivers of this one core.
///
/// # The contract
///
/// **Inputs.** Every one takes `now`, the driver's monotonic clock; the core never asks for it.
/// - `start(seeds:now:)` once, after `init` (which takes what the data dir held: `Restored`).
/// - `handle(datagram:from:now:)` for each received UDP datagram (a GRO batch is split by the
///   driver first), then `endReadBatch(now:)` once the read batch is over: acknowledgements
///   for the whole batch go out then, once per peer.
/// - `tick(now:)` when `nextDeadline` has come (earlier is harmless).
/// - `handle(_:request:now:)` for a command, under a `RequestID` the driver chose.
/// - `storageCompleted(_:_:now:)` with the outcome of each `.storage` effect, ticket included.
/// - `setWritable(_:)` when the driver's send queue fills or drains: while it is full, chunk
///   wants are answered "busy" instead of queueing bursts that would arrive too late.
/// - `stop(now:)` after a leave's datagrams went out, or to stop without a word.
///
/// **Outputs.** Every input may append effects; the driver drains them all after each input
/// with `drainEffects(into:)` and carries them out in order (`NodeEffect`): datagrams to send,
/// storage requests (executed in order, each answered once), events, and completions of
/// commands. Then it arms one timer at `nextDeadline`. Reading state (`members`,
/// `attachments`, `status`…) is always allowed and changes nothing.
///
/// **Rules the driver keeps.** No decision of its own: what to send, store, or tell whom comes
/// from here. Storage is answered in request order. A deadline is never in the past after a
/// `tick` (the simulation checks it: a driver's timer would spin).
///
/// **Lifecycle.** `Phase`: `joining` until a member answers (at once when there was nobody to
/// join through), `running`, `leaving` once a leave's departure was sent, `stopped` after
/// `stop`. Once stopped, nothing is sent and every waiting command has completed.
package struct NodeInstance: Sendable {
    package enum Phase: Sendable, Equatable {
        case joining, running, leaving, stopped

        /// Takes datagrams, ticks and commands.
        package var isActive: Bool { self == .joining || self == .running }
    }

    /// Who this node is for this run.
    package struct Boot: Sendable {
        package var identity: NodeIdentity
        package var ephemeral: EphemeralKeyPair
        package var bootID: UInt64
        package var name: String
        /// Where members reach us (our record's addresses, at most `MemberRecord.maxAddresses`).
        package var addresses: [PeerAddress]
        /// The bound socket's own address, never joined through.
        package var localAddress: PeerAddress?

        package init(
            identity: NodeIdentity, ephemeral: EphemeralKeyPair, bootID: UInt64, name: String,
            addresses: [PeerAddress], localAddress: PeerAddress? = nil
        ) {
            self.identity = identity
            self.ephemeral = ephemeral
            self.bootID = bootID
            self.name = name
            self.addresses = addresses
            self.localAddress = localAddress
        }
    }

    /// What the data dir held at start.
    package struct Restored: Sendable {
        package var epochs: KeyEpochs
        package var remembered = RememberedMembers()
        /// The journal log's operations.
        package var operations: [JournalOperation] = []
        /// The stored manifests of the attachments in the journal.
        package var manifests: [Manifest] = []
        /// Those whose every chunk is stored.
        package var complete: Set<SHA256Digest> = []
        /// How many chunks are stored of the others.
        package var held: [SHA256Digest: Int] = [:]
        /// The journal log was read whole (it exists, and every record decoded): only then does
        /// start-up delete the chunks no attachment in it uses. A log that could not be read
        /// would make every chunk look unused.
        package var logIsWhole = false

        package init(
            epochs: KeyEpochs, remembered: RememberedMembers = .init(), operations: [JournalOperation] = [],
            manifests: [Manifest] = [], complete: Set<SHA256Digest> = []
        ) {
            self.epochs = epochs
            self.remembered = remembered
            self.operations = operations
            self.manifests = manifests
            self.complete = complete
        }
    }

    package let settings: NodeSettings
    package let identity: NodeIdentity
    package let bootID: UInt64
    let authority: Ed25519Authority
    let ephemeral: EphemeralKeyPair
    let localAddress: PeerAddress?
    /// Nonces of hello datagrams and handovers, new secrets: a secure source in the shell, a
    /// seeded one in the simulation.
    var random: any RandomNumberGenerator & Sendable
    package internal(set) var phase = Phase.joining

    // Sub-machines, mutated in place: copying one out and back per datagram would copy its tables.
    package internal(set) var membership: MembershipInstance
    package internal(set) var delivery: DeliveryInstance
    package internal(set) var journal: JournalInstance
    package internal(set) var transfer: TransferScheduler
    /// The serving side's initial seeding: which wants for chunks we added are left to others.
    package internal(set) var seeding: SeedingPolicy
    package internal(set) var assembler: ChunkAssembler

    // Keys (NodeInstance+Epochs).
    package internal(set) var epochs: KeyEpochs
    package internal(set) var codec: DatagramCodec
    /// Codecs of the earlier epochs, by session id: for members that have not caught up.
    var earlierCodecs: [SessionID: DatagramCodec] = [:]
    var epochBeaconAt: MeshInstant?
    var epochBeaconsLeft = 0
    /// The members the rotations removed, where they were reached (and through whom, when
    /// relayed): told with the beacons.
    var removedToTell: [(member: NodeID, address: PeerAddress, relay: NodeID?)] = []
    var pendingRemoval: RequestID?
    /// A leave waiting until others hold what only this node holds (NodeInstance+Leave).
    var handover: LeaveHandover?
    /// The session is being ended (NodeInstance+End).
    var ending: SessionEnding?
    /// A key epoch without this node was seen (told once).
    var removedFromSession = false
    /// Handovers that came while our own removal was being stored: taken once it is committed,
    /// so that ours and a competing one meet as two rotations out of one epoch.
    var deferredHandovers: [(handover: EpochHandover, header: DatagramHeader, address: PeerAddress)] = []

    // Members (NodeInstance+Membership).
    /// Where each live member is reached: looking it up in the membership per datagram sent
    /// would cost a copy of the member.
    var peerAddresses: [NodeID: PeerAddress] = [:]
    package internal(set) var remembered: RememberedMembers
    var rememberedDirty = false
    /// While joining through seeds, until a member answers (NodeInstance+Joining).
    var joinWait: JoinWait?

    // Messenger (NodeInstance+Messenger): application sends waiting for their acknowledgements.
    var pendingSends: [UInt64: (request: RequestID, recipients: Int, reliable: Bool)] = [:]
    /// `ping` commands waiting for their `pong`, by token (NodeInstance+Ping).
    var pendingPings: [UInt64: (request: RequestID, member: NodeID, address: PeerAddress, sentAt: MeshInstant)] = [:]

    // Journal and attachments (NodeInstance+Journal, +Fetch).
    package internal(set) var manifestTable = ManifestTable()
    /// The manifests this node knows, by attachment id.
    package var manifests: [SHA256Digest: Manifest] { manifestTable.byID }
    /// Where each known chunk sits (one place is enough for the seeding rule).
    var chunkLocations: [SHA256Digest: ChunkRef] { manifestTable.locations }
    /// Attachments whose every chunk is stored (and durable).
    package internal(set) var complete: Set<SHA256Digest>
    package internal(set) var fetches: [SHA256Digest: Fetch] = [:]
    /// Chunks held of attachments neither whole nor fetching, as the store last said.
    var knownHeld: [SHA256Digest: Int] = [:]
    /// Loads sent back to a fetch because the attachment was found damaged, and how often.
    var exportRetries: [RequestID: Int] = [:]
    /// Loads waiting for their attachment's fetch.
    var loadWaiters: [SHA256Digest: [(request: RequestID, destination: ExportDestination)]] = [:]
    /// Chunk requests in flight, by digest: which chunks of which attachments they are for.
    var requested: [SHA256Digest: [ChunkRef]] = [:]
    var dirtyBitmaps: Set<SHA256Digest> = []
    var nextAvailabilityAt = MeshInstant.zero
    var replicationPausedUntil: MeshInstant?
    /// Fetches that failed, and when replication tries each again (the wait doubles per failure).
    var fetchRetries: [SHA256Digest: (failures: Int, at: MeshInstant)] = [:]
    /// Operations of others applied but not yet in the journal log (their append failed).
    var journalBacklog: [JournalOperation] = []
    var journalBacklogRetryAt: MeshInstant?
    /// Whether `start` has the store delete what no attachment uses (`Restored.logIsWhole`).
    var collectsAtStart = false

    // Serving chunks to others (NodeInstance+Serve).
    /// Chunk reads under way for other members, until their pieces are written.
    var serving: Set<ServeBudget.Key> = []
    /// Of those, the ones whose asker cancelled them meanwhile (`ChunkCancel`): nothing is sent.
    var cancelledServes: Set<ServeBudget.Key> = []
    /// Bytes of each chunk sent to each member lately: past two copies a second, a chunk kept in
    /// memory is read again for that member instead.
    var serveBudget = ServeBudget()
    /// Chunks just served, for re-asks of their lost pieces.
    var recentChunks: RecentChunks
    var writable = true
    /// Pieces owed to members, leaving at the rates they asked for.
    package internal(set) var pacer = PiecePacer()

    // Receiving chunks (NodeInstance+Pacing).
    package internal(set) var downlink: DownlinkController
    /// What fetches reached over their holders' paths, for careful resume (NodeInstance+Resume).
    package internal(set) var savedPaths = SavedPathCapacities()
    /// Members that sent this node a chunk that verified: only their pieces and datagram numbers
    /// feed the controller.
    var provenHolders: Set<NodeID> = []
    /// The pace each holder was last told, when, and whether it shows.
    var toldRates: [NodeID: ToldPace] = [:]
    /// How large a datagram each holder's path to us carries (NodeInstance+PathMTU).
    package internal(set) var pathMTU: PathMTUDiscovery
    /// Probes answered per member in the current second.
    var probeAnswers: [NodeID: (count: Int, since: MeshInstant)] = [:]
    /// Where members see us, and our candidate addresses (NodeInstance+Addresses).
    package internal(set) var addressDiscovery: AddressDiscovery
    /// Where we told each member its datagrams come from.
    var addressEchoes: AddressEchoes
    /// The NAT behaviour last reported (logged and told to the driver when it changes).
    var reportedNAT = NATBehaviour.unknown
    /// Where each member is reached, as its own datagrams proved, and hole punching (NodeInstance+Paths).
    package internal(set) var paths: MemberPaths
    var pathCheckAt = MeshInstant.zero
    /// Birthday rounds with members behind a symmetric NAT (NodeInstance+Birthday).
    package internal(set) var birthday: BirthdayPunching
    /// What each member speaks (NodeInstance+Versions).
    package internal(set) var versions: PeerVersions
    var birthdayCheckAt = MeshInstant.zero
    /// What this node carries for others (NodeInstance+Relay).
    package internal(set) var relayService: RelayService
    /// When we announce ourselves on the LAN, and whom we met there (NodeInstance+LAN).
    var lanDiscovery: LANDiscovery

    package internal(set) var counters = NodeCounters()
    var effects: [NodeEffect] = []

    package init(
        boot: Boot, restored: Restored, settings: NodeSettings,
        random: some RandomNumberGenerator & Sendable, now: MeshInstant
    ) {
        var random: any RandomNumberGenerator & Sendable = random
        self.settings = settings
        identity = boot.identity
        bootID = boot.bootID
        authority = Ed25519Authority(identity: boot.identity)
        ephemeral = boot.ephemeral
        localAddress = boot.localAddress
        epochs = restored.epochs
        remembered = restored.remembered
        codec = DatagramCodec(
            session: restored.epochs.current, localID: boot.identity.nodeID,
            localBootID: boot.bootID, configuration: settings.wire)
        for secret in restored.epochs.previousSecrets {
            earlierCodecs[secret.sessionID] = DatagramCodec(
                session: secret, localID: boot.identity.nodeID,
                localBootID: boot.bootID, configuration: settings.wire)
        }
        let record = MemberRecord(
            signingKey: boot.identity.publicKey, name: boot.name,
            addresses: Array(boot.addresses.prefix(MemberRecord.maxAddresses)),
            incarnation: restored.remembered.incarnation + 1, bootID: boot.bootID,
            ephemeralKey: boot.ephemeral.publicKey, relays: settings.relay.enabled)
        membership = MembershipInstance(
            record: record, authority: authority, settings: settings.membership,
            datagramBudget: codec.maxHelloPayload, seed: random.next(), now: now)
        var deliverySettings = DeliveryInstance.Settings()
        deliverySettings.datagramBudget = codec.maxPairwisePayload
        deliverySettings.maxMessageSize = settings.maxMessageSize + 1 + MessageEnvelope.maxTagBytes
        delivery = DeliveryInstance(settings: deliverySettings)
        journal = JournalInstance(
            authority: authority, syncInterval: settings.journalSyncInterval,
            seed: random.next(), now: now)
        journal.restore(restored.operations)
        transfer = TransferScheduler(settings: settings.transfer, seed: random.next())
        seeding = SeedingPolicy(settings: settings.seeding)
        assembler = ChunkAssembler(settings: .init(pieceSize: codec.maxPairwisePayload - ChunkPiece.overhead))
        recentChunks = RecentChunks(capacity: settings.recentChunkCapacity)
        downlink = DownlinkController(settings: settings.downlink)
        // A path falls back to what every datagram we send unasked fits in.
        var pathSettings = settings.pathMTU
        pathSettings.base = settings.wire.maxDatagramSize
        pathMTU = PathMTUDiscovery(settings: pathSettings)
        addressDiscovery = AddressDiscovery(
            local: boot.addresses + (boot.localAddress.map { [$0] } ?? []),
            settings: settings.addressDiscovery)
        addressEchoes = AddressEchoes(settings: settings.addressEchoes)
        paths = MemberPaths(settings: settings.paths)
        birthday = BirthdayPunching(settings: settings.birthday)
        versions = PeerVersions(settings: settings.versions, ours: settings.spokenVersions)
        relayService = RelayService(settings: settings.relay)
        lanDiscovery = LANDiscovery(settings: settings.lanDiscovery, now: now)
        self.random = random
        // Only what the journal holds now: a manifest left over from a removed attachment is not ours.
        let state = journal.state
        let present = restored.manifests.filter { state.hasContent($0.id) }
        complete = restored.complete.intersection(present.map(\.id))
        knownHeld = restored.held
        manifestTable = ManifestTable(present)
        collectsAtStart = restored.logIsWhole
    }

    package var localID: NodeID { identity.nodeID }
    /// The current key epoch's secret.
    package var session: SessionSecret { epochs.current }

    // MARK: inputs

    /// Joins through `seeds` (an invite's addresses, `--join`; without any, those kept from an
    /// earlier start that met nobody) and the members remembered from the last run, and
    /// resumes replication.
    package mutating func start(seeds given: [PeerAddress], now: MeshInstant) {
        // First of all requests: nothing is being ingested or fetched yet.
        if collectsAtStart {
            store(
                .collectUnreferenced(keeping: journal.state.presentContents.compactMap { manifests[$0] }),
                .startupCollection)
        }
        let own = Set(membership.me.addresses + (localAddress.map { [$0] } ?? []))
        let seeds = rememberSeeds(given)
        let all = Set(seeds + remembered.addresses).subtracting(own).sorted()
        let excluded = membership.exclude(epochs.removed, now: now)
        apply(excluded, now: now)
        let joining = membership.join(all, now: now)
        apply(joining, now: now)
        phase = all.isEmpty ? .running : .joining
        if phase == .joining { joinWait = JoinWait(since: now, noticeAt: now + settings.joinWaitingNotice) }
        remembered.incarnation = membership.me.incarnation
        saveRemembered()
        announceHoldings(now: now)
        replicate(now: now)
        log(.info, "started", ["node": "\(localID)", "seeds": "\(all.count)"])
    }

    /// One received datagram.
    /// True when the datagram opened under a key of the current epoch: it is a member's, sent
    /// from `address` (or through the route the driver took it from).
    @discardableResult
    package mutating func handle(datagram: ByteBuffer, from address: PeerAddress, now: MeshInstant) -> Bool {
        guard phase.isActive else { return false }
        counters.datagramsReceived += 1
        counters.bytesReceived += UInt64(datagram.readableBytes)
        switch codec.open(datagram) {
        case .failure(.foreign):
            receiveEarlierEpoch(datagram, from: address, now: now)
            return false
        case let .failure(reason):
            counters.countDrop(reason)
            if logs(.trace) { log(.trace, "dropped datagram", ["reason": reason.rawValue, "from": "\(address)"]) }
            return false
        case let .success(opened):
            if ending != nil { answerWithEnd(opened, size: datagram.readableBytes, from: address, now: now) }
            route(opened, size: datagram.readableBytes, from: address, now: now)
            if joinWait != nil, phase == .running {
                endJoinWait(sender: opened.header.sender, address: address, now: now)
            }
            return true
        }
    }

    /// Hello datagrams are membership's (a member is probed before its keys are known) and
    /// carry handovers; a member's messenger or transfer frame in one is ignored. Pairwise ones
    /// are the messenger's and the swarm's, except those that carry a probe or its ack (the first
    /// probe of each round, with gossip beside it): those are membership's, every membership frame
    /// in them (only the member meant can open them, and only the sender can have sealed them).
    /// Membership frames in any other pairwise datagram are nobody's.
    /// A datagram that came through a relay (`via`) is routed the same, but proves no address
    /// and carries no relay frames of its own.
    mutating func route(
        _ datagram: OpenedDatagram, size bytes: Int, from address: PeerAddress, via relay: NodeID? = nil,
        now: MeshInstant
    ) {
        let sender = datagram.header.sender
        switch datagram.header.keyKind {
        case .hello:
            counters.received.count(TrafficKind(hello: datagram.frames), bytes: bytes)
            // A handover comes alone, from a member that may not be in our view yet: it is not
            // taken as an answer to our join.
            if case .epochHandover = datagram.frames.first {
                for case let .epochHandover(handover) in datagram.frames {
                    receiveHandover(handover, header: datagram.header, from: address, now: now)
                }
                return
            }
            if case let .removalNotice(rotation) = datagram.frames.first {
                return receiveRemovalNotice(rotation, from: sender, address: address, now: now)
            }
            if case let .sessionEnd(statement) = datagram.frames.first {
                return receiveEnd(statement, from: sender, now: now)
            }
            // A hello's source is only its claim: what answers it stays within three times its
            // size, so a forged source earns its owner no flood (QUIC's rule). The state transfer
            // takes two of them; a new member's first echoes and punches fit in the third.
            let answerLimit =
                Self.stateAnswerFactor * bytes - DatagramCodec.pairwiseDatagramSize(payload: 0)
                - PacketSealer.nonceByteCount
            let directives = membership.onFrames(
                datagram.frames, from: sender, address: address, now: now,
                answerLimit: answerLimit)
            apply(directives, now: now)
            if relay == nil { helloFrom(sender, boot: datagram.header.bootID, source: address, now: now) }
        case .pairwise:
            counters.received.count(TrafficKind(pairwise: datagram.frames), bytes: bytes)
            // Alone in its datagram (PROTOCOL.md §3, "Protocol versions"); otherwise a datagram like
            // any: it proves the path and counts in the packet numbers the downlink reads losses from.
            if case let .protocolVersion(announcement) = datagram.frames.first {
                guard settings.knowsVersionFrames else { return counters.countDrop(.malformed) }
                receiveVersion(announcement, header: datagram.header)
            }
            if provenHolders.contains(sender) {
                downlink.onDatagram(
                    from: sender, packetNumber: datagram.header.packetNumber,
                    carriesPiece: datagram.frames.contains { if case .chunkPiece = $0 { true } else { false } })
            }
            if datagram.frames.contains(where: \.isProbeOrAck) {
                let directives = membership.onFrames(
                    datagram.frames, from: sender, address: address, now: now,
                    pairwise: true)
                apply(directives, now: now)
            } else {
                membership.heard(from: sender, now: now)
            }
            let directives = delivery.onFrames(datagram.frames, from: sender, now: now, deferAcks: true)
            apply(directives, now: now)
            receiveTransfer(datagram.frames, from: sender, datagramSize: bytes, now: now)
            receivePings(datagram.frames, from: sender, now: now)
            if let relay {
                receivePathsThroughRelay(datagram.frames, header: datagram.header, via: relay, now: now)
            } else {
                receivePaths(datagram.frames, header: datagram.header, source: address, now: now)
                receiveRelay(datagram.frames, from: sender, now: now)
            }
        }
    }

    /// How many times a hello's own size a state transfer may take to answer it.
    static let stateAnswerFactor = 2

    /// The end of a read batch: acknowledge what it brought, once per peer.
    package mutating func endReadBatch(now: MeshInstant) {
        guard phase.isActive else { return }
        let acks = delivery.flushAcks(now: now)
        apply(acks, now: now)
    }

    /// Timers: probes, retransmissions, anti-entropy, fetch and transfer deadlines, beacons.
    package mutating func tick(now: MeshInstant) {
        guard phase.isActive else { return }
        let membershipTick = membership.onTick(now: now)
        apply(membershipTick, now: now)
        let deliveryTick = delivery.onTick(now: now)
        apply(deliveryTick, now: now)
        let journalTick = journal.onTick(now: now)
        apply(journalTick, now: now)
        fetchTick(now: now)
        releasePieces(now: now)
        sendEpochBeacons(now: now)
        retryJournalBacklog(now: now)
        advanceHandover(now: now)
        endingTick(now: now)
        pingTick(now: now)
        pathsTick(now: now)
        birthdayTick(now: now)
        versionsTick(now: now)
        lanTick(now: now)
        joinTick(now: now)
        // The relay's budget measures our links by our own transfers, relaying or not.
        relayService.observe(ownTransfers, now: now)
        if rememberedDirty { saveRemembered() }
    }

    /// When `tick` must run next. Only deadlines `tick` acts on: one it leaves in the past would
    /// make a driver's timer fire without pause.
    package var nextDeadline: MeshInstant? {
        guard phase.isActive else { return nil }
        var deadline = membership.nextDeadline
        func consider(_ instant: MeshInstant?) {
            if let instant { deadline = min(deadline, instant) }
        }
        consider(delivery.nextDeadline)
        consider(journal.nextDeadline)
        consider(fetchDeadline)
        consider(pacer.nextDeadline)
        consider(epochBeaconAt)
        consider(journalBacklogRetryAt)
        consider(handoverDeadline)
        consider(ending?.until)
        consider(pingDeadline)
        consider(pathsDeadline)
        consider(birthday.nextDeadline)
        consider(versions.nextDeadline)
        consider(lanDeadline)
        consider(joinNoticeDeadline)
        return deadline
    }

    /// `nextDeadline`, read in place. A driver keeps its instance in a class, and a getter too
    /// large to inline, called on a class's stored struct, is handed a copy of the whole struct (a
    /// retain and a release of every field), which a holder pacing a fetch, re-arming its timer
    /// after every release, pays over and over. A mutating call works on it where it lies.
    package mutating func nextDeadlineInPlace() -> MeshInstant? { nextDeadline }

    /// The driver's send queue filled (false) or drained (true).
    package mutating func setWritable(_ writable: Bool) {
        self.writable = writable
    }

    /// A command from the user or the application.
    package mutating func handle(_ command: NodeCommand, request: RequestID, now: MeshInstant) {
        guard phase.isActive else { return complete(request, .failure(.stopped)) }
        if let ending {
            if case .end = command { self.ending?.requests.append(request); return }
            return complete(request, .failure(.sessionEnded(by: ending.statement.author)))
        }
        switch command {
        case let .send(envelope, targets, mode, timeout):
            send(envelope, to: targets, mode: mode, timeout: timeout, request: request, now: now)
        case let .add(source, metadata):
            beginAdd(source, metadata: metadata, request: request)
        case let .remove(id):
            beginRemove(id, request: request)
        case let .load(id, destination):
            load(id, into: destination, request: request, now: now)
        case let .removeMember(id):
            beginRemoval(of: id, request: request, now: now)
        case let .leave(waitingForReplication):
            leave(waitingForReplication: waitingForReplication, request: request, now: now)
        case .end:
            end(request: request, now: now)
        case let .ping(member):
            ping(member, request: request, now: now)
        }
    }

    /// The store finished a request.
    package mutating func storageCompleted(
        _ ticket: StorageTicket, _ result: Result<StorageOutcome, StorageFailure>,
        now: MeshInstant
    ) {
        switch ticket.purpose {
        case let .ingest(request, metadata):
            ingested(result, metadata: metadata, request: request)
        case let .appendLocal(request, operation, change):
            localAppended(result, operation: operation, change: change, request: request, now: now)
        case let .appendRemote(operations):
            remoteAppended(result, operations: operations, now: now)
        case let .serveChunk(want, peer):
            chunkReadForServing(result, want: want, to: peer, now: now)
        case let .serveManifest(digest, peer):
            manifestReadForServing(result, digest: digest, to: peer, now: now)
        case let .storeChunk(digest, refs, peer, contributors):
            chunkStored(result, digest: digest, refs: refs, from: peer, contributors: contributors, now: now)
        case let .storeManifest(manifest):
            manifestStored(result, manifest, now: now)
        case let .inspect(id):
            inspected(result, id: id, now: now)
        case let .completeFetch(id):
            fetchFlushed(result, id: id, now: now)
        case let .export(request, manifest, destination):
            exported(result, manifest: manifest, request: request, destination: destination, now: now)
        case let .saveRemoval(request, transition):
            removalSaved(result, transition: transition, request: request, now: now)
        case .saveEpochs:
            if case let .failure(failure) = result {
                // Kept in memory: after a restart this node catches up through any member.
                log(.error, "cannot store the new key epoch", ["error": "\(failure)"])
            }
        case .saveMembers:
            if case let .failure(failure) = result { log(.warning, "cannot save members", ["error": "\(failure)"]) }
        case .saveEnded:
            if case let .failure(failure) = result {
                log(.error, "cannot record that the session ended", ["error": "\(failure)"])
            }
        case .startupCollection:
            switch result {
            case let .success(.collected(chunks, bytes)) where chunks > 0:
                log(
                    .notice, "collected chunks no attachment uses (left by a crash)",
                    ["chunks": "\(chunks)", "bytes": "\(bytes)"])
            case let .failure(failure):
                log(.warning, "cannot collect unused chunks", ["error": "\(failure)"])
            default:
                break
            }
        case .housekeeping:
            if case let .failure(failure) = result { log(.warning, "storage", ["error": "\(failure)"]) }
        }
    }

    /// Stops: nothing more is sent or taken, and every waiting command completes (`stopped`).
    /// Storage outcomes still arriving are taken (an add already in the log completes).
    package mutating func stop(now: MeshInstant) {
        guard phase != .stopped else { return }
        phase = .stopped
        saveRemembered()
        for (_, pending) in pendingSends.sorted(by: { $0.key < $1.key }) {
            complete(pending.request, .failure(.stopped))
        }
        pendingSends = [:]
        for (_, waiters) in loadWaiters.sorted(by: { $0.key < $1.key }) {
            for waiter in waiters { failLoad(waiter, .stopped) }
        }
        loadWaiters = [:]
        fetches = [:]
        if let pendingRemoval { complete(pendingRemoval, .failure(.stopped)) }
        pendingRemoval = nil
        for request in handover?.requests ?? [] { complete(request, .failure(.stopped)) }
        handover = nil
        for request in ending?.requests ?? [] { complete(request, .failure(.stopped)) }
        for (_, pending) in pendingPings.sorted(by: { $0.key < $1.key }) {
            complete(pending.request, .failure(.stopped))
        }
        pendingPings = [:]
        ending = nil
    }

    /// Hands every effect made since the last call to the driver, oldest first. `buffer` should
    /// be empty; the two arrays swap, so neither is reallocated in steady state.
    package mutating func drainEffects(into buffer: inout [NodeEffect]) {
        swap(&effects, &buffer)
    }

    package var hasEffects: Bool { !effects.isEmpty }

    // MARK: effects

    mutating func complete(_ request: RequestID, _ result: Result<NodeResult, NodeError>) {
        effects.append(.complete(request, result))
    }

    mutating func store(_ request: StorageRequest, _ purpose: StoragePurpose) {
        effects.append(.storage(request, StorageTicket(purpose: purpose)))
    }

    mutating func emit(_ event: NodeEvent) {
        effects.append(.event(event))
    }

    mutating func transmit(_ datagram: ByteBuffer, to address: PeerAddress, kind: TrafficKind, hops: UInt8? = nil) {
        guard phase != .stopped else { return }
        counters.datagramsSent += 1
        counters.bytesSent += UInt64(datagram.readableBytes)
        counters.sent.count(kind, bytes: datagram.readableBytes)
        if let hops {
            effects.append(.sendShortLived(datagram, to: address, hops: hops))
        } else {
            effects.append(.send(datagram, to: address))
        }
    }

    mutating func transmit(segments batch: ByteBuffer, segmentSize: Int, count: Int, to address: PeerAddress) {
        guard phase != .stopped else { return }
        counters.datagramsSent += UInt64(count)
        counters.bytesSent += UInt64(batch.readableBytes)
        counters.sent.count(.transfer, datagrams: count, bytes: batch.readableBytes)
        effects.append(.sendSegments(batch, segmentSize: segmentSize, count: count, to: address))
    }

    /// Frames for one member under our pairwise key, to where we reach it (through its relay, while
    /// it is relayed), or to `address` exactly.
    mutating func sendPairwise(_ frames: [Frame], to peer: NodeID, address: PeerAddress? = nil) {
        guard mayCarry(frames, to: peer) else { return }
        if address == nil, let relay = paths.relay(of: peer) {
            guard let datagram = codec.seal(frames, to: peer) else { return }
            return sendThroughRelay(datagram, to: peer, via: relay, kind: TrafficKind(pairwise: frames))
        }
        guard let address = address ?? peerAddresses[peer], let datagram = codec.seal(frames, to: peer) else { return }
        transmit(datagram, to: address, kind: TrafficKind(pairwise: frames))
    }

    /// A datagram of `frames` under our pairwise key for `peer`, with the next packet number,
    /// for a test to send as it likes (a hostile member's frames).
    package mutating func sealPairwise(_ frames: [Frame], to peer: NodeID) -> ByteBuffer? {
        codec.seal(frames, to: peer)
    }

    /// Frames for anyone holding the session's hello key, meant for `recipient` when it is named
    /// (through its relay, while it is relayed and `address` is where it is known).
    mutating func sendHello(_ frames: [Frame], to address: PeerAddress, recipient: NodeID? = nil) {
        let datagram = codec.sealHello(frames, nonce: randomNonce())
        if let recipient, let relay = relay(for: recipient, meaning: address) {
            return sendThroughRelay(datagram, to: recipient, via: relay, kind: TrafficKind(hello: frames))
        }
        transmit(datagram, to: address, kind: TrafficKind(hello: frames))
    }

    mutating func randomNonce() -> PacketNonce {
        let bytes = [random.next(), random.next(), random.next()].flatMap { word in
            withUnsafeBytes(of: word) { Array($0) }
        }
        return PacketNonce(raw: bytes)!  // safe: three words are exactly the 24 bytes of a nonce
    }

    mutating func randomSecret() -> SessionSecret {
        let bytes = (0..<4).map { _ in random.next() }.flatMap { word in withUnsafeBytes(of: word) { Array($0) } }
        return try! SessionSecret(bytes: bytes)  // safe: four words are exactly the 32 bytes of a secret
    }

    /// A log record, made only at or above the settings' level. Where a record would be built
    /// per datagram, the caller asks `logs(_:)` first.
    mutating func log(_ level: NodeLogLevel, _ message: String, _ metadata: KeyValuePairs<String, String> = [:]) {
        guard logs(level) else { return }
        emit(.log(NodeLogRecord(level: level, message: message, metadata: metadata.map { ($0.key, $0.value) })))
    }

    func logs(_ level: NodeLogLevel) -> Bool { level >= settings.logLevel }

}
