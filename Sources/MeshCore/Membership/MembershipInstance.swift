import MeshCrypto

/// SWIM membership with Lifeguard, as a pure state machine (after apple/swift-cluster-membership's
/// `SWIM.Instance` and hashicorp/memberlist). The shell feeds it frames and the time, and carries
/// out the directives it returns; `nextDeadline` says when to call `onTick` next.
///
/// Docs/PROTOCOL.md §4 describes the rules; the simulator tests in Tests/MeshCoreTests prove them.
package struct MembershipInstance: Sendable {
    package let settings: MembershipSettings
    /// Room for frames in one datagram.
    package let datagramBudget: Int
    let authority: any RecordAuthority

    package internal(set) var me: MemberRecord
    package private(set) var hasLeft = false
    var members = MemberTable()
    /// Members that are neither dead nor left, in a random order: the probe round-robin and the
    /// pool random picks come from (an array, so runs replay exactly from a seed).
    var active: [NodeID] = []
    /// Members with a clock running (suspects, and dead or left ones waiting to be forgotten),
    /// so deadlines are found without walking the whole table.
    var timed: Set<NodeID> = []
    var probeIndex = 0
    var random: SplitMix64
    var health: LocalHealth
    var gossip = GossipQueue()

    var sequence: UInt64 = 0
    var probe: ProbeState?
    var relays: [UInt64: RelayedProbe] = [:]
    var nextProbeAt: MeshInstant
    var nextGossipAt: MeshInstant
    var lastGossipAt: MeshInstant
    var nextPushPullAt: MeshInstant
    var lastPushPullAt: MeshInstant
    var nextReconnectAt: MeshInstant
    var seeds: [PeerAddress] = []
    /// Set while handling a datagram that accused us at an incarnation we already outbid.
    var staleAccuser = false
    var nextJoinAttemptAt: MeshInstant?
    /// The wait before the next try of the seeds (it doubles per try, up to the maximum).
    var joinRetryWait: Duration = .zero
    /// Where the next try starts in `seeds`, when there are more seeds than one try contacts.
    var seedCursor = 0
    /// Tries of the seeds since `join`, the first included.
    package private(set) var joinAttempts = 0
    /// The join's jitter, a stream of its own derived from the seed: drawing it from `random`
    /// would change the probe order and picks of every node that joins, not only the ones that wait.
    var joinJitter: SplitMix64
    /// Push-pulls soon after the join, the first with the member that let us in: its answer held
    /// only what fits a few times our request's size (its source address was only our claim),
    /// and updates it was still gossiping when it answered (a member that joined beside us) may
    /// have gone where we could not hear them, such as our private address before any datagram
    /// of ours proved the public one. Otherwise both would reach us only at the first periodic
    /// push-pull, 20 s or more on. `left` more follow, two disseminations apart.
    var joinFollowUp: (partner: NodeID, at: MeshInstant, left: Int)?
    /// The member whose datagram made us a member: the door that introduces us.
    package private(set) var joinedThrough: NodeID?
    /// The push-pull we wait on, if any.
    var exchange: AntiEntropyExchange?
    /// Members removed from the session (key epochs): never probed, gossiped or believed again.
    var excluded: Set<NodeID> = []
    /// Members forgotten after they died, still asked for a while (`LostMembers`).
    package internal(set) var lost = LostMembers()
    /// Senders we did not know, and when we last asked each for its state (a few, for a while).
    var askedStrangers: [NodeID: MeshInstant] = [:]
    /// When we last sent each member our whole state on its request: a member asking again and
    /// again (a flood of joins) gets one answer per half join retry interval.
    package private(set) var answeredSyncs: [NodeID: MeshInstant] = [:]
    /// Digests answered per member in the current window (anti-entropy): a view's worth of
    /// ranges, and one more, per half join retry interval.
    var digestBudgets: [NodeID: (windowStart: MeshInstant, answered: Int)] = [:]
    /// When each member last sent us an authenticated datagram of any kind.
    var lastHeard: [NodeID: MeshInstant] = [:]
    /// How often each other boot of our identity made us refute (a live twin never stops).
    var refutationsByBoot: [UInt64: Int] = [:]
    /// When a refused record was last reported (`sessionFull`).
    var sessionFullSaidAt: MeshInstant?
    package internal(set) var counters = MembershipCounters()

    package init(
        record: MemberRecord, authority: some RecordAuthority, settings: MembershipSettings,
        datagramBudget: Int, seed: UInt64, now: MeshInstant
    ) {
        self.settings = settings
        self.datagramBudget = datagramBudget
        self.authority = authority
        self.me = record.signed(by: authority)
        self.random = SplitMix64(seed: seed)
        self.joinJitter = SplitMix64(seed: seed ^ 0x6A09_E667_F3BC_C908)
        self.health = LocalHealth(maximum: settings.maxLocalHealth)
        self.nextProbeAt = now + settings.probeInterval
        self.nextGossipAt = now + settings.gossipInterval
        self.lastGossipAt = now
        self.nextPushPullAt = now + settings.pushPullInterval * 0.75
        self.lastPushPullAt = now
        self.nextReconnectAt = now + settings.reconnectInterval
    }

    // MARK: what the shell reads

    package var localID: NodeID { me.id }
    package var localHealth: LocalHealth { health }

    /// Every known member, this node first, the rest by id.
    package var view: [Member] {
        [selfMember] + members.values.sorted { $0.id < $1.id }
    }

    package func member(_ id: NodeID) -> Member? {
        id == me.id ? selfMember : members[id]
    }

    var selfMember: Member {
        Member(
            record: me, status: hasLeft ? .left : .alive, incarnation: me.incarnation,
            lastChange: .zero, rtt: nil, suspicion: nil)
    }

    /// Members that are not dead and have not left, this node included.
    package var activeCount: Int { active.count + (hasLeft ? 0 : 1) }

    package var pendingGossip: Int { gossip.count }

    /// The probe period after Lifeguard's stretching.
    package var probePeriod: Duration { settings.probeInterval * health.multiplier }

    /// When `onTick` must run next.
    package var nextDeadline: MeshInstant {
        var deadline = min(nextProbeAt, nextGossipAt, nextPushPullAt, nextReconnectAt)
        if let probe { deadline = min(deadline, probe.indirectSent ? probe.endAt : probe.indirectAt) }
        if let join = nextJoinAttemptAt { deadline = min(deadline, join) }
        if let followUp = joinFollowUp { deadline = min(deadline, followUp.at) }
        if let exchange { deadline = min(deadline, exchange.checkAt) }
        for relay in relays.values { deadline = min(deadline, relay.nackAt) }
        for id in timed {
            guard let member = members[id] else { continue }
            if let suspicion = member.suspicion {
                deadline = min(deadline, suspicion.verifyAt ?? suspicion.deadline)
            }
            if member.status.isGone { deadline = min(deadline, member.lastChange + settings.forgetAfter) }
        }
        return deadline
    }

    // MARK: joining and leaving

    /// Contacts `addresses` with our record and a request for their member list, and keeps
    /// retrying until some member answers: first after `joinRetryInterval`, then each wait
    /// twice the last, up to `joinRetryMaximum`, each cut by a random share (`joinRetryJitter`).
    package mutating func join(_ addresses: [PeerAddress], now: MeshInstant) -> [MembershipDirective] {
        var unique = Set<PeerAddress>()
        seeds = addresses.filter { !me.addresses.contains($0) && unique.insert($0).inserted }
        guard !seeds.isEmpty else { return [] }
        seedCursor = 0
        joinAttempts = 0
        joinRetryWait = settings.joinRetryInterval
        return tryJoining(now: now)
    }

    /// Another door while joining (a member heard on the LAN): asked at once, then tried with
    /// the others. At most `maxJoinSeeds` in all.
    package mutating func addJoinSeed(_ address: PeerAddress, now: MeshInstant) -> [MembershipDirective] {
        guard isJoining, !me.addresses.contains(address), !seeds.contains(address),
            seeds.count < Self.maxJoinSeeds
        else { return [] }
        seeds.append(address)
        return [.send(frames: [.syncRequest(SyncRequest(isJoin: true)), .alive(me)], recipient: nil, address: address)]
    }

    static let maxJoinSeeds = 64

    /// Whether this node still waits for a first member to answer its join.
    package var isJoining: Bool { nextJoinAttemptAt != nil }

    /// The addresses a join goes to (empty when there was nobody to join through).
    package var joinSeeds: [PeerAddress] { seeds }

    /// One try of the seeds (at most `joinSeedsPerAttempt` of them, the next ones in turn),
    /// and the time of the next.
    mutating func tryJoining(now: MeshInstant) -> [MembershipDirective] {
        joinAttempts += 1
        let wait = joinRetryWait
        joinRetryWait = min(joinRetryWait * 2, max(settings.joinRetryMaximum, settings.joinRetryInterval))
        let cut = settings.joinRetryJitter.clampedShare * Double(joinJitter.next() >> 11) * 0x1p-53
        nextJoinAttemptAt = now + wait * (1 - cut)
        let count = min(seeds.count, max(1, settings.joinSeedsPerAttempt))
        let chosen = (0..<count).map { seeds[(seedCursor + $0) % seeds.count] }
        seedCursor = (seedCursor + count) % seeds.count
        return chosen.map {
            .send(frames: [.syncRequest(SyncRequest(isJoin: true)), .alive(me)], recipient: nil, address: $0)
        }
    }

    /// Announces a signed departure to several members at once (and through gossip).
    package mutating func leave(now: MeshInstant) -> [MembershipDirective] {
        guard !hasLeft else { return [] }
        hasLeft = true
        var departure = Departure(member: me.id, incarnation: me.incarnation)
        departure.signature = authority.sign(departure.signedBytes)
        gossip.enqueue(.left(departure), about: me.id)
        let targets = pickRandom(settings.gossipFanout + settings.indirectProbes, excluding: [])
        return targets.compactMap { id in
            members[id]?.address.map { .send(frames: [.left(departure)], recipient: id, address: $0) }
        }
    }

    /// Members lost before a restart (`RememberedMembers.lost`), asked again as if lost now.
    package mutating func restoreLost(
        _ entries: [(id: NodeID, addresses: [PeerAddress], age: Duration)], now: MeshInstant
    ) {
        for entry in entries
        where entry.id != me.id && members[entry.id] == nil && !excluded.contains(entry.id)
            && entry.age < settings.lostMemberRetention
        {
            lost.add(
                entry.id, addresses: entry.addresses, now: now, firstWait: settings.reconnectInterval, age: entry.age)
        }
    }

    /// Starts from a known view without a join exchange: for restarts and large simulations.
    package mutating func assume(_ records: [MemberRecord], now: MeshInstant) {
        assume(MemberTable(assuming: records, now: now))
    }

    /// Starts from a view that other nodes may share (a large simulation's converged mesh): a node
    /// that knew nobody keeps the table as it is, shared until written, and holds only what it
    /// changes; one that knew members already adds those it lacks.
    package mutating func assume(_ table: MemberTable) {
        guard members.isEmpty else {
            for member in table.values.sorted(by: { $0.id < $1.id })
            where member.id != me.id && members[member.id] == nil {
                guard member.status.isGone || hasRoomForMember else { continue }
                add(member)
            }
            return
        }
        members = table
        members[me.id] = nil
        active = members.activeIDs
        active.shuffle(using: &random)
        probeIndex = 0
        // Suspects, and the dead and left waiting to be forgotten, have their clocks running.
        timed.formUnion(members.unsettledIDs)
    }

    /// Removes members from the session for good: they show as left and nothing said by or
    /// about them is believed afterwards (their datagrams cannot open any more anyway).
    package mutating func exclude(_ ids: Set<NodeID>, now: MeshInstant) -> [MembershipDirective] {
        var out: [MembershipDirective] = []
        for id in ids.sorted() where id != me.id && excluded.insert(id).inserted {
            gossip.remove(about: id)
            lost.remove(id)
            if let member = members[id], member.status != .left {
                markGone(member, status: .left, incarnation: member.incarnation, now: now, into: &out)
            }
        }
        return out
    }

    package func isExcluded(_ id: NodeID) -> Bool { excluded.contains(id) }

    /// Past `maxExcluded`, keeps excluded only `ids` (every member the key epochs hold removed, a
    /// bounded set): one removed in an epoch forgotten long ago goes, so that removals without end
    /// do not grow it. Not below: a member a losing rotation excluded is taken back by `readmit`.
    package mutating func keepExcluded(within ids: Set<NodeID>) {
        guard excluded.count > Self.maxExcluded else { return }
        excluded.formIntersection(ids)
    }

    /// Above every member the key epochs can hold removed (`KeyEpochs`).
    package static let maxExcluded = 4_096

    /// Takes back members a rotation excluded when a competing rotation replaced it (two
    /// removals at once): members again, alive as they were, and probing finds out whether they
    /// still are. Members the winner removes too stay excluded (the caller passes only the rest).
    package mutating func readmit(_ ids: Set<NodeID>, now: MeshInstant) -> [MembershipDirective] {
        var out: [MembershipDirective] = []
        for id in ids.sorted() where excluded.remove(id) != nil {
            guard var member = members[id], member.status == .left else { continue }
            member.status = .alive
            member.suspicion = nil
            member.lastChange = now
            members[id] = member
            timed.remove(id)
            activate(id)
            out.append(.memberChanged(member))
        }
        return out
    }

    // MARK: input

    /// `pairwise`: the datagram was sealed with the sender's pairwise key for our boot, so only
    /// we could open it and only the sender could have made it (a probe or ack without a target).
    /// `answerLimit`: at most this many bytes of frames answer a state request (the node gives a
    /// few times the request's own size: the source address is the request's claim, not a proof),
    /// and a probe too unless `sourceProven` (the address is where the sender's own datagrams
    /// came from before): its ack carries gossip, a datagram's worth.
    package mutating func onFrames(
        _ frames: [Frame], from sender: NodeID, address: PeerAddress,
        now: MeshInstant, pairwise: Bool = false, answerLimit: Int? = nil, sourceProven: Bool = true
    ) -> [MembershipDirective] {
        var out: [MembershipDirective] = []
        guard !excluded.contains(sender) else { return out }
        let news = gossip.updatesEnqueued
        defer { if gossip.updatesEnqueued != news { hastenGossip(now: now) } }
        staleAccuser = false
        // Updates first, so an answer to a probe in the same datagram already carries what
        // they changed (a refutation, most of all).
        for frame in frames where !excluded.contains(frame.membershipSubject ?? sender) {
            switch frame {
            case let .alive(record): mergeAlive(record, now: now, into: &out)
            case let .suspect(accusation): mergeSuspect(accusation, now: now, into: &out)
            case let .dead(accusation): mergeDead(accusation, now: now, into: &out)
            case let .left(departure): mergeLeft(departure, now: now, into: &out)
            default: break
            }
        }
        // We are in once we know a member. Not merely once someone wrote to us: a member that
        // heard of us by gossip probes us, and if the answer to our join (the member list) was
        // lost, we would stop asking and learn the members only from others' push-pull.
        if nextJoinAttemptAt != nil, sender != me.id, !members.isEmpty {
            nextJoinAttemptAt = nil
            // The first at once (the answer's rest), the last once what the member was gossiping
            // then has been sent as often as it will be.
            joinFollowUp = (sender, now + settings.gossipInterval * 2, 1)
            joinedThrough = sender
        }
        var digestTaken = false
        var strangerAck: ProbeAck?
        for frame in frames {
            switch frame {
            case let .probe(probe):
                // A probe without a target is only for whoever can open it.
                guard probe.target ?? (pairwise ? me.id : nil) == me.id else { continue }
                if members[sender] == nil, !hasLeft {
                    // A stranger's ack goes with our ask (below), one datagram without gossip:
                    // two would take more than three times a bare probe's size.
                    strangerAck = ProbeAck(sequence: probe.sequence, target: me.id)
                } else {
                    onProbe(
                        probe, from: sender, address: address, pairwise: pairwise,
                        limit: sourceProven ? nil : answerLimit, into: &out)
                }
            case let .probeAck(ack):
                // Without a target only pairwise, where it is the sender's own; a pairwise ack
                // naming someone else is no ack (an honest one names nobody there).
                guard let target = ack.target ?? (pairwise ? sender : nil), !pairwise || target == sender else {
                    continue
                }
                onAck(sequence: ack.sequence, target: target, from: sender, pairwise: pairwise, now: now, into: &out)
            case let .probeNack(nack):
                if probe?.sequence == nack.sequence, probe?.target == nack.target { probe?.nacksReceived += 1 }
            case let .probeRequest(request):
                onProbeRequest(request, from: sender, address: address, now: now, into: &out)
            case .syncRequest:
                // A stranger whose record found no room is not answered: it keeps asking, as a
                // joiner nobody answers does, instead of taking itself for a member.
                guard members[sender] != nil || hasRoomForMember else { continue }
                answerSync(from: sender, address: address, limit: answerLimit, now: now, into: &out)
            case let .stateDigest(digest) where !digestTaken:
                // One digest a datagram, as we send them: more would only multiply the answers.
                digestTaken = true
                answerDigest(digest, from: sender, address: address, now: now, into: &out)
            default: break
            }
        }
        let unprovenLimit = sourceProven ? nil : answerLimit
        // The sender still believes an old rumour about us: answer it with our current record,
        // where its own datagrams came from (elsewhere gossip carries the refutation).
        if staleAccuser, unprovenLimit == nil, sender != me.id, !hasLeft {
            out.append(.send(frames: [.alive(me)], recipient: sender, address: address))
        }
        // A stranger's ask and ack stay within three times what came, as a join's answer does.
        let asked = askIfStranger(
            sender, address: address, now: now, ack: strangerAck, limit: unprovenLimit.map { $0 * 3 / 2 },
            into: &out)
        if !asked, let strangerAck {
            out.append(.send(frames: [.probeAck(strangerAck)], recipient: sender, address: address))
        }
        heard(from: sender, now: now)
        return out
    }

    /// An authenticated datagram from `sender`, of any kind. A probe whose target we heard from
    /// during it, or in the probe period before it, does not make the target suspect: the member
    /// is up, and a backlog on its side (a flood it is working through) only delays its acks.
    /// (Hello datagrams in its name can be forged by members, as acks can; SECURITY.md.)
    package mutating func heard(from sender: NodeID, now: MeshInstant) {
        guard members[sender] != nil else { return }
        lastHeard[sender] = now
    }

    /// Whether `id` was heard from after `instant`, or at most `slack` before it.
    func heard(_ id: NodeID, after instant: MeshInstant, slack: Duration) -> Bool {
        lastHeard[id].map { $0 + slack >= instant } ?? false
    }

    mutating func answerSync(
        from sender: NodeID, address: PeerAddress, limit: Int?, now: MeshInstant,
        into out: inout [MembershipDirective]
    ) {
        let spacing = settings.joinRetryInterval * 0.5
        if let last = answeredSyncs[sender], now < last + spacing { return }
        // The sender names itself: made-up ids would each open a window. Past the bound, no more
        // answers until windows close (an honest joiner tries again).
        if answeredSyncs.count >= Self.maxSyncWindows {
            answeredSyncs = answeredSyncs.filter { now < $0.value + spacing }
            guard answeredSyncs.count < Self.maxSyncWindows else { return }
        }
        answeredSyncs[sender] = now
        out += stateTransfer(to: sender, address: address, limit: limit)
    }

    package static let maxSyncWindows = 256

    /// A member we do not know wrote to us: the answer to our join was lost, or its record's gossip
    /// ended before we came. It knows us (it probes us), we would learn of it only at the next
    /// push-pull: ask it for its state, which starts with its own record, with `ack` (its probe's)
    /// beside. Once per member per join retry interval, and for a bounded number of strangers at
    /// once. Whether it asked.
    @discardableResult
    mutating func askIfStranger(
        _ sender: NodeID, address: PeerAddress, now: MeshInstant, ack: ProbeAck? = nil, limit: Int? = nil,
        into out: inout [MembershipDirective]
    ) -> Bool {
        guard sender != me.id, members[sender] == nil, !excluded.contains(sender), !hasLeft, hasRoomForMember
        else { return false }
        if let asked = askedStrangers[sender], now < asked + settings.joinRetryInterval { return false }
        let frames: [Frame] =
            (ack.map { [.probeAck($0)] } ?? []) + [.syncRequest(SyncRequest(isJoin: false)), .alive(me)]
        if let limit, frames.reduce(0, { $0 + FrameCodec.encodedLength(of: $1) }) > limit { return false }
        if askedStrangers.count >= Self.maxStrangersAsked {
            askedStrangers = askedStrangers.filter { now < $0.value + settings.joinRetryInterval }
            guard askedStrangers.count < Self.maxStrangersAsked else { return false }
        }
        askedStrangers[sender] = now
        out.append(.send(frames: frames, recipient: sender, address: address))
        return true
    }

    static let maxStrangersAsked = 16

    package mutating func onTick(now: MeshInstant) -> [MembershipDirective] {
        var out: [MembershipDirective] = []
        guard !hasLeft else { return out }
        let news = gossip.updatesEnqueued
        defer { if gossip.updatesEnqueued != news { hastenGossip(now: now) } }
        if let at = nextJoinAttemptAt, now >= at {
            out += tryJoining(now: now)
        }
        if let followUp = joinFollowUp, now >= followUp.at {
            let dissemination = settings.gossipInterval * Double(retransmitLimit + 2)
            joinFollowUp = followUp.left > 0 ? (followUp.partner, now + dissemination * 2, followUp.left - 1) : nil
            // The member that let us in, unless it is gone or was a stranger: then any live one.
            let known = members[followUp.partner].flatMap { $0.status.isGone ? nil : $0.id }
            let first = known
            if let partner = first ?? pickRandom(1, excluding: []).first, let address = members[partner]?.address {
                startExchange(with: partner, address: address, now: now, into: &out)
            }
        }
        checkExchange(now: now, into: &out)
        expireRelays(now: now, into: &out)
        verifySuspicions(now: now, into: &out)
        expireSuspicions(now: now, into: &out)
        advanceProbe(now: now, into: &out)
        if now >= nextGossipAt {
            lastGossipAt = now
            gossipRound(into: &out)
            nextGossipAt = now + (freshGossipSpacing ?? settings.gossipInterval)
        }
        if now >= nextPushPullAt {
            // The interval is computed when it is due, from the cluster's size now (it may have
            // grown since), and jittered so that nodes started together do not exchange together.
            let due = lastPushPullAt + pushPullInterval()
            if now >= due {
                lastPushPullAt = now
                nextPushPullAt = now + settings.pushPullInterval * 0.75
                if let partner = pickRandom(1, excluding: []).first, let address = members[partner]?.address {
                    startExchange(with: partner, address: address, now: now, into: &out)
                }
            } else {
                nextPushPullAt = due
            }
        }
        if now >= nextReconnectAt {
            nextReconnectAt = now + settings.reconnectInterval
            reconnect(now: now, into: &out)
        }
        forgetGone(now: now, into: &out)
        return out
    }

    /// Serf's reconnect: offer our state to one random dead member. If it was only cut off (a
    /// partition, a paused process), it learns it was declared dead, refutes, and both sides of a
    /// healed partition merge again. A node that holds every other member dead was most likely
    /// the one cut off (its own link went down), and some of the dead may be unreachable from it
    /// (behind their NATs): it offers to a few at once.
    mutating func reconnect(now: MeshInstant, into out: inout [MembershipDirective]) {
        var dead = timed.filter { members[$0]?.status == .dead }.sorted()
        let count = active.isEmpty ? Self.isolatedReconnectFanout : 1
        for _ in 0..<min(count, dead.count) {
            let index = Int(random.next() % UInt64(dead.count))
            dead.swapAt(index, dead.count - 1)
            let id = dead.removeLast()
            guard let address = members[id]?.address else { continue }
            out += digest(to: id, address: address)
        }
        // Members already forgotten know nothing of us either (they forgot us as long ago), and
        // answer no digest from a stranger: they are asked as a joiner asks, and answer with
        // their members (as they answer any join, within its size until our address is proven).
        let due = lost.takeDue(
            count: count, now: now, retention: settings.lostMemberRetention,
            maximumWait: max(settings.joinRetryMaximum, settings.reconnectInterval))
        for (_, addresses) in due {
            for address in addresses where !me.addresses.contains(address) {
                out.append(
                    .send(
                        frames: [.syncRequest(SyncRequest(isJoin: true)), .alive(me)], recipient: nil, address: address)
                )
            }
        }
    }

    /// How many dead members an isolated node offers its state to each reconnect interval.
    static let isolatedReconnectFanout = 3

    // MARK: the member table

    mutating func add(_ member: Member) {
        members[member.id] = member
        lost.remove(member.id)
        if !member.status.isGone { activate(member.id) }
    }

    mutating func activate(_ id: NodeID) {
        guard !active.contains(id) else { return }
        // A random place ahead of the probe cursor, so a newcomer is probed within this round.
        let lower = min(probeIndex, active.count)
        let position = lower + Int(random.next() % UInt64(active.count - lower + 1))
        active.insert(id, at: position)
    }

    mutating func deactivate(_ id: NodeID) {
        guard let index = active.firstIndex(of: id) else { return }
        active.remove(at: index)
        if index < probeIndex { probeIndex -= 1 }
    }

    mutating func forgetGone(now: MeshInstant, into out: inout [MembershipDirective]) {
        let forgotten = timed.compactMap { members[$0] }
            .filter { $0.status.isGone && now >= $0.lastChange + settings.forgetAfter }
            .map(\.id).sorted()
        for id in forgotten {
            if let member = members[id], member.status == .dead, !excluded.contains(id) {
                lost.add(id, addresses: member.record.addresses, now: now, firstWait: settings.reconnectInterval)
            }
            members[id] = nil
            lastHeard[id] = nil
            timed.remove(id)
            gossip.remove(about: id)
            out.append(.memberForgotten(id))
        }
    }

    /// Up to `count` distinct random active members, never this node or `excluded`. Drawn at
    /// random from the whole list when it is much longer than what is asked (a gossip round must
    /// not cost O(N) in a 10,000-node mesh); chosen among the candidates otherwise.
    mutating func pickRandom(_ count: Int, excluding excluded: Set<NodeID>) -> [NodeID] {
        if active.count > 8 * (count + excluded.count) {
            var picked: [NodeID] = []
            for _ in 0..<(4 * count + 8) where picked.count < count {
                let id = active[Int(random.next() % UInt64(active.count))]
                if !excluded.contains(id), !picked.contains(id) { picked.append(id) }
            }
            return picked
        }
        var candidates = active.filter { !excluded.contains($0) }
        var picked: [NodeID] = []
        while picked.count < count, !candidates.isEmpty {
            let index = Int(random.next() % UInt64(candidates.count))
            candidates.swapAt(index, candidates.count - 1)
            picked.append(candidates.removeLast())
        }
        return picked
    }
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
