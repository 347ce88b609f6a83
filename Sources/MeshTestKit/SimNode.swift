import MeshCore
import MeshCrypto
import NIOCore

/// A whole GroupMesh node on the simulator: the very `NodeInstance` that `MeshNode` drives,
/// driven here by deliveries and timers instead of a socket and an event loop. Its store is a
/// `SimStorage` that answers in order, at once or after seeded delays, and may fail or lie.
/// Keys, nonces and boot ids come from the simulation seed, so a seed replays exactly.
///
/// The driver's loop is quinn's `drive_incoming`/`drive_outgoing` in small: feed one input to
/// the core, then carry out its effects (datagrams to the simulator, storage to `SimStorage`,
/// events and completions into the records the invariants read), then arm one timer at the
/// core's deadline. It takes no decision of its own.
///
/// The test plans work (attach, remove, send, remove a member…) with `plan(at:_:)` before the
/// node starts; the node records what it sent and what it received, for `SimMesh`'s invariants.
package final class SimNode: SimulatedProcess {
    package struct Configuration: Sendable {
        package var settings: NodeSettings
        package var storage = SimStorage.Conditions()

        package init() {
            settings = NodeSettings(membership: .lan)
            // Small chunks, so a few KiB make a multi-chunk attachment.
            settings.chunkSize = 4096
            settings.logLevel = .error
            // Announcements reach nodes behind one NAT box; off unless a test asks (their timers
            // would change every seeded run).
            settings.lanDiscovery.enabled = false
            // The scrub too (its reads from a minute on would change every long seeded run).
            settings.scrub.every = nil
            // The simulator's hosts are on 127/8: birthday rounds may aim at them here.
            settings.birthday.localHostsAllowed = true
        }
    }

    /// A reliable application message this node sent.
    package struct SentMessage: Sendable {
        package var request: RequestID
        package var body: [UInt8]
        package var targets: [NodeID]
    }

    static let tickTimer: UInt64 = 1
    static let scriptTimer: UInt64 = 2
    static let storageTimer: UInt64 = 3
    static let dataType = "data"
    static let maxSpins = 1000

    package let address: SimAddress
    package let identity: NodeIdentity
    package let configuration: Configuration
    let session: SessionSecret
    package let seeds: [SimAddress]
    package private(set) var core: NodeInstance
    package private(set) var storage: SimStorage
    private var random: SplitMix64
    private var storageQueue: [(request: StorageRequest, ticket: StorageTicket)] = []
    private var storageBusy = false
    private var drained: [NodeEffect] = []
    private var nextRequest: UInt64 = 0

    /// The node's clock at the current (or last) callback; its start time before it starts.
    package private(set) var now: MeshInstant
    private var script: [(time: MeshInstant, action: (SimNode) -> Void)] = []

    // What happened, for the invariants and for reading a failing seed.
    package private(set) var sentMessages: [SentMessage] = []
    /// Per reliable application send: the targets that did not acknowledge (empty: all did).
    package private(set) var completions: [RequestID: [NodeID: DeliveryInstance.Failure]] = [:]
    package private(set) var reliableReceived: [NodeID: [[UInt8]]] = [:]
    package private(set) var unreliableReceived: [NodeID: [[UInt8]]] = [:]
    /// Every status change this node saw, in order.
    package private(set) var membershipChanges: [MembershipProcess.Change] = []
    package private(set) var largestDatagram = 0
    /// Log records the core emitted, by message (only at the levels its settings log).
    package private(set) var logged: [String: Int] = [:]
    package private(set) var failedCommands: [String] = []
    /// Who ended the session, as this node was told (maybe itself).
    package private(set) var sessionEndedBy: NodeID?
    package private(set) var removedFromSession = false
    /// Every NAT behaviour the core reported, in order.
    package private(set) var natDetections: [NATBehaviour] = []
    /// Each time the core said that nobody answered its join yet, and each time it then said
    /// who let it in (with the node's clock).
    package private(set) var waitingNotices: [(time: MeshInstant, progress: JoinProgress)] = []
    package private(set) var joinedNotices: [(time: MeshInstant, member: NodeID, address: PeerAddress)] = []
    /// Each time the core said that its invite is out of date, with the rotation's author.
    package private(set) var outOfDateNotices: [(time: MeshInstant, by: NodeID)] = []
    /// Members reported as speaking no protocol version this node speaks, with theirs.
    package private(set) var protocolGaps: [(time: MeshInstant, member: NodeID, theirs: SpokenVersions)] = []
    /// What each graceful leave reported.
    package private(set) var leaveReports: [LeaveReport] = []
    /// Things that must never happen (a command completed twice, a timer that spins…).
    package private(set) var violations: [String] = []
    private var pending: [RequestID: String] = [:]
    /// What each command other than a message send or a load ended with.
    package private(set) var commandResults: [RequestID: Result<NodeResult, NodeError>] = [:]
    private var spins = 0
    private var timerSpun = false

    /// A node at `address` of the session, joining through `seeds` when it starts at `startTime`.
    /// Its identity, ephemeral key, boot id and random stream derive from `seed` and its address.
    package convenience init(
        address: SimAddress, session: SessionSecret, seed: UInt64, seeds: [SimAddress],
        startTime: MeshInstant, configuration: Configuration = .init()
    ) {
        var derive = SplitMix64(seed: seed ^ (UInt64(address.index + 1) &* 0x9E37_79B9_7F4A_7C15))
        let identity = try! NodeIdentity(seed: derive.bytes(32))  // safe: 32 bytes
        // As a data dir does: started with nobody to join, it makes the session's secret.
        var storage = SimStorage(conditions: configuration.storage)
        storage.founded = seeds.isEmpty
        if storage.founded {
            // A stream of its own: the rest of what `derive` gives stays as it was.
            var nonce = SplitMix64(seed: seed ^ 0x666F_756E_6469_6E67)
            storage.foundingNonce = nonce.bytes(FoundingID.nonceByteCount)
        }
        self.init(
            address: address, session: session, identity: identity, derive: &derive, seeds: seeds,
            storage: storage, startTime: startTime, configuration: configuration)
    }

    /// `node` booting again on its disk, with a new boot (keys, boot id) from `seed`. What the
    /// old boot sent and received stays in the records (its sends cut short by the crash count
    /// as failed for every target), so the invariants speak of the node across its boots.
    /// `seeds`: what the new boot is given to join through (by default what the old one was;
    /// `[]` is a restart without the invite).
    package convenience init(restarting node: SimNode, seed: UInt64, startTime: MeshInstant, seeds: [SimAddress]? = nil)
    {
        var derive = SplitMix64(seed: seed ^ node.core.bootID)
        var storage = node.storage
        storage.abandonPending()
        self.init(
            address: node.address, session: node.session, identity: node.identity, derive: &derive,
            seeds: seeds ?? node.seeds, storage: storage, startTime: startTime, configuration: node.configuration)
        nextRequest = node.nextRequest
        sentMessages = node.sentMessages
        completions = node.completions
        for message in sentMessages where completions[message.request] == nil {
            completions[message.request] = Dictionary(uniqueKeysWithValues: message.targets.map { ($0, .departed) })
        }
        reliableReceived = node.reliableReceived
        unreliableReceived = node.unreliableReceived
        membershipChanges = node.membershipChanges
        largestDatagram = node.largestDatagram
        failedCommands = node.failedCommands
        violations = node.violations
    }

    private init(
        address: SimAddress, session: SessionSecret, identity: NodeIdentity, derive: inout SplitMix64,
        seeds: [SimAddress], storage: SimStorage, startTime: MeshInstant, configuration: Configuration
    ) {
        let ephemeral = try! EphemeralKeyPair(seed: derive.bytes(32))  // safe: 32 bytes
        let boot = NodeInstance.Boot(
            identity: identity, ephemeral: ephemeral, bootID: derive.next(),
            name: address.description, addresses: [address.peerAddress],
            unixTime: Self.unixTimeAtZero + startTime.nanoseconds / 1_000_000_000)
        random = SplitMix64(seed: derive.next())
        core = NodeInstance(
            boot: boot, restored: storage.restored(origin: session, identity: identity),
            settings: configuration.settings, random: SplitMix64(seed: derive.next()), now: startTime)
        self.address = address
        self.identity = identity
        self.session = session
        self.seeds = seeds
        self.storage = storage
        self.configuration = configuration
        now = startTime
    }

    /// The wall clock at the simulation's time zero, for every node (Unix seconds).
    package static let unixTimeAtZero: UInt64 = 1_800_000_000

    package var id: NodeID { identity.nodeID }
    package var journal: JournalInstance { core.journal }
    package var membership: MembershipInstance { core.membership }
    package var complete: Set<SHA256Digest> { core.complete }
    package var store: SimChunkStore { storage.chunks }
    package var activeMemberIDs: [NodeID] { core.activeMemberIDs }
    package var sessionID: SessionID { core.session.sessionID }

    /// The operations this node made (its adds and removes), as its journal holds them. Read by
    /// id, without hashing any operation again: the invariants ask every simulated second.
    package var created: [OperationID] {
        let state = core.journal.state
        return state.operationIDs.filter { state.operation($0)?.author.nodeID == id }
    }

    /// Runs `action` when this node's clock reads `time` (plan before the node starts).
    package func plan(at time: MeshInstant, _ action: @escaping (SimNode) -> Void) {
        let index = script.firstIndex { $0.time > time } ?? script.count
        script.insert((time, action), at: index)
    }

    /// Drops what was planned from `time` on.
    package func cancelPlans(from time: MeshInstant) {
        script.removeAll { $0.time >= time }
    }

    // MARK: commands

    /// Adds `bytes` as an attachment.
    package func attach(_ bytes: [UInt8], metadata: [UInt8] = []) {
        command(.add(.bytes(bytes), metadata: metadata), "attach \(bytes.count) bytes")
    }

    /// Loads an attachment into memory, fetching it first if need be: a fetch someone waits for.
    @discardableResult
    package func load(_ id: SHA256Digest) -> RequestID {
        command(.load(id, into: .memory), "load \(id)")
    }

    /// Gives a command up, as an interrupted `get` or a cancelled task does.
    package func cancel(_ request: RequestID) {
        core.cancel(request, now: now)
        drive()
    }

    /// Removes the `pick`-th present attachment (modulo how many there are).
    package func removeAttachment(pick: UInt64) {
        let present = core.attachments
        guard !present.isEmpty else { return }
        command(.remove(present[Int(pick % UInt64(present.count))].id), "remove")
    }

    /// Sends an application message to `targets` (nil: every active member).
    package func sendMessage(_ body: [UInt8], to targets: [NodeID]? = nil, mode: DeliveryInstance.Mode) {
        let recipients = targets ?? core.activeMemberIDs
        let request = command(
            .send(MessageEnvelope(type: Self.dataType, body: body), to: recipients, mode: mode, timeout: nil),
            "send")
        if mode == .reliable { sentMessages.append(SentMessage(request: request, body: body, targets: recipients)) }
    }

    /// A graceful leave; once its departure is out the node stops, as `MeshNode` does.
    package func leave(waitingForReplication: Bool = true) {
        _ = command(.leave(waitingForReplication: waitingForReplication), "leave")
    }

    /// Ends the session for every member; the node stops once its departure is out.
    package func end() {
        _ = command(.end, "end")
    }

    /// Removes `member`, with the members it introduced as `introduced` says (by default all
    /// stay: most tests remove a member whoever it let in); its result is in `commandResults`
    /// under the request returned.
    @discardableResult
    package func removeMember(_ member: NodeID, introduced: IntroducedMembers = .keepAll) -> RequestID {
        command(.removeMember(member, introduced: introduced), "remove-member \(member) (\(introduced))")
    }

    /// The driver's send queue fills (false) or drains (true): wants are answered busy meanwhile.
    package func setWritable(_ writable: Bool) {
        core.setWritable(writable)
    }

    /// A stored chunk damaged on disk (found, and discarded, when next read).
    package func damage(chunk digest: SHA256Digest) {
        storage.chunks.discard(digest)
    }

    /// Bytes put straight on the simulated disk, as an earlier run of the node could have left
    /// them (the core hears of them at its next start).
    package func putOnDisk(_ bytes: [UInt8]) {
        storage.chunks.write(bytes)
    }

    /// A stored chunk with one byte flipped: still listed, found only by a read that hashes it.
    package func flipByte(ofChunk digest: SHA256Digest) {
        storage.chunks.damage(digest)
    }

    /// Changes what the data dir remembers (a damaged or older `members.json`): read by the next
    /// restart, until the node writes it again.
    package func changeRemembered(_ change: (inout RememberedMembers) -> Void) {
        change(&storage.remembered)
    }

    package func setStorage(_ change: (inout SimStorage.Conditions) -> Void) {
        change(&storage.conditions)
    }

    /// A journal message to `member` over this node's reliable channel, whatever its core would
    /// say: for scenarios of hostile members (a forged end of the session).
    package func sendJournal(_ message: JournalMessage, to member: NodeID) {
        core.sendJournal(message, to: member, now: now)
        drive()
    }

    /// Frames sealed with this node's pairwise key for `peer`, sent as they are: what a member
    /// could send whatever its core would. For scenarios of hostile members.
    package func inject(_ frames: [Frame], to peer: SimAddress, member: NodeID) {
        guard let datagram = core.sealPairwise(frames, to: member) else { return }
        outbox.append((Array(datagram.readableBytesView), peer))
    }

    /// A datagram of `frames` sealed for `member` with the next packet number, not sent: for a
    /// test to wrap it as a hostile member would (a relayed datagram).
    package func seal(_ frames: [Frame], for member: NodeID) -> ByteBuffer? {
        core.sealPairwise(frames, to: member)
    }

    @discardableResult
    private func command(_ command: NodeCommand, _ what: String) -> RequestID {
        nextRequest += 1
        let request = RequestID(nextRequest)
        pending[request] = what
        core.handle(command, request: request, now: now)
        return request
    }

    // MARK: SimulatedProcess

    private var outbox: [(bytes: [UInt8], to: SimAddress)] = []
    private var lanOutbox: [[UInt8]] = []
    private var shortLivedOutbox: [(bytes: [UInt8], to: SimAddress)] = []

    package func start(now: MeshInstant, context: inout SimContext) {
        self.now = now
        core.start(seeds: seeds.map(\.peerAddress), now: now)
        finish(&context)
    }

    package func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        self.now = now
        core.handle(datagram: ByteBuffer(bytes: datagram), from: sender.peerAddress, now: now)
        // Every datagram is its own read batch.
        core.endReadBatch(now: now)
        finish(&context)
    }

    package func receiveMulticast(
        datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext
    ) {
        self.now = now
        core.receiveLANAnnouncement(datagram, from: sender.peerAddress, now: now)
        finish(&context)
    }

    package func timerFired(_ timer: UInt64, now: MeshInstant, context: inout SimContext) {
        self.now = now
        switch timer {
        case Self.scriptTimer:
            while let next = script.first, next.time <= now {
                script.removeFirst()
                next.action(self)
                drive()
            }
        case Self.storageTimer:
            storageBusy = false
            answerStorage()
        default:
            core.tick(now: now)
        }
        finish(&context, timerDue: timer == Self.tickTimer)
    }

    /// Carries out the core's effects until it has none.
    private func drive() {
        while core.drainEffects(into: &drained) {
            for effect in drained { run(effect) }
            drained.removeAll(keepingCapacity: true)
            if storage.conditions.delay == nil {
                while !storageQueue.isEmpty { answerStorage() }
            }
        }
    }

    private func run(_ effect: NodeEffect) {
        switch effect {
        case let .send(datagram, address):
            send(datagram, to: address)
        case let .sendShortLived(datagram, address, _):
            guard let destination = SimAddress(peerAddress: address) else { return }
            shortLivedOutbox.append((Array(datagram.readableBytesView), destination))
        case let .sendSegments(batch, segmentSize, _, address):
            var rest = batch
            while rest.readableBytes > 0, let datagram = rest.readSlice(length: min(segmentSize, rest.readableBytes)) {
                send(datagram, to: address)
            }
        case let .storage(request, ticket):
            storageQueue.append((request, ticket))
        case let .announceOnLAN(bytes):
            lanOutbox.append(bytes)
        case .openBirthdaySockets:
            // The simulator gives a node one socket: the hard side's many mappings are not
            // modelled (BirthdayPunchingTests test the decisions), so the round finds nothing.
            break
        case let .event(event):
            record(event)
        case let .complete(request, result):
            record(result, of: request)
        }
    }

    private func send(_ datagram: ByteBuffer, to address: PeerAddress) {
        guard let destination = SimAddress(peerAddress: address) else { return }
        largestDatagram = max(largestDatagram, datagram.readableBytes)
        outbox.append((Array(datagram.readableBytesView), destination))
    }

    /// Answers the oldest storage request (the storage timer paces them when they take time).
    private func answerStorage() {
        guard !storageBusy, !storageQueue.isEmpty else { return }
        let (request, ticket) = storageQueue.removeFirst()
        let result = storage.execute(request, random: &random)
        core.storageCompleted(ticket, result, now: now)
        drive()
    }

    private func record(_ event: NodeEvent) {
        switch event {
        case let .memberChanged(member):
            membershipChanges.append(
                .init(
                    time: now, member: member.id, status: member.status,
                    incarnation: member.incarnation))
        case let .message(message):
            guard message.type == Self.dataType else {
                return violations.append("\(now): a message of type '\(message.type)' from \(message.from)")
            }
            if message.mode == .reliable {
                reliableReceived[message.from, default: []].append(message.body)
            } else {
                unreliableReceived[message.from, default: []].append(message.body)
            }
        case .identityConflict:
            // No simulated node shares an identity: a report is a false alarm (a restart's old boot).
            violations.append("\(now): an identity conflict reported")
        case let .sessionEnded(by, _):
            sessionEndedBy = by
        case .removedFromSession:
            removedFromSession = true
        case let .natDetected(behaviour, _):
            natDetections.append(behaviour)
        case let .waitingForFirstMember(progress):
            waitingNotices.append((now, progress))
        case let .joinedAfterWaiting(member, _, address, _):
            joinedNotices.append((now, member, address))
        case let .inviteOutOfDate(by):
            outOfDateNotices.append((now, by))
        case let .protocolGap(member, _, theirs, _):
            protocolGaps.append((now, member, theirs))
        case let .log(record):
            logged[record.message, default: 0] += 1
        case .memberForgotten, .epochChanged, .attachmentsChanged, .applicationConsumerStalled:
            break
        }
    }

    private func record(_ result: Result<NodeResult, NodeError>, of request: RequestID) {
        guard let what = pending.removeValue(forKey: request) else {
            return violations.append("\(now): command \(request) completed twice, or was never made")
        }
        guard sentMessages.contains(where: { $0.request == request }) else {
            // Not the bytes a load returns: a long run loads a lot.
            if case .success(.loaded) = result {} else { commandResults[request] = result }
            if case let .failure(error) = result { failedCommands.append("\(now): \(what): \(error)") }
            if case let .success(.left(report)) = result { leaveReports.append(report) }
            return
        }
        switch result {
        case .success: completions[request] = [:]
        case let .failure(.notDelivered(failures)): completions[request] = failures
        case let .failure(error):
            violations.append("\(now): \(what) failed as a whole: \(error)")
            completions[request] = Dictionary(
                uniqueKeysWithValues: (sentMessages.first { $0.request == request }?.targets ?? []).map {
                    ($0, .unknown)
                })
        }
    }

    /// Hands the callback's datagrams to the simulator and keeps one timer at the core's
    /// deadline, one for the script and one for the storage.
    private func finish(_ context: inout SimContext, timerDue: Bool = false) {
        drive()
        for (bytes, destination) in outbox { context.send(bytes, to: destination) }
        outbox.removeAll(keepingCapacity: true)
        for (bytes, destination) in shortLivedOutbox { context.sendShortLived(bytes, to: destination) }
        shortLivedOutbox.removeAll()
        for bytes in lanOutbox { context.multicastOnLAN(bytes) }
        lanOutbox.removeAll()
        if core.phase == .leaving {
            core.stop(now: now)
            drive()
        }
        if let deadline = core.nextDeadlineInPlace() {
            var at = deadline
            // A deadline that a tick leaves in the past fires again at once, forever (MeshNode's
            // timer would spin at 100% CPU): report it, and let time move on so the run ends.
            if deadline <= now {
                if timerDue { spins += 1 }
                if spins == Self.maxSpins, !timerSpun {
                    timerSpun = true
                    violations.append("\(now): the timer fires without pause (a deadline stays in the past)")
                }
                if spins >= Self.maxSpins { at = now + .milliseconds(100) }
            } else if timerDue {
                spins = 0
            }
            context.schedule(timer: Self.tickTimer, at: at)
        } else {
            context.cancel(timer: Self.tickTimer)
        }
        if let next = script.first { context.schedule(timer: Self.scriptTimer, at: next.time) }
        if !storageBusy, !storageQueue.isEmpty, let delay = storage.conditions.delay {
            storageBusy = true
            let span = UInt64((delay.upperBound - delay.lowerBound).nanosecondsClamped)
            let wait = delay.lowerBound + .nanoseconds(Int64(span == 0 ? 0 : random.next() % (span + 1)))
            context.schedule(timer: Self.storageTimer, at: now + wait)
        }
    }
}

extension SplitMix64 {
    /// `count` bytes: each `next()` in the machine's byte order, the last one cut short.
    mutating func bytes(_ count: Int) -> [UInt8] {
        // Written in place: simulations make files of megabytes, and an array per word made
        // their setup a measurable part of a debug test run.
        var bytes = [UInt8](repeating: 0, count: (count + 7) / 8 * 8)
        bytes.withUnsafeMutableBytes { raw in
            for offset in stride(from: 0, to: raw.count, by: 8) {
                raw.storeBytes(of: next(), toByteOffset: offset, as: UInt64.self)
            }
        }
        bytes.removeLast(bytes.count - count)
        return bytes
    }
}
