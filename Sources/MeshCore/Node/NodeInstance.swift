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
        /// The wall clock when the instance is made (Unix seconds), if the driver tells it: how
        /// long ago members were lost is kept across restarts by it (`members.json`).
        package var unixTime: UInt64?

        package init(
            identity: NodeIdentity, ephemeral: EphemeralKeyPair, bootID: UInt64, name: String,
            addresses: [PeerAddress], localAddress: PeerAddress? = nil, unixTime: UInt64? = nil
        ) {
            self.identity = identity
            self.ephemeral = ephemeral
            self.bootID = bootID
            self.name = name
            self.addresses = addresses
            self.localAddress = localAddress
            self.unixTime = unixTime
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
        /// Attachments whose manifest was found damaged (stored, but it did not verify, and was
        /// discarded), now or at an earlier start, and is not stored again yet: which chunks are
        /// theirs is unknown until each is fetched again, so start-up deletes no chunk.
        package var damagedManifests: [SHA256Digest] = []
        /// Those of them the data dir had recorded; nil when the record could not be read (then
        /// nothing is known of earlier damage, and start-up deletes no chunk either).
        package var damagedManifestsRecorded: [SHA256Digest]? = []
        /// This data dir made the session's secret: the node founded the session, so it asks
        /// nobody for an introduction (kept apart from `remembered`, which a damaged file resets).
        package var founded = false
        /// The nonce this dir's founding drew (PROTOCOL.md §3, "Founding"); nil for a session
        /// founded by a release without it, and for one joined.
        package var foundingNonce: [UInt8]?

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
    /// Who this node is for this run.
    let boot: Boot
    /// Nonces of hello datagrams and handovers, new secrets: a secure source in the shell, a
    /// seeded one in the simulation.
    var random: any RandomNumberGenerator & Sendable
    package internal(set) var phase = Phase.joining

    // Sub-machines, mutated in place: copying one out and back per datagram would copy its tables.
    package internal(set) var membership: MembershipInstance
    package internal(set) var delivery: DeliveryInstance
    package internal(set) var journal: JournalInstance
    package internal(set) var transfer: TransferScheduler
    /// What each member speaks (NodeInstance+Versions).
    package internal(set) var versions: PeerVersions
    /// What this node carries for others (NodeInstance+Relay).
    package internal(set) var relayService: RelayService

    // The node's own state, one part per concern (NodeParts).
    var keying: KeyState
    var closing = Closing()
    var directory: MemberDirectory
    var waits = CommandWaits()
    var library = AttachmentLibrary()
    var fetchTable = FetchTable()
    var serving: ServingState
    var receiving: ReceivingState
    var reachability: Reachability
    var links: LinkState

    package internal(set) var counters = NodeCounters()
    var effects: [NodeEffect] = []

    package init(
        boot: Boot, restored: Restored, settings: NodeSettings,
        random: some RandomNumberGenerator & Sendable, now: MeshInstant
    ) {
        var random: any RandomNumberGenerator & Sendable = random
        self.settings = settings
        self.boot = boot
        let codec = DatagramCodec(
            session: restored.epochs.current, localID: boot.identity.nodeID,
            localBootID: boot.bootID, configuration: settings.wire)
        keying = KeyState(epochs: restored.epochs, codec: codec)
        keying.storedRivals = restored.epochs.encodedRivals()
        for secret in restored.epochs.earlierSecrets {
            keying.earlierCodecs[secret.sessionID] = DatagramCodec(
                session: secret, localID: boot.identity.nodeID,
                localBootID: boot.bootID, configuration: settings.wire)
        }
        directory = MemberDirectory(
            remembered: restored.remembered,
            introductions: IntroductionBook(
                settings: settings.introductions, remembered: restored.remembered.introductions))
        if restored.founded { directory.remembered.founder = true }
        directory.founding = Self.founding(restored, localID: boot.identity.nodeID)
        if let unixTime = boot.unixTime, unixTime >= Self.earliestPlausibleUnixTime {
            directory.wallClock = (now, unixTime)
        }
        let record = MemberRecord(
            signingKey: boot.identity.publicKey, name: boot.name,
            addresses: Array(boot.addresses.prefix(MemberRecord.maxAddresses)),
            incarnation: restored.remembered.incarnation + 1, bootID: boot.bootID,
            ephemeralKey: boot.ephemeral.publicKey, relays: settings.relay.enabled)
        let authority = Ed25519Authority(identity: boot.identity)
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
        serving = ServingState(
            recentChunks: RecentChunks(capacity: settings.recentChunkCapacity),
            seeding: SeedingPolicy(settings: settings.seeding))
        receiving = ReceivingState(
            downlink: DownlinkController(settings: settings.downlink),
            assembler: ChunkAssembler(settings: .init(pieceSize: codec.maxPairwisePayload - ChunkPiece.overhead)))
        // A path falls back to what every datagram we send unasked fits in.
        var pathSettings = settings.pathMTU
        pathSettings.base = settings.wire.maxDatagramSize
        links = LinkState(
            paths: MemberPaths(settings: settings.paths), birthday: BirthdayPunching(settings: settings.birthday),
            pathMTU: PathMTUDiscovery(settings: pathSettings))
        reachability = Reachability(
            discovery: AddressDiscovery(
                local: boot.addresses + (boot.localAddress.map { [$0] } ?? []),
                settings: settings.addressDiscovery),
            echoes: AddressEchoes(settings: settings.addressEchoes),
            lan: LANDiscovery(settings: settings.lanDiscovery, now: now))
        versions = PeerVersions(settings: settings.versions, ours: settings.spokenVersions)
        relayService = RelayService(settings: settings.relay)
        self.random = random
        // Only what the journal holds now: a manifest left over from a removed attachment is not ours.
        let state = journal.state
        let present = restored.manifests.filter { state.hasContent($0.id) }
        library.complete = restored.complete.intersection(present.map(\.id))
        library.knownHeld = restored.held
        library.manifestTable = ManifestTable(present)
        // Only a log read whole says which attachments are gone (their damage is forgotten).
        let damaged = Set(restored.damagedManifests)
        library.damagedManifests = restored.logIsWhole ? damaged.filter { state.hasContent($0) } : damaged
        library.damagedManifestsSaved = restored.damagedManifestsRecorded.map(Set.init)
        library.collectsAtStart =
            restored.logIsWhole && library.damagedManifests.isEmpty && restored.damagedManifestsRecorded != nil
    }

    package var identity: NodeIdentity { boot.identity }
    package var bootID: UInt64 { boot.bootID }
    var ephemeral: EphemeralKeyPair { boot.ephemeral }
    var localAddress: PeerAddress? { boot.localAddress }
    var authority: Ed25519Authority { Ed25519Authority(identity: boot.identity) }

    // Read by the drivers, status and tests; the core works on the parts in place.
    package var epochs: KeyEpochs { keying.epochs }
    package var codec: DatagramCodec { keying.codec }
    /// The earlier epochs (and those that lost) whose datagrams this node still opens.
    package var earlierEpochsOpen: Int { keying.earlierCodecs.count }
    package var remembered: RememberedMembers { directory.remembered }
    /// Who let each member in, and our own request for an introduction.
    package var introductions: IntroductionBook { directory.introductions }
    /// The manifests this node knows, by attachment id.
    package var manifests: [SHA256Digest: Manifest] { library.manifestTable.byID }
    /// Where each known chunk sits (one place is enough for the seeding rule).
    var chunkLocations: [SHA256Digest: ChunkRef] { library.manifestTable.locations }
    /// Attachments whose every chunk is stored (and durable).
    package var complete: Set<SHA256Digest> { library.complete }
    package var fetches: [SHA256Digest: Fetch] { fetchTable.fetches }
    package var seeding: SeedingPolicy { serving.seeding }
    package var pacer: PiecePacer { serving.pacer }
    package var assembler: ChunkAssembler { receiving.assembler }
    package var downlink: DownlinkController { receiving.downlink }
    package var savedPaths: SavedPathCapacities { receiving.savedPaths }
    package var pathMTU: PathMTUDiscovery { links.pathMTU }
    package var paths: MemberPaths { links.paths }
    package var birthday: BirthdayPunching { links.birthday }
    package var addressDiscovery: AddressDiscovery { reachability.discovery }
    package var manifestTable: ManifestTable { library.manifestTable }
    package var scrub: ChunkScrub { library.scrub }

    package var localID: NodeID { identity.nodeID }
    /// The current key epoch's secret.
    package var session: SessionSecret { keying.epochs.current }

    // MARK: inputs

    /// Joins through `seeds` (an invite's addresses, `--join`; without any, those kept from an
    /// earlier start that met nobody) and the members remembered from the last run, and
    /// resumes replication.
    package mutating func start(seeds given: [PeerAddress], now: MeshInstant) {
        // First of all requests: nothing is being ingested or fetched yet.
        if library.collectsAtStart {
            store(
                .collectUnreferenced(keeping: journal.state.presentContents.compactMap { manifests[$0] }),
                .startupCollection)
        }
        let own = Set(membership.me.addresses + (localAddress.map { [$0] } ?? []))
        let seeds = rememberSeeds(given)
        let excluded = membership.exclude(keying.epochs.removed, now: now)
        apply(excluded, now: now)
        // Members lost before the restart are asked again, for what is left of their day; the
        // join also goes to the latest lost (after the members remembered): a node that had lost
        // every member still finds one.
        let wall = unixSeconds(at: now)
        let retention = UInt64(max(0, settings.membership.lostMemberRetention.components.seconds))
        if let wall {
            if wall >= retention { directory.remembered.expireLost(lostAtOrBefore: wall - retention) }
            directory.remembered.dateLost(at: wall)
        }
        let lost = directory.remembered.lost(removed: keying.epochs.removed)
        membership.restoreLost(
            lost.map { entry in
                let age: Duration =
                    if let wall, let since = entry.since, wall > since { .seconds(wall - since) } else { .zero }
                return (entry.id, entry.addresses, age)
            }, now: now)
        let first = Set(seeds + directory.remembered.addresses).subtracting(own)
        var lostSeeds = Set<PeerAddress>()
        let fromLost = lost.flatMap(\.addresses).filter { !first.contains($0) && !own.contains($0) }
            .filter { lostSeeds.insert($0).inserted }.prefix(Self.lostSeedsAtStart)
        let all = first.sorted() + fromLost
        let joining = membership.join(all, now: now)
        apply(joining, now: now)
        phase = all.isEmpty ? .running : .joining
        if phase == .joining { directory.joinWait = JoinWait(since: now, noticeAt: now + settings.joinWaitingNotice) }
        directory.remembered.incarnation = membership.me.incarnation
        saveRemembered()
        announceHoldings(now: now)
        saveDamagedManifests()
        for id in library.damagedManifests.sorted() {
            log(
                .warning, "attachment's manifest damaged on disk: fetching it again (its chunks are kept)",
                ["attachment": String(id.hex.prefix(16))])
        }
        replicate(now: now)
        log(.info, "started", ["node": "\(localID)", "seeds": "\(all.count)"])
    }

    /// The wall clock at `now` (Unix seconds), as the driver reads it: at boot, and again from
    /// time to time, as the monotonic clock stops while the machine sleeps. A time before this
    /// code was written is a clock not set yet (a board without a real-time clock): unknown.
    package mutating func setUnixTime(_ unixTime: UInt64?, at now: MeshInstant) {
        guard let unixTime, unixTime >= Self.earliestPlausibleUnixTime else { return }
        directory.wallClock = (now, unixTime)
    }

    static let earliestPlausibleUnixTime: UInt64 = 1_790_000_000

    /// Unix seconds at `now`, when the driver told the time.
    func unixSeconds(at now: MeshInstant) -> UInt64? {
        guard let anchor = directory.wallClock else { return nil }
        return anchor.unixTime + UInt64(max(0, (now - anchor.instant).components.seconds))
    }

    /// The most addresses of lost members a start joins through (the latest lost first): what a
    /// member invented and let die must not push the real members back in the join's turns.
    static let lostSeedsAtStart = 16

    /// One received datagram.
    /// True when the datagram opened under a key of the current epoch: it is a member's, sent
    /// from `address` (or through the route the driver took it from).
    @discardableResult
    package mutating func handle(datagram: ByteBuffer, from address: PeerAddress, now: MeshInstant) -> Bool {
        guard phase.isActive else { return false }
        counters.datagramsReceived += 1
        counters.bytesReceived += UInt64(datagram.readableBytes)
        switch keying.codec.open(datagram) {
        case .failure(.foreign):
            receiveEarlierEpoch(datagram, from: address, now: now)
            return false
        case let .failure(reason):
            counters.countDrop(reason)
            if logs(.trace) { log(.trace, "dropped datagram", ["reason": reason.rawValue, "from": "\(address)"]) }
            return false
        case let .success(opened):
            if closing.ending != nil { answerWithEnd(opened, size: datagram.readableBytes, from: address, now: now) }
            route(opened, size: datagram.readableBytes, from: address, now: now)
            if directory.joinWait != nil, phase == .running {
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
            let answerLimit = Self.answerLimit(toRequestOf: bytes)
            let directives = membership.onFrames(
                datagram.frames, from: sender, address: address, now: now,
                answerLimit: answerLimit, sourceProven: relay != nil || isProvenSource(address, of: sender))
            apply(directives, now: now)
            if relay == nil {
                helloFrom(sender, boot: datagram.header.bootID, source: address, now: now)
                checkHelloSource(of: sender, boot: datagram.header.bootID, at: address, now: now)
            }
        case .pairwise:
            counters.received.count(TrafficKind(pairwise: datagram.frames), bytes: bytes)
            // A node acting as release 0.9.0 (tests only) drops what that release would not know.
            if !settings.knowsVersionFrames, datagram.frames.contains(where: { $0.type.introducedIn > 1 }) {
                if datagram.frames.contains(where: { $0.type.introducedIn > 1 && $0.type != .protocolVersion }) {
                    counters.laterProtocolDrops += 1
                }
                return counters.countDrop(.malformed)
            }
            // Alone in its datagram (PROTOCOL.md §3, "Protocol versions"); otherwise a datagram like
            // any: it proves the path and counts in the packet numbers the downlink reads losses from.
            switch datagram.frames.first {
            case let .protocolVersion(announcement):
                // The introduction beside first: the answer says whether we hold it.
                receiveIntroductions(datagram.frames.dropFirst(), from: sender, now: now)
                receiveVersion(announcement, header: datagram.header, now: now)
            case .introduction, .introductionRequest, .introductionRefusal:
                receiveIntroductions(datagram.frames[...], from: sender, now: now)
            default: break
            }
            if receiving.provenHolders.contains(sender) {
                receiving.downlink.onDatagram(
                    from: sender, packetNumber: datagram.header.packetNumber,
                    carriesPiece: datagram.frames.contains { if case .chunkPiece = $0 { true } else { false } })
            }
            if datagram.frames.contains(where: \.isProbeOrAck) {
                let directives = membership.onFrames(
                    datagram.frames, from: sender, address: address, now: now,
                    pairwise: true, answerLimit: Self.answerLimit(toRequestOf: bytes),
                    sourceProven: relay != nil || isProvenSource(address, of: sender))
                apply(directives, now: now)
            } else {
                membership.heard(from: sender, now: now)
            }
            let directives = delivery.onFrames(datagram.frames, from: sender, now: now, deferAcks: true)
            apply(directives, now: now)
            receiveTransfer(datagram.frames, from: sender, datagramSize: bytes, now: now)
            receivePings(datagram.frames, from: sender, source: relay == nil ? address : nil, now: now)
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

    /// The bytes of frames that answer a datagram of `bytes` to an address not proven: the answer
    /// stays within `factor` times its size, sealed.
    static func answerLimit(toRequestOf bytes: Int, factor: Int = stateAnswerFactor) -> Int {
        factor * bytes - DatagramCodec.pairwiseDatagramSize(payload: 0) - PacketSealer.nonceByteCount
    }

    /// Whether `address` is where `sender`'s own pairwise datagrams came from before (a record
    /// names addresses only by its claim, a hello's source too).
    func isProvenSource(_ address: PeerAddress, of sender: NodeID) -> Bool {
        pairwiseAddress(of: sender) == address
    }

    /// The end of a read batch: acknowledge what it brought, once per peer.
    package mutating func endReadBatch(now: MeshInstant) {
        guard phase.isActive else { return }
        let acks = delivery.flushAcks(now: now)
        apply(acks, now: now)
    }

    /// Timers (`NodeTimer`): every one, each acting only when its time has come.
    package mutating func tick(now: MeshInstant) {
        guard phase.isActive else { return }
        for timer in NodeTimer.order { fire(timer, now: now) }
        // The relay's budget measures our links by our own transfers, relaying or not.
        relayService.observe(ownTransfers, now: now)
        if directory.rememberedDirty { saveRemembered() }
    }

    /// When `tick` must run next: the earliest timer. Only deadlines `tick` acts on: one it
    /// leaves in the past would make a driver's timer fire without pause.
    package var nextDeadline: MeshInstant? {
        guard phase.isActive else { return nil }
        var earliest: MeshInstant?
        for timer in NodeTimer.order {
            if let deadline = deadline(of: timer), earliest.map({ deadline < $0 }) ?? true { earliest = deadline }
        }
        return earliest
    }

    /// `nextDeadline`, read in place. A driver keeps its instance in a class, and a getter too
    /// large to inline, called on a class's stored struct, is handed a copy of the whole struct (a
    /// retain and a release of every field), which a holder pacing a fetch, re-arming its timer
    /// after every release, pays over and over. A mutating call works on it where it lies.
    package mutating func nextDeadlineInPlace() -> MeshInstant? { nextDeadline }

    /// The driver's send queue filled (false) or drained (true).
    package mutating func setWritable(_ writable: Bool) {
        serving.writable = writable
    }

    /// A command from the user or the application.
    package mutating func handle(_ command: NodeCommand, request: RequestID, now: MeshInstant) {
        guard phase.isActive else { return complete(request, .failure(.stopped)) }
        if let ending = closing.ending {
            if case .end = command { self.closing.ending?.requests.append(request); return }
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
        case let .removeMember(id, introduced):
            beginRemoval(of: id, introduced: introduced, request: request, now: now)
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
        case let .scrubChunk(digest):
            chunkScrubbed(result, digest: digest, now: now)
        case let .rewriteManifest(id, synced):
            manifestRewritten(result, id: id, synced: synced)
        case .saveDamagedManifests:
            damagedManifestsSaved(result)
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
        case let .saveRemoval(request, transition, member):
            removalSaved(result, transition: transition, member: member, request: request, now: now)
        case .saveEpochs:
            if case let .failure(failure) = result {
                keying.storedRivals = nil
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
        for (_, pending) in waits.sends.sorted(by: { $0.key < $1.key }) {
            complete(pending.request, .failure(.stopped))
        }
        waits.sends = [:]
        for (_, waiters) in fetchTable.loadWaiters.sorted(by: { $0.key < $1.key }) {
            for waiter in waiters { failLoad(waiter, .stopped) }
        }
        fetchTable.loadWaiters = [:]
        fetchTable.fetches = [:]
        // A stage being stored may still land: only a removal waiting between stages can say
        // whom it removed.
        if let request = keying.pendingRemoval {
            complete(request, .failure(.stopped))
        } else if let staged = keying.stagedRemoval {
            complete(staged.request, .failure(cutShort(staged, .stopped)))
        }
        keying.pendingRemoval = nil
        keying.stagedRemoval = nil
        for request in closing.handover?.requests ?? [] { complete(request, .failure(.stopped)) }
        closing.handover = nil
        for request in closing.ending?.requests ?? [] { complete(request, .failure(.stopped)) }
        for (_, pending) in waits.pings.sorted(by: { $0.key < $1.key }) {
            complete(pending.request, .failure(.stopped))
        }
        waits.pings = [:]
        closing.ending = nil
    }

    /// Hands every effect made since the last call to the driver, oldest first, and says whether
    /// there was any. `buffer` should be empty; the two arrays swap, so neither is reallocated in
    /// steady state. A driver asks here, not through a getter: a getter of this struct, called on
    /// a class's stored property from another module, is handed a copy of the whole instance (a
    /// retain and a release of every table it holds) on every datagram.
    @discardableResult
    package mutating func drainEffects(into buffer: inout [NodeEffect]) -> Bool {
        swap(&effects, &buffer)
        return !buffer.isEmpty
    }

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
    /// `gated: false` only for an answer in the protocol of what the member sent us.
    mutating func sendPairwise(_ frames: [Frame], to peer: NodeID, address: PeerAddress? = nil, gated: Bool = true) {
        guard !gated || mayCarry(frames, to: peer) else { return }
        if address == nil, let relay = links.paths.relay(of: peer) {
            guard let datagram = keying.codec.seal(frames, to: peer) else { return }
            return sendThroughRelay(datagram, to: peer, via: relay, kind: TrafficKind(pairwise: frames))
        }
        guard let address = address ?? directory.addresses[peer], let datagram = keying.codec.seal(frames, to: peer)
        else { return }
        transmit(datagram, to: address, kind: TrafficKind(pairwise: frames))
    }

    /// A datagram of `frames` under our pairwise key for `peer`, with the next packet number,
    /// for a test to send as it likes (a hostile member's frames).
    package mutating func sealPairwise(_ frames: [Frame], to peer: NodeID) -> ByteBuffer? {
        keying.codec.seal(frames, to: peer)
    }

    /// Frames for anyone holding the session's hello key, meant for `recipient` when it is named
    /// (through its relay, while it is relayed and `address` is where it is known).
    mutating func sendHello(_ frames: [Frame], to address: PeerAddress, recipient: NodeID? = nil) {
        let datagram = keying.codec.sealHello(frames, nonce: randomNonce())
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
