import MeshCore
import MeshCrypto
import NIOCore

/// A whole GroupMesh node as a simulated process: membership, the messenger (reliable and
/// unreliable delivery), the journal and chunk transfer (scheduler, assembler, an in-memory
/// store of verified chunks), composed the way `MeshNode` composes them, exchanging real sealed
/// datagrams (`DatagramCodec`: hello key for membership, pairwise keys for the rest).
///
/// What differs from `MeshNode`, and why: no disk (the store is `SimChunkStore`, the journal
/// log is not written), no async hops (a manifest fetch is a small state machine instead of an
/// `await` loop), no send queue (so no "busy" admission by queue size), and every datagram is
/// its own read batch (acks are flushed after each). Keys, nonces and boot ids come from the
/// simulation seed, so a seed replays exactly.
///
/// The test plans work (attach, remove, send) with `plan(at:_:)` before the node starts; the
/// node records what it sent and what it received, for the invariants `SimMesh` checks.
public final class SimNode: SimulatedProcess {
    public struct Configuration: Sendable {
        public var membership: MembershipSettings = .lan
        public var wire = DatagramCodec.Configuration()
        /// Small chunks, so a few KiB make a multi-chunk attachment.
        public var chunkSize = 4096
        /// How long a fetch waits with no progress and no holder before it fails.
        public var unavailableTimeout: Duration = .seconds(10)
        public var manifestRequestTimeout: Duration = .seconds(5)
        public init() {}
    }

    /// A reliable application message this node sent.
    public struct SentMessage: Sendable {
        public var sendID: UInt64
        public var body: [UInt8]
        public var targets: [NodeID]
    }

    static let tickTimer: UInt64 = 1
    static let scriptTimer: UInt64 = 2
    static let dataType = "data"
    public static let journalSendTimeout: Duration = .seconds(30)

    public let address: SimAddress
    public let identity: NodeIdentity
    public let bootID: UInt64
    public let configuration: Configuration
    let session: SessionSecret
    let ephemeral: EphemeralKeyPair
    let seeds: [SimAddress]

    public internal(set) var codec: DatagramCodec
    public internal(set) var membership: MembershipInstance
    public internal(set) var delivery: DeliveryInstance
    public internal(set) var journal: JournalInstance
    public internal(set) var transfer: TransferScheduler
    public internal(set) var assembler: ChunkAssembler
    public internal(set) var store = SimChunkStore()

    // Journal and transfer state, as MeshNode keeps it (SimNode+Journal, SimNode+Transfer).
    public internal(set) var manifests: [SHA256Digest: Manifest] = [:]
    /// Attachments whose every chunk is in the store.
    public internal(set) var complete: Set<SHA256Digest> = []
    public internal(set) var fetching: Set<SHA256Digest> = []
    var requested: [SHA256Digest: [ChunkRef]] = [:]
    var localBitmaps: [SHA256Digest: ChunkBitmap] = [:]
    var dirtyBitmaps: Set<SHA256Digest> = []
    var nextBitmapAnnouncement = MeshInstant.zero
    var lastProgress: [SHA256Digest: MeshInstant] = [:]
    var manifestFetches: [SHA256Digest: ManifestFetch] = [:]
    var peerAddresses: [NodeID: SimAddress] = [:]
    var random: SplitMix64

    /// The node's clock at the current (or last) callback; its start time before it starts.
    public internal(set) var now: MeshInstant
    private var outbox: [(bytes: [UInt8], to: SimAddress)] = []
    private var script: [(time: MeshInstant, action: (SimNode) -> Void)] = []

    // What happened, for the invariants and for reading a failing seed.
    public internal(set) var sentMessages: [SentMessage] = []
    /// Results of every send (application and journal), by send id.
    public internal(set) var completions: [UInt64: [NodeID: DeliveryInstance.Failure]] = [:]
    /// Reliable application bodies received, per sender, in delivery order.
    public internal(set) var reliableReceived: [NodeID: [[UInt8]]] = [:]
    public internal(set) var unreliableReceived: [NodeID: [[UInt8]]] = [:]
    /// Operations this node made (its adds and removes).
    public internal(set) var created: [JournalOperation] = []
    /// Every status change this node saw, in order.
    public internal(set) var membershipChanges: [MembershipProcess.Change] = []
    public internal(set) var dropped: [DropReason: Int] = [:]
    public internal(set) var largestDatagram = 0
    public internal(set) var fetchesFailed = 0
    public internal(set) var chunksRejected = 0
    /// Things that must never happen (a send completed twice…); the tests assert it stays empty.
    public internal(set) var violations: [String] = []
    /// Timer callbacks in a row after which the next deadline was still due.
    var spins = 0
    static let maxSpins = 1000
    var timerSpun = false

    /// A node at `address` of the session, joining through `seeds` when it starts at `startTime`.
    /// Its identity, ephemeral key, boot id and random stream derive from `seed` and its address.
    public init(address: SimAddress, session: SessionSecret, seed: UInt64, seeds: [SimAddress],
                startTime: MeshInstant, configuration: Configuration = .init()) {
        var derive = SplitMix64(seed: seed ^ (UInt64(address.index + 1) &* 0x9E37_79B9_7F4A_7C15))
        func bytes32() -> [UInt8] { (0..<4).flatMap { _ in withUnsafeBytes(of: derive.next()) { Array($0) } } }
        identity = try! NodeIdentity(seed: bytes32())  // safe: 32 bytes
        ephemeral = try! EphemeralKeyPair(seed: bytes32())  // safe: 32 bytes
        bootID = derive.next()
        random = SplitMix64(seed: derive.next())
        self.address = address
        self.session = session
        self.seeds = seeds
        self.configuration = configuration
        now = startTime
        codec = DatagramCodec(session: session, localID: identity.nodeID, localBootID: bootID,
                              configuration: configuration.wire)
        let record = MemberRecord(signingKey: identity.publicKey, name: address.description,
                                  addresses: [address.peerAddress], incarnation: 1, bootID: bootID,
                                  ephemeralKey: ephemeral.publicKey)
        let authority = Ed25519Authority(identity: identity)
        membership = MembershipInstance(record: record, authority: authority, settings: configuration.membership,
                                        datagramBudget: codec.maxHelloPayload, seed: derive.next(), now: startTime)
        var deliverySettings = DeliveryInstance.Settings()
        deliverySettings.datagramBudget = codec.maxPairwisePayload
        delivery = DeliveryInstance(settings: deliverySettings)
        journal = JournalInstance(authority: authority, seed: derive.next(), now: startTime)
        transfer = TransferScheduler(seed: derive.next())
        assembler = ChunkAssembler(settings: .init(pieceSize: codec.maxPairwisePayload - ChunkPiece.overhead))
    }

    public var id: NodeID { identity.nodeID }

    /// Runs `action` when this node's clock reads `time` (plan before the node starts).
    public func plan(at time: MeshInstant, _ action: @escaping (SimNode) -> Void) {
        let index = script.firstIndex { $0.time > time } ?? script.count
        script.insert((time, action), at: index)
    }

    /// Members this node sees as neither dead nor left, itself excluded.
    public var activeMemberIDs: [NodeID] {
        membership.view.dropFirst().filter { !$0.status.isGone }.map(\.id)
    }

    // MARK: SimulatedProcess

    public func start(now: MeshInstant, context: inout SimContext) {
        begin(now)
        performMembership(membership.join(seeds.map(\.peerAddress), now: now))
        finish(&context)
    }

    public func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        begin(now)
        switch codec.open(ByteBuffer(bytes: datagram)) {
        case let .failure(reason):
            dropped[reason, default: 0] += 1
        case let .success(opened):
            let peer = opened.header.sender
            performMembership(membership.onFrames(opened.frames, from: peer, address: sender.peerAddress, now: now))
            // Messenger and transfer frames count only under pairwise keys: then the sender is proven.
            if opened.header.keyKind == .pairwise {
                performDelivery(delivery.onFrames(opened.frames, from: peer, now: now, deferAcks: true))
                receiveTransfer(opened.frames, from: peer)
            }
        }
        // Every datagram is its own read batch: acknowledge what it brought.
        performDelivery(delivery.flushAcks(now: now))
        finish(&context)
    }

    public func timerFired(_ timer: UInt64, now: MeshInstant, context: inout SimContext) {
        begin(now)
        if timer == Self.scriptTimer {
            while let next = script.first, next.time <= now {
                script.removeFirst()
                next.action(self)
            }
        } else {
            performMembership(membership.onTick(now: now))
            performDelivery(delivery.onTick(now: now))
            performJournal(journal.onTick(now: now))
            expireManifestRequests()
            transferTick()
        }
        finish(&context, timerDue: timer == Self.tickTimer)
    }

    private func begin(_ time: MeshInstant) {
        now = time
        outbox.removeAll(keepingCapacity: true)
    }

    /// Hands the callback's datagrams to the simulator and keeps one timer at the earliest
    /// deadline of the state machines (as `MeshNode.rearm`).
    private func finish(_ context: inout SimContext, timerDue: Bool = false) {
        for (bytes, destination) in outbox { context.send(bytes, to: destination) }
        outbox.removeAll(keepingCapacity: true)
        var deadline = membership.nextDeadline
        if let next = delivery.nextDeadline { deadline = min(deadline, next) }
        if let next = journalDeadline { deadline = min(deadline, next) }
        // A deadline that a tick leaves in the past fires again at once, forever (MeshNode's
        // timer would spin at 100% CPU): report it, and let time move on so the run ends.
        if deadline <= now {
            if timerDue { spins += 1 }
            if spins == Self.maxSpins, !timerSpun {
                timerSpun = true
                violations.append("\(now): the timer fires without pause (a deadline stays in the past)")
            }
            if spins >= Self.maxSpins { deadline = now + .milliseconds(100) }
        } else if timerDue {
            spins = 0
        }
        context.schedule(timer: Self.tickTimer, at: deadline)
        if let next = script.first { context.schedule(timer: Self.scriptTimer, at: next.time) }
    }

    func send(_ datagram: ByteBuffer, to destination: SimAddress) {
        let bytes = Array(datagram.readableBytesView)
        largestDatagram = max(largestDatagram, bytes.count)
        outbox.append((bytes, destination))
    }

    // MARK: membership

    func performMembership(_ directives: [MembershipDirective]) {
        for directive in directives {
            switch directive {
            case let .send(frames, _, address):
                guard let destination = SimAddress(peerAddress: address) else { continue }
                let nonce = PacketNonce(raw: (0..<3).flatMap { _ in withUnsafeBytes(of: random.next()) { Array($0) } })
                guard let nonce else { continue }
                send(codec.sealHello(frames, nonce: nonce), to: destination)
            case let .memberChanged(member):
                memberChanged(member)
            case let .memberForgotten(id):
                peerAddresses[id] = nil
                codec.removePeer(id)
                performDelivery(delivery.removePeer(id, now: now))
            }
        }
    }

    /// Installs or keeps keys and channels, and starts or stops journal sync (as `MeshNode.perform`).
    private func memberChanged(_ member: Member) {
        let id = member.id
        membershipChanges.append(.init(time: now, member: id, status: member.status, incarnation: member.incarnation))
        peerAddresses[id] = member.status.isGone ? nil : member.address.flatMap(SimAddress.init(peerAddress:))
        if member.status.isGone {
            // Keys and channels stay until the member is forgotten or a new boot shows up.
            performDelivery(delivery.failPending(id, now: now))
            performJournal(journal.memberLeft(id))
            transfer.removePeer(id)
            assembler.removeHolder(id)
        } else if codec.installedBoot(of: id) != member.record.bootID || !delivery.peers.contains(id),
                  let keys = PairwiseKeys.derive(session: session, local: ephemeral,
                                                 peerPublicKey: member.record.ephemeralKey) {
            if codec.installedBoot(of: id) != nil { performDelivery(delivery.removePeer(id, now: now)) }
            codec.installPeer(id, bootID: member.record.bootID, keys: keys)
            delivery.addPeer(id)
            _ = journal.memberLeft(id)
            performJournal(journal.memberJoined(id))
        } else {
            // Back from a (false) death with the same boot: resume journal sync.
            delivery.addPeer(id)
            performJournal(journal.memberJoined(id))
        }
    }

    // MARK: messenger

    /// Sends an application message to `targets` (nil: every active member), as `MeshNode.sendMessage`.
    public func sendMessage(_ body: [UInt8], to targets: [NodeID]? = nil, mode: DeliveryInstance.Mode) {
        let recipients = targets ?? activeMemberIDs
        let envelope = MessageEnvelope(type: Self.dataType, body: body)
        do {
            let (sendID, directives) = try delivery.send(envelope.encoded, to: recipients, mode: mode, now: now)
            if mode == .reliable { sentMessages.append(SentMessage(sendID: sendID, body: body, targets: recipients)) }
            performDelivery(directives)
        } catch {
            violations.append("\(now): a send of \(body.count) bytes was refused: \(error)")
        }
    }

    func performDelivery(_ directives: [DeliveryInstance.Directive]) {
        for directive in directives {
            switch directive {
            case let .send(peer, frames):
                guard let destination = peerAddresses[peer], let datagram = codec.seal(frames, to: peer) else { continue }
                send(datagram, to: destination)
            case let .deliver(received):
                guard let envelope = MessageEnvelope(decoding: received.payload) else {
                    violations.append("\(now): undecodable message from \(received.from)")
                    continue
                }
                if envelope.type == JournalMessage.typeTag {
                    receiveJournal(envelope.body, from: received.from, mode: received.mode)
                } else if received.mode == .reliable {
                    reliableReceived[received.from, default: []].append(envelope.body)
                } else {
                    unreliableReceived[received.from, default: []].append(envelope.body)
                }
            case let .completed(sendID, failures):
                if completions[sendID] != nil { violations.append("\(now): send \(sendID) completed twice") }
                completions[sendID] = failures
            }
        }
    }
}
