import MeshCrypto

/// SWIM membership with Lifeguard, as a pure state machine (after apple/swift-cluster-membership's
/// `SWIM.Instance` and hashicorp/memberlist). The shell feeds it frames and the time, and carries
/// out the directives it returns; `nextDeadline` says when to call `onTick` next.
///
/// Docs/PROTOCOL.md §4 describes the rules; the simulator tests in Tests/MeshCoreTests prove them.
public struct MembershipInstance: Sendable {
    public let settings: MembershipSettings
    /// Room for frames in one datagram.
    public let datagramBudget: Int
    private let authority: any RecordAuthority

    public private(set) var me: MemberRecord
    public private(set) var hasLeft = false
    var members = MemberTable()
    /// Members that are neither dead nor left, in a random order: the probe round-robin and the
    /// pool random picks come from (an array, so runs replay exactly from a seed).
    private var active: [NodeID] = []
    /// Members with a clock running (suspects, and dead or left ones waiting to be forgotten),
    /// so deadlines are found without walking the whole table.
    private var timed: Set<NodeID> = []
    private var probeIndex = 0
    var random: SplitMix64
    private var health: LocalHealth
    private var gossip = GossipQueue()

    private var sequence: UInt64 = 0
    private var probe: ProbeState?
    private var relays: [UInt64: RelayedProbe] = [:]
    private var nextProbeAt: MeshInstant
    private var nextGossipAt: MeshInstant
    private var lastGossipAt: MeshInstant
    private var nextPushPullAt: MeshInstant
    private var lastPushPullAt: MeshInstant
    private var nextReconnectAt: MeshInstant
    private var seeds: [PeerAddress] = []
    /// Set while handling a datagram that accused us at an incarnation we already outbid.
    private var staleAccuser = false
    private var nextJoinAttemptAt: MeshInstant?
    /// The wait before the next try of the seeds (it doubles per try, up to the maximum).
    private var joinRetryWait: Duration = .zero
    /// Where the next try starts in `seeds`, when there are more seeds than one try contacts.
    private var seedCursor = 0
    /// Tries of the seeds since `join`, the first included.
    public private(set) var joinAttempts = 0
    /// The join's jitter, a stream of its own derived from the seed: drawing it from `random`
    /// would change the probe order and picks of every node that joins, not only the ones that wait.
    private var joinJitter: SplitMix64
    /// Push-pulls soon after the join, the first with the member that let us in: its answer held
    /// only what fits a few times our request's size (its source address was only our claim),
    /// and updates it was still gossiping when it answered (a member that joined beside us) may
    /// have gone where we could not hear them, such as our private address before any datagram
    /// of ours proved the public one. Otherwise both would reach us only at the first periodic
    /// push-pull, 20 s or more on. `left` more follow, two disseminations apart.
    private var joinFollowUp: (partner: NodeID, at: MeshInstant, left: Int)?
    /// Members removed from the session (key epochs): never probed, gossiped or believed again.
    private var excluded: Set<NodeID> = []
    /// Senders we did not know, and when we last asked each for its state (a few, for a while).
    private var askedStrangers: [NodeID: MeshInstant] = [:]
    /// When we last sent each member our whole state on its request: a member asking again and
    /// again (a flood of joins) gets one answer per half join retry interval.
    private var answeredSyncs: [NodeID: MeshInstant] = [:]
    /// Digests answered per member in the current window (anti-entropy): a view's worth of
    /// ranges, and one more, per half join retry interval.
    var digestBudgets: [NodeID: (windowStart: MeshInstant, answered: Int)] = [:]
    /// When each member last sent us an authenticated datagram of any kind.
    private var lastHeard: [NodeID: MeshInstant] = [:]
    /// How often each other boot of our identity made us refute (a live twin never stops).
    private var refutationsByBoot: [UInt64: Int] = [:]
    public internal(set) var counters = MembershipCounters()

    public init(record: MemberRecord, authority: some RecordAuthority, settings: MembershipSettings,
                datagramBudget: Int, seed: UInt64, now: MeshInstant) {
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

    public var localID: NodeID { me.id }
    public var localHealth: LocalHealth { health }

    /// Every known member, this node first, the rest by id.
    public var view: [Member] {
        [selfMember] + members.values.sorted { $0.id < $1.id }
    }

    public func member(_ id: NodeID) -> Member? {
        id == me.id ? selfMember : members[id]
    }

    private var selfMember: Member {
        Member(record: me, status: hasLeft ? .left : .alive, incarnation: me.incarnation,
               lastChange: .zero, rtt: nil, suspicion: nil)
    }

    /// Members that are not dead and have not left, this node included.
    public var activeCount: Int { active.count + (hasLeft ? 0 : 1) }

    public var pendingGossip: Int { gossip.count }

    /// The probe period after Lifeguard's stretching.
    public var probePeriod: Duration { settings.probeInterval * health.multiplier }

    /// When `onTick` must run next.
    public var nextDeadline: MeshInstant {
        var deadline = min(nextProbeAt, nextGossipAt, nextPushPullAt, nextReconnectAt)
        if let probe { deadline = min(deadline, probe.indirectSent ? probe.endAt : probe.indirectAt) }
        if let join = nextJoinAttemptAt { deadline = min(deadline, join) }
        if let followUp = joinFollowUp { deadline = min(deadline, followUp.at) }
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
    public mutating func join(_ addresses: [PeerAddress], now: MeshInstant) -> [MembershipDirective] {
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
    public mutating func addJoinSeed(_ address: PeerAddress, now: MeshInstant) -> [MembershipDirective] {
        guard isJoining, !me.addresses.contains(address), !seeds.contains(address),
              seeds.count < Self.maxJoinSeeds else { return [] }
        seeds.append(address)
        return [.send(frames: [.syncRequest(SyncRequest(isJoin: true)), .alive(me)], recipient: nil, address: address)]
    }

    static let maxJoinSeeds = 64

    /// Whether this node still waits for a first member to answer its join.
    public var isJoining: Bool { nextJoinAttemptAt != nil }

    /// The addresses a join goes to (empty when there was nobody to join through).
    public var joinSeeds: [PeerAddress] { seeds }

    /// One try of the seeds (at most `joinSeedsPerAttempt` of them, the next ones in turn),
    /// and the time of the next.
    private mutating func tryJoining(now: MeshInstant) -> [MembershipDirective] {
        joinAttempts += 1
        let wait = joinRetryWait
        joinRetryWait = min(joinRetryWait * 2, max(settings.joinRetryMaximum, settings.joinRetryInterval))
        let cut = settings.joinRetryJitter.clampedShare * Double(joinJitter.next() >> 11) * 0x1p-53
        nextJoinAttemptAt = now + wait * (1 - cut)
        let count = min(seeds.count, max(1, settings.joinSeedsPerAttempt))
        let chosen = (0..<count).map { seeds[(seedCursor + $0) % seeds.count] }
        seedCursor = (seedCursor + count) % seeds.count
        return chosen.map { .send(frames: [.syncRequest(SyncRequest(isJoin: true)), .alive(me)], recipient: nil, address: $0) }
    }

    /// Announces a signed departure to several members at once (and through gossip).
    public mutating func leave(now: MeshInstant) -> [MembershipDirective] {
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

    /// Starts from a known view without a join exchange: for restarts and large simulations.
    public mutating func assume(_ records: [MemberRecord], now: MeshInstant) {
        assume(MemberTable(assuming: records, now: now))
    }

    /// Starts from a view that other nodes may share (a large simulation's converged mesh): a node
    /// that knew nobody keeps the table as it is, shared until written, and holds only what it
    /// changes; one that knew members already adds those it lacks.
    public mutating func assume(_ table: MemberTable) {
        guard members.isEmpty else {
            for member in table.values.sorted(by: { $0.id < $1.id }) where member.id != me.id && members[member.id] == nil {
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
    public mutating func exclude(_ ids: Set<NodeID>, now: MeshInstant) -> [MembershipDirective] {
        var out: [MembershipDirective] = []
        for id in ids.sorted() where id != me.id && excluded.insert(id).inserted {
            gossip.remove(about: id)
            if let member = members[id], member.status != .left {
                markGone(member, status: .left, incarnation: member.incarnation, now: now, into: &out)
            }
        }
        return out
    }

    public func isExcluded(_ id: NodeID) -> Bool { excluded.contains(id) }

    /// Takes back members a rotation excluded when a competing rotation replaced it (two
    /// removals at once): members again, alive as they were, and probing finds out whether they
    /// still are. Members the winner removes too stay excluded (the caller passes only the rest).
    public mutating func readmit(_ ids: Set<NodeID>, now: MeshInstant) -> [MembershipDirective] {
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
    /// few times the request's own size: the source address is the request's claim, not a proof).
    public mutating func onFrames(_ frames: [Frame], from sender: NodeID, address: PeerAddress,
                                  now: MeshInstant, pairwise: Bool = false, answerLimit: Int? = nil) -> [MembershipDirective] {
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
        }
        var digestTaken = false
        for frame in frames {
            switch frame {
            case let .probe(probe):
                // A probe without a target is only for whoever can open it.
                guard probe.target ?? (pairwise ? me.id : nil) == me.id else { continue }
                onProbe(probe, from: sender, address: address, pairwise: pairwise, into: &out)
            case let .probeAck(ack):
                // Without a target only pairwise, where it is the sender's own; a pairwise ack
                // naming someone else is no ack (an honest one names nobody there).
                guard let target = ack.target ?? (pairwise ? sender : nil), !pairwise || target == sender else { continue }
                onAck(sequence: ack.sequence, target: target, from: sender, pairwise: pairwise, now: now, into: &out)
            case let .probeNack(nack):
                if probe?.sequence == nack.sequence, probe?.target == nack.target { probe?.nacksReceived += 1 }
            case let .probeRequest(request): onProbeRequest(request, from: sender, address: address, now: now, into: &out)
            case .syncRequest: answerSync(from: sender, address: address, limit: answerLimit, now: now, into: &out)
            case let .stateDigest(digest) where !digestTaken:
                // One digest a datagram, as we send them: more would only multiply the answers.
                digestTaken = true
                answerDigest(digest, from: sender, address: address, now: now, into: &out)
            default: break
            }
        }
        // The sender still believes an old rumour about us: answer it with our current record.
        if staleAccuser, sender != me.id, !hasLeft {
            out.append(.send(frames: [.alive(me)], recipient: sender, address: address))
        }
        askIfStranger(sender, address: address, now: now, into: &out)
        heard(from: sender, now: now)
        return out
    }

    /// An authenticated datagram from `sender`, of any kind. A probe whose target we heard from
    /// during it, or in the probe period before it, does not make the target suspect: the member
    /// is up, and a backlog on its side (a flood it is working through) only delays its acks.
    /// (Hello datagrams in its name can be forged by members, as acks can; SECURITY.md.)
    public mutating func heard(from sender: NodeID, now: MeshInstant) {
        guard members[sender] != nil else { return }
        lastHeard[sender] = now
    }

    /// Whether `id` was heard from after `instant`, or at most `slack` before it.
    private func heard(_ id: NodeID, after instant: MeshInstant, slack: Duration) -> Bool {
        lastHeard[id].map { $0 + slack >= instant } ?? false
    }

    private mutating func answerSync(from sender: NodeID, address: PeerAddress, limit: Int?, now: MeshInstant,
                                     into out: inout [MembershipDirective]) {
        let spacing = settings.joinRetryInterval * 0.5
        if let last = answeredSyncs[sender], now < last + spacing { return }
        if answeredSyncs.count >= 256 { answeredSyncs = answeredSyncs.filter { now < $0.value + spacing } }
        answeredSyncs[sender] = now
        out += stateTransfer(to: sender, address: address, limit: limit)
    }

    /// A member we do not know wrote to us: the answer to our join was lost, or its record's gossip
    /// ended before we came. It knows us (it probes us), we would learn of it only at the next
    /// push-pull: ask it for its state, which starts with its own record. Once per member per
    /// join retry interval, and for a bounded number of strangers at once.
    private mutating func askIfStranger(_ sender: NodeID, address: PeerAddress, now: MeshInstant,
                                        into out: inout [MembershipDirective]) {
        guard sender != me.id, members[sender] == nil, !excluded.contains(sender), !hasLeft else { return }
        if let asked = askedStrangers[sender], now < asked + settings.joinRetryInterval { return }
        if askedStrangers.count >= Self.maxStrangersAsked {
            askedStrangers = askedStrangers.filter { now < $0.value + settings.joinRetryInterval }
            guard askedStrangers.count < Self.maxStrangersAsked else { return }
        }
        askedStrangers[sender] = now
        out.append(.send(frames: [.syncRequest(SyncRequest(isJoin: false)), .alive(me)], recipient: sender, address: address))
    }

    static let maxStrangersAsked = 16

    public mutating func onTick(now: MeshInstant) -> [MembershipDirective] {
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
                out.append(summary(to: partner, address: address))
            }
        }
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
                    out.append(summary(to: partner, address: address))
                }
            } else {
                nextPushPullAt = due
            }
        }
        if now >= nextReconnectAt {
            nextReconnectAt = now + settings.reconnectInterval
            reconnect(into: &out)
        }
        forgetGone(now: now, into: &out)
        return out
    }

    /// Serf's reconnect: offer our state to one random dead member. If it was only cut off (a
    /// partition, a paused process), it learns it was declared dead, refutes, and both sides of a
    /// healed partition merge again.
    private mutating func reconnect(into out: inout [MembershipDirective]) {
        let dead = timed.filter { members[$0]?.status == .dead }.sorted()
        guard !dead.isEmpty else { return }
        let id = dead[Int(random.next() % UInt64(dead.count))]
        guard let address = members[id]?.address else { return }
        out += digest(to: id, address: address)
    }

    // MARK: merging updates

    private mutating func mergeAlive(_ record: MemberRecord, now: MeshInstant, into out: inout [MembershipDirective]) {
        if record.id == me.id {
            // Someone holds a record of ours we did not sign this boot: an earlier boot's. Outbid it
            // (only one we did sign: a forged one must not move our incarnation).
            if record.incarnation > me.incarnation || (record.incarnation == me.incarnation && record != me),
               record.hasValidSignature(authority) {
                // Only a record above ours counts: a twin answers each of ours with a higher one,
                // while a dead boot's stale records mostly meet or trail what we already signed.
                let outbidUs = record.incarnation > me.incarnation
                refute(above: record.incarnation)
                if outbidUs, record.bootID != me.bootID { countRefutation(by: record, into: &out) }
            }
            return
        }
        if let existing = members[record.id] {
            guard record.incarnation > existing.incarnation else { return }
            guard record.hasValidSignature(authority) else { return }
            // Another boot outbid the one we knew, from elsewhere: the old boot is told at once
            // rather than by gossip, which now goes to the new address. A restart leaves nobody
            // there; a live twin (a copied data dir) refutes, and both find the conflict in a
            // few round trips instead of when gossip happens to pass by the other one.
            if record.bootID != existing.record.bootID, let old = existing.address, !record.addresses.contains(old) {
                out.append(.send(frames: [.alive(record)], recipient: record.id, address: old))
            }
            var member = existing
            member.record = record
            member.incarnation = record.incarnation
            member.suspicion = nil
            let wasGone = member.status.isGone
            member.status = .alive
            member.lastChange = now
            members[record.id] = member
            timed.remove(record.id)
            if wasGone { activate(record.id) }
            gossip.enqueue(.alive(record), about: record.id)
            out.append(.memberChanged(member))
        } else {
            guard record.hasValidSignature(authority) else { return }
            let member = Member(record: record, status: .alive, incarnation: record.incarnation, lastChange: now)
            add(member)
            gossip.enqueue(.alive(record), about: record.id)
            out.append(.memberChanged(member))
        }
    }

    /// Whether an accusation names an incarnation its member could have signed. Only a member
    /// raises its own incarnation (a signed record), so an honest accuser never names one above
    /// the latest record we hold by more than one step (a refutation we have not heard of yet).
    /// A higher one is a lie that could never be outbid (UInt64.max): ignored.
    private func isPlausible(_ accusation: Accusation) -> Bool {
        let signed = accusation.member == me.id ? me.incarnation : members[accusation.member]?.record.incarnation ?? 0
        return accusation.incarnation <= signed &+ 1 && accusation.incarnation < .max
    }

    mutating func mergeSuspect(_ accusation: Accusation, now: MeshInstant, into out: inout [MembershipDirective]) {
        guard isPlausible(accusation) else { return }
        if accusation.member == me.id {
            if accusation.incarnation >= me.incarnation, !hasLeft {
                health.worsen()
                refute(above: accusation.incarnation)
            } else {
                staleAccuser = true
            }
            return
        }
        guard var member = members[accusation.member], accusation.incarnation >= member.incarnation,
              !member.status.isGone else { return }
        if member.status == .suspect, var suspicion = member.suspicion, suspicion.incarnation == accusation.incarnation {
            if suspicion.confirm(by: accusation.accuser) {
                member.suspicion = suspicion
                members[member.id] = member
                gossip.enqueue(.suspect(accusation), about: member.id)
            }
            return
        }
        let (minimum, maximum) = settings.suspicionTimeouts(memberCount: activeCount)
        let expected = max(0, min(Int(settings.suspicionMultiplier) - 2, activeCount - 2))
        member.status = .suspect
        counters.suspicionsRaised += 1
        member.incarnation = accusation.incarnation
        member.lastChange = now
        member.suspicion = Suspicion(incarnation: accusation.incarnation, accuser: accusation.accuser, start: now,
                                     minimum: minimum, maximum: maximum, expectedConfirmations: expected)
        members[member.id] = member
        timed.insert(member.id)
        gossip.enqueue(.suspect(accusation), about: member.id)
        out.append(.memberChanged(member))
    }

    mutating func mergeDead(_ accusation: Accusation, now: MeshInstant, into out: inout [MembershipDirective]) {
        guard isPlausible(accusation) else { return }
        if accusation.member == me.id {
            if accusation.incarnation >= me.incarnation, !hasLeft {
                refute(above: accusation.incarnation)
            } else {
                staleAccuser = true
            }
            return
        }
        guard let member = members[accusation.member], accusation.incarnation >= member.incarnation,
              !member.status.isGone else { return }
        markGone(member, status: .dead, incarnation: accusation.incarnation, now: now, into: &out)
        gossip.enqueue(.dead(accusation), about: member.id)
    }

    private mutating func mergeLeft(_ departure: Departure, now: MeshInstant, into out: inout [MembershipDirective]) {
        if departure.member == me.id {
            // A departure of an earlier boot of ours (signed by us): we are back, so outbid it.
            if !hasLeft, departure.incarnation >= me.incarnation,
               authority.isValid(signature: departure.signature, message: departure.signedBytes, signingKey: me.signingKey) {
                refute(above: departure.incarnation)
            }
            return
        }
        guard let member = members[departure.member], departure.incarnation >= member.record.incarnation,
              departure.incarnation >= member.incarnation, member.status != .left,
              authority.isValid(signature: departure.signature, message: departure.signedBytes,
                                signingKey: member.record.signingKey) else { return }
        markGone(member, status: .left, incarnation: departure.incarnation, now: now, into: &out)
        gossip.enqueue(.left(departure), about: member.id)
    }

    /// A dead earlier boot is outbid once or twice (by the stale records others still hold),
    /// and our start already outbids the incarnation we remembered; a live twin answers each
    /// refutation with a higher one of its own, four times a second.
    private mutating func countRefutation(by record: MemberRecord, into out: inout [MembershipDirective]) {
        if refutationsByBoot[record.bootID] == nil, refutationsByBoot.count >= 16 { return }
        let count = (refutationsByBoot[record.bootID] ?? 0) + 1
        refutationsByBoot[record.bootID] = count
        if count == settings.identityConflictRefutations { out.append(.identityConflict(record)) }
    }

    /// Our record with new addresses (where members reach us: a reflexive address adopted),
    /// signed at the next incarnation and gossiped, so it outbids the one members hold.
    public mutating func advertise(_ addresses: [PeerAddress]) {
        let addresses = Array(addresses.prefix(MemberRecord.maxAddresses))
        guard addresses != me.addresses, me.incarnation < .max else { return }
        var record = me
        record.addresses = addresses
        record.incarnation += 1
        me = record.signed(by: authority)
        gossip.enqueue(.alive(me), about: me.id)
    }

    mutating func refute(above incarnation: UInt64) {
        guard incarnation < .max else { return }
        counters.refutations += 1
        var record = me
        record.incarnation = incarnation + 1
        me = record.signed(by: authority)
        gossip.enqueue(.alive(me), about: me.id)
    }

    private mutating func markGone(_ member: Member, status: MemberStatus, incarnation: UInt64, now: MeshInstant,
                                   into out: inout [MembershipDirective]) {
        var member = member
        member.status = status
        member.incarnation = incarnation
        member.suspicion = nil
        member.lastChange = now
        members[member.id] = member
        timed.insert(member.id)
        deactivate(member.id)
        if probe?.target == member.id { probe = nil }
        out.append(.memberChanged(member))
    }

    // MARK: probing

    private mutating func advanceProbe(now: MeshInstant, into out: inout [MembershipDirective]) {
        if var current = probe {
            if !current.indirectSent, now >= current.indirectAt {
                current.indirectSent = true
                if let address = members[current.target]?.address {
                    let helpers = pickRandom(settings.indirectProbes, excluding: [current.target])
                    current.nacksExpected = helpers.count
                    // SWIM sends the indirect probes; a second direct one halves the chance that
                    // plain loss makes a healthy member suspect.
                    out.append(send(probeFrames(sequence: current.sequence, target: current.target),
                                    to: current.target, address: address))
                    for helper in helpers {
                        guard let helperAddress = members[helper]?.address else { continue }
                        let request = ProbeRequest(sequence: current.sequence, target: current.target, address: address)
                        out.append(.send(frames: [.probeRequest(request)], recipient: helper, address: helperAddress))
                    }
                }
                probe = current
            }
            if now >= current.endAt {
                probe = nil
                // Heard from otherwise (during the probe, or the period before it): up, only slow
                // to answer, and neither side is to blame.
                if !heard(current.target, after: current.sentAt, slack: probePeriod) {
                    // Lifeguard: missing nacks mean our own links are the problem, so slow down.
                    let missedNacks = current.nacksExpected - current.nacksReceived
                    health.worsen(by: max(1, missedNacks))
                    if let member = members[current.target], !member.status.isGone {
                        mergeSuspect(Accusation(member: member.id, incarnation: member.incarnation, accuser: me.id),
                                     now: now, into: &out)
                    }
                }
            }
        }
        guard probe == nil, now >= nextProbeAt else { return }
        let period = probePeriod
        nextProbeAt = now + period
        guard let target = nextProbeTarget(), let member = members[target], let address = member.address else { return }
        sequence += 1
        probe = ProbeState(target: target, sequence: sequence, sentAt: now,
                           indirectAt: now + settings.probeTimeout * health.multiplier,
                           endAt: now + min(period, settings.probeDeadline * health.multiplier))
        // The first probe goes pairwise: 24 bytes of nonce and 16 of target less, on the datagram
        // that makes up most of an idle node's traffic. The second one (with the indirect ones)
        // goes hello, which any boot of the target opens: a member that restarted and whose new
        // keys we lack is not suspected for it. A suspect gets hello with its suspicion.
        if member.status == .alive {
            probe?.pairwiseOnly = true
            out.append(send([.probe(Probe(sequence: sequence, target: nil))], to: target, address: address, pairwise: true))
        } else {
            out.append(send(probeFrames(sequence: sequence, target: target), to: target, address: address))
        }
    }

    /// A probe, and for a member we suspect the suspicion too (Lifeguard's buddy system), so a
    /// live suspect learns of it from us even if the gossip missed it.
    private func probeFrames(sequence: UInt64, target: NodeID) -> [Frame] {
        var frames: [Frame] = [.probe(Probe(sequence: sequence, target: target))]
        if let member = members[target], member.status == .suspect {
            frames.append(.suspect(Accusation(member: target, incarnation: member.incarnation, accuser: me.id)))
        }
        return frames
    }

    /// Halfway through a suspicion we have not seen refuted, ask the suspect directly: a refutation
    /// our gossip missed comes back in its answer.
    private mutating func verifySuspicions(now: MeshInstant, into out: inout [MembershipDirective]) {
        for id in timed.sorted() {
            guard var member = members[id], member.status == .suspect, var suspicion = member.suspicion,
                  let verifyAt = suspicion.verifyAt, now >= verifyAt, let address = member.address else { continue }
            suspicion.verifications += 1
            member.suspicion = suspicion
            members[id] = member
            sequence += 1
            out.append(.send(frames: probeFrames(sequence: sequence, target: id), recipient: id, address: address))
        }
    }

    /// A probe of us (its target checked by the caller). A pairwise one is answered pairwise,
    /// without the target: the prober's key for us names us.
    private mutating func onProbe(_ probe: Probe, from sender: NodeID, address: PeerAddress, pairwise: Bool,
                                  into out: inout [MembershipDirective]) {
        guard !hasLeft else { return }
        var frames: [Frame] = [.probeAck(ProbeAck(sequence: probe.sequence, target: pairwise ? nil : me.id))]
        // A prober that still suspects us gets our current record with the ack, so the two
        // cannot be lost apart.
        if staleAccuser {
            frames.append(.alive(me))
            staleAccuser = false
        }
        // A prober we believe suspect or dead hears so at once, and can refute.
        if let member = members[sender] {
            let accusation = Accusation(member: sender, incarnation: member.incarnation, accuser: me.id)
            if member.status == .suspect { frames.append(.suspect(accusation)) }
            if member.status == .dead { frames.append(.dead(accusation)) }
        }
        out.append(send(frames, to: sender, address: address, pairwise: pairwise))
    }

    /// An ack of `target`'s (named in the frame, or by the pairwise key that sealed it). While
    /// only the pairwise probe is out, only the target's pairwise answer counts: a hello ack could
    /// be any member's, in the target's name.
    private mutating func onAck(sequence: UInt64, target: NodeID, from sender: NodeID, pairwise: Bool,
                                now: MeshInstant, into out: inout [MembershipDirective]) {
        if let current = probe, current.sequence == sequence, current.target == target,
           pairwise || !current.pairwiseOnly || current.indirectSent {
            probe = nil
            health.improve()
            if sender == target, var member = members[target] {
                member.rtt = now - current.sentAt
                counters.roundTrips.record(now - current.sentAt)
                members[target] = member
            }
            return
        }
        if let relay = relays[sequence], relay.target == target {
            relays[sequence] = nil
            let forwarded = ProbeAck(sequence: relay.requesterSequence, target: relay.target)
            out.append(.send(frames: [.probeAck(forwarded)], recipient: relay.requester, address: relay.requesterAddress))
        }
    }

    private mutating func onProbeRequest(_ request: ProbeRequest, from sender: NodeID, address: PeerAddress,
                                         now: MeshInstant, into out: inout [MembershipDirective]) {
        guard !hasLeft, request.target != me.id, relays.count < 64 else { return }
        // Only a member we know, at an address its own signed record names: otherwise any holder
        // of the secret could make every member probe a socket of its choosing.
        guard let target = members[request.target], !target.status.isGone,
              target.record.addresses.contains(request.address) else {
            counters.probeRequestsRefused += 1
            return
        }
        sequence += 1
        relays[sequence] = RelayedProbe(requester: sender, requesterAddress: address,
                                        requesterSequence: request.sequence, target: request.target,
                                        nackAt: now + settings.probeTimeout * 0.8)
        out.append(send([.probe(Probe(sequence: sequence, target: request.target))],
                        to: request.target, address: request.address))
    }

    private mutating func expireRelays(now: MeshInstant, into out: inout [MembershipDirective]) {
        for key in relays.keys.sorted() {
            guard let relay = relays[key], now >= relay.nackAt else { continue }
            relays[key] = nil
            let nack = ProbeNack(sequence: relay.requesterSequence, target: relay.target)
            out.append(.send(frames: [.probeNack(nack)], recipient: relay.requester, address: relay.requesterAddress))
        }
    }

    private mutating func expireSuspicions(now: MeshInstant, into out: inout [MembershipDirective]) {
        let expired = timed.compactMap { members[$0] }.filter { member in
            member.status == .suspect && member.suspicion.map { now >= $0.deadline } == true
        }.sorted { $0.id < $1.id }
        for var member in expired {
            if var suspicion = member.suspicion, !suspicion.heldOpen,
               heard(member.id, after: now, slack: suspicion.minimum), suspicion.start + suspicion.maximum > now {
                suspicion.heldOpen = true
                member.suspicion = suspicion
                members[member.id] = member
                continue
            }
            markGone(member, status: .dead, incarnation: member.incarnation, now: now, into: &out)
            gossip.enqueue(.dead(Accusation(member: member.id, incarnation: member.incarnation, accuser: me.id)),
                           about: member.id)
        }
    }

    private mutating func nextProbeTarget() -> NodeID? {
        guard !active.isEmpty else { return nil }
        if probeIndex >= active.count {
            active.shuffle(using: &random)
            probeIndex = 0
        }
        defer { probeIndex += 1 }
        return active[probeIndex]
    }

    // MARK: dissemination

    /// News goes out soon (`newsGossipSpacing` after the last round) rather than at the next
    /// regular round. The number of times each update is sent stays the same; only the first
    /// round comes sooner, so an epidemic's hops cost a network delay each, not half a gossip
    /// interval (joins seen by all sooner).
    private mutating func hastenGossip(now: MeshInstant) {
        guard let spacing = settings.newsGossipSpacing, !gossip.isEmpty, !active.isEmpty else { return }
        nextGossipAt = min(nextGossipAt, max(now, lastGossipAt + spacing))
    }

    /// While an update has been sent fewer than two rounds' worth of times, rounds follow each
    /// other at the news spacing. A cascade in which each node tells `fanout` others once misses
    /// about e^-fanout of the nodes (5% with 3), who would wait a whole interval; told twice as
    /// often, it misses e^-2·fanout (0.25%). With fewer members than the fanout every round
    /// reaches them all, so two rounds' worth is counted in the members there are: more would
    /// spend the update's transmissions on them instead of on the probes and acks that carry it
    /// elsewhere. With nobody to gossip to nothing is sent, and the update would stay fresh.
    private var freshGossipSpacing: Duration? {
        guard let spacing = settings.newsGossipSpacing, !active.isEmpty,
              gossip.hasUpdates(sentFewerThan: 2 * min(settings.gossipFanout, active.count)) else { return nil }
        return spacing
    }

    private mutating func gossipRound(into out: inout [MembershipDirective]) {
        guard !gossip.isEmpty else { return }
        for target in pickRandom(settings.gossipFanout, excluding: []) {
            guard let address = members[target]?.address else { continue }
            let frames = gossip.take(budget: datagramBudget, limit: retransmitLimit)
            guard !frames.isEmpty else { break }
            out.append(.send(frames: frames, recipient: target, address: address))
        }
    }

    /// A datagram of `frames` with as much pending gossip piggybacked as fits.
    /// `frames` with as much gossip as fits beside them, sealed with the hello key or pairwise.
    mutating func send(_ frames: [Frame], to recipient: NodeID, address: PeerAddress,
                               pairwise: Bool = false) -> MembershipDirective {
        let used = frames.reduce(0) { $0 + FrameCodec.encodedLength(of: $1) }
        let piggyback = gossip.take(budget: datagramBudget - used, limit: retransmitLimit)
        return pairwise ? .sendPairwise(frames: frames + piggyback, recipient: recipient, address: address)
            : .send(frames: frames + piggyback, recipient: recipient, address: address)
    }

    private var retransmitLimit: Int { settings.retransmitLimit(memberCount: activeCount) }

    /// Our whole view as self-contained datagrams (a joiner's answer): each member's record
    /// travels with its status.
    private func stateTransfer(to recipient: NodeID, address: PeerAddress, limit: Int? = nil) -> [MembershipDirective] {
        // The recipient's own entry is included: if we think it dead, it learns so and refutes.
        var groups = [[Frame.alive(me)]]
        if let own = members[recipient] { groups.append(stateFrames(of: own)) }
        // Within a limit, the live members first: a joiner needs one to be in; push-pull brings
        // it the rest once it is (PROTOCOL.md §4).
        let others = members.values.filter { $0.id != recipient }
            .sorted { ($0.status == .alive ? 0 : 1, $0.id) < ($1.status == .alive ? 0 : 1, $1.id) }
        groups += others.map(stateFrames)
        if let limit {
            // One datagram at most, then.
            let limit = min(limit, datagramBudget)
            var used = 0
            groups = Array(groups.prefix { group in
                used += group.reduce(0) { $0 + FrameCodec.encodedLength(of: $1) }
                return used <= limit
            })
        }
        return packed(groups).map { .send(frames: $0, recipient: recipient, address: address) }
    }

    /// A member's record with what we believe of it; nothing for one that left (a departure is
    /// only believed with its signature, which gossip carries).
    func stateFrames(of member: Member) -> [Frame] {
        let accusation = Accusation(member: member.id, incarnation: member.incarnation, accuser: me.id)
        switch member.status {
        case .alive: return [.alive(member.record)]
        case .suspect: return [.alive(member.record), .suspect(accusation)]
        case .dead: return [.alive(member.record), .dead(accusation)]
        case .left: return []
        }
    }

    /// Groups of frames in as few datagrams as they fit, a group never split.
    func packed(_ groups: [[Frame]]) -> [[Frame]] {
        var datagrams: [[Frame]] = []
        var current: [Frame] = []
        var used = 0
        for group in groups where !group.isEmpty {
            let size = group.reduce(0) { $0 + FrameCodec.encodedLength(of: $1) }
            if used + size > datagramBudget, !current.isEmpty {
                datagrams.append(current)
                current = []
                used = 0
            }
            current += group
            used += size
        }
        if !current.isEmpty { datagrams.append(current) }
        return datagrams
    }

    // MARK: the member table

    private mutating func add(_ member: Member) {
        members[member.id] = member
        if !member.status.isGone { activate(member.id) }
    }

    private mutating func activate(_ id: NodeID) {
        guard !active.contains(id) else { return }
        // A random place ahead of the probe cursor, so a newcomer is probed within this round.
        let lower = min(probeIndex, active.count)
        let position = lower + Int(random.next() % UInt64(active.count - lower + 1))
        active.insert(id, at: position)
    }

    private mutating func deactivate(_ id: NodeID) {
        guard let index = active.firstIndex(of: id) else { return }
        active.remove(at: index)
        if index < probeIndex { probeIndex -= 1 }
    }

    private mutating func forgetGone(now: MeshInstant, into out: inout [MembershipDirective]) {
        let forgotten = timed.compactMap { members[$0] }
            .filter { $0.status.isGone && now >= $0.lastChange + settings.forgetAfter }
            .map(\.id).sorted()
        for id in forgotten {
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
    private mutating func pickRandom(_ count: Int, excluding excluded: Set<NodeID>) -> [NodeID] {
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

extension Frame {
    /// The member a membership update is about.
    var membershipSubject: NodeID? {
        switch self {
        case let .alive(record): return record.id
        case let .suspect(accusation), let .dead(accusation): return accusation.member
        case let .left(departure): return departure.member
        default: return nil
        }
    }

    /// The frame as a hello datagram must carry it: a probe of `target`, an ack of `acker`'s,
    /// named (a pairwise one leaves them to the key).
    func namingProbeTarget(_ target: NodeID, acker: NodeID) -> Frame {
        switch self {
        case let .probe(probe) where probe.target == nil:
            return .probe(Probe(sequence: probe.sequence, target: target))
        case let .probeAck(ack) where ack.target == nil:
            return .probeAck(ProbeAck(sequence: ack.sequence, target: acker))
        default:
            return self
        }
    }

    /// A probe or its answer: what makes a pairwise datagram membership's.
    public var isProbeOrAck: Bool {
        switch self {
        case .probe, .probeAck: return true
        default: return false
        }
    }
}
