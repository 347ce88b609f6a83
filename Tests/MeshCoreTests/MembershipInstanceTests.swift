import MeshCore
import MeshCrypto
import Testing

@Suite("Membership state machine (manual clock)")
struct MembershipInstanceTests {
    @Test("a healthy cluster probes, acks, measures RTT and accuses nobody")
    func probeAndAck() {
        var cluster = ManualCluster(count: 3)
        cluster.advance(by: .seconds(10))
        for observer in 0..<3 {
            for member in 0..<3 {
                #expect(cluster.status(of: member, seenBy: observer) == .alive)
            }
            #expect(cluster.instance(observer).localHealth.score == 0)
        }
        // Some probe was answered directly, so someone measured a round-trip time.
        #expect(cluster.instance(0).view.dropFirst().contains { $0.rtt != nil })
        #expect(!cluster.changes.contains { $0.member.status != .alive })
    }

    @Test("a probe without a direct ack goes indirect, and a relayed ack clears it")
    func indirectProbe() throws {
        var cluster = ManualCluster(count: 4)
        let a = cluster[0]
        // Drop everything between A and whoever it probes first, in both directions.
        var firstProbe: ManualCluster.Datagram?
        for _ in 0..<20 where firstProbe == nil {
            cluster.now = cluster.instance(0).nextDeadline
            cluster.tick(0)
            firstProbe = cluster.inFlight.first { $0.from == a && !$0.frames.probes.isEmpty }
        }
        let probeDatagram = try #require(firstProbe)
        // The first probe of a round goes pairwise, without naming its target: its address does.
        #expect(probeDatagram.pairwise && probeDatagram.frames.probes.first?.target == nil)
        let target = try #require(cluster.addresses.first { $0.value == probeDatagram.to }?.key)
        let targetAddress = cluster.addresses[target], aAddress = cluster.addresses[a]
        let cut: (ManualCluster.Datagram) -> Bool = { datagram in
            (datagram.from == a && datagram.to == targetAddress) || (datagram.from == target && datagram.to == aAddress)
        }
        cluster.pump(drop: cut)
        // Past the probe timeout: A asks the others, who reach the target and relay its ack.
        cluster.advance(by: .milliseconds(300), drop: cut)
        #expect(cluster.log.contains { $0.from == a && $0.frames.requests.contains { $0.target == target } })
        #expect(
            cluster.log.contains {
                $0.to == cluster.addresses[a] && $0.from != target && $0.frames.acks.contains { $0.target == target }
            },
            "an ack for the target relayed by another member")
        #expect(cluster.changes.isEmpty, "no status changed")
        #expect(cluster.nodes[a]!.member(target)?.status == .alive)
        #expect(cluster.nodes[a]!.localHealth.score == 0)
    }

    @Test(
        "while only the pairwise probe is out, only the target's pairwise ack answers it: a hello ack in its name does not"
    )
    func pairwiseProbeTakesOnlyThePairwiseAck() throws {
        func firstProbe(_ cluster: inout ManualCluster) throws -> (target: Int, sequence: UInt64) {
            var found: ManualCluster.Datagram?
            for _ in 0..<20 where found == nil {
                cluster.now = cluster.instance(0).nextDeadline
                cluster.tick(0)
                found = cluster.inFlight.first { $0.from == cluster[0] && !$0.frames.probes.isEmpty }
            }
            let datagram = try #require(found)
            cluster.inFlight.removeAll()
            let target = try #require(cluster.order.firstIndex { cluster.addresses[$0] == datagram.to })
            return (target, try #require(datagram.frames.probes.first?.sequence))
        }
        func wentIndirect(_ cluster: inout ManualCluster) -> Bool {
            cluster.log.removeAll()
            cluster.advance(by: .milliseconds(300), drop: { _ in true })
            return cluster.log.contains { $0.from == cluster[0] && !$0.frames.requests.isEmpty }
        }
        var cluster = ManualCluster(count: 4)
        var (target, sequence) = try firstProbe(&cluster)
        let other = (1..<4).first { $0 != target }!
        // Another member forges the ack, in hello and pairwise (naming the target): no answer.
        cluster.deliver(frames: [.probeAck(ProbeAck(sequence: sequence, target: cluster[target]))], from: other, to: 0)
        cluster.deliver(
            frames: [.probeAck(ProbeAck(sequence: sequence, target: cluster[target]))], from: other, to: 0,
            pairwise: true)
        #expect(wentIndirect(&cluster), "a forged ack cleared the probe")

        cluster = ManualCluster(count: 4)
        (target, sequence) = try firstProbe(&cluster)
        cluster.deliver(
            frames: [.probeAck(ProbeAck(sequence: sequence, target: nil))], from: target, to: 0, pairwise: true)
        #expect(!wentIndirect(&cluster), "the target's own pairwise ack did not answer the probe")
    }

    @Test("an indirect prober keeps its relay through an ack of someone else, and forwards the target's")
    func relaySurvivesAMismatchedAck() throws {
        var cluster = ManualCluster(count: 4)
        let request = ProbeRequest(sequence: 77, target: cluster[2], address: cluster.addresses[cluster[2]]!)
        cluster.deliver(frames: [.probeRequest(request)], from: 0, to: 1)
        let probe = try #require(
            cluster.inFlight.first { $0.from == cluster[1] && !$0.frames.probes.isEmpty }?.frames.probes.first)
        #expect(probe.target == cluster[2], "an indirect probe names its target (hello)")
        cluster.inFlight.removeAll()
        cluster.deliver(frames: [.probeAck(ProbeAck(sequence: probe.sequence, target: cluster[3]))], from: 3, to: 1)
        #expect(cluster.inFlight.isEmpty)
        cluster.deliver(frames: [.probeAck(ProbeAck(sequence: probe.sequence, target: cluster[2]))], from: 2, to: 1)
        let forwarded = cluster.inFlight.first { $0.to == cluster.addresses[cluster[0]] }?.frames.acks.first
        #expect(forwarded == ProbeAck(sequence: 77, target: cluster[2]))
    }

    @Test("an indirect probe request is carried out only for a member it knows, at an address of that member's record")
    func probeRequestsAimOnlyAtMembers() throws {
        var cluster = ManualCluster(count: 4)
        let outsider = NodeID(high: 0xdead, low: 0xbeef)
        let elsewhere = try PeerAddress(parsing: "192.0.2.77:9")
        for request in [
            ProbeRequest(sequence: 1, target: outsider, address: elsewhere),
            ProbeRequest(sequence: 2, target: cluster[2], address: elsewhere),
            ProbeRequest(sequence: 3, target: outsider, address: cluster.addresses[cluster[2]]!),
        ] {
            cluster.inFlight.removeAll()
            cluster.deliver(frames: [.probeRequest(request)], from: 0, to: 1)
            #expect(
                !cluster.inFlight.contains { !$0.frames.probes.isEmpty }, "request \(request.sequence) was carried out")
        }
        #expect(cluster.nodes[cluster[1]]?.counters.probeRequestsRefused == 3)
        cluster.inFlight.removeAll()
        cluster.deliver(
            frames: [
                .probeRequest(ProbeRequest(sequence: 4, target: cluster[2], address: cluster.addresses[cluster[2]]!))
            ],
            from: 0, to: 1)
        #expect(cluster.inFlight.contains { $0.to == cluster.addresses[cluster[2]] && !$0.frames.probes.isEmpty })
    }

    @Test("an unanswered probe makes the target suspect; the target refutes with a higher incarnation")
    func suspectAndRefute() throws {
        var cluster = ManualCluster(count: 3)
        let b = cluster[1]
        // B is cut off until A suspects it.
        var waited = Duration.zero
        while cluster.status(of: 1, seenBy: 0) != .suspect, waited < .seconds(5) {
            cluster.advance(by: .milliseconds(50), down: [b])
            waited += .milliseconds(50)
        }
        #expect(cluster.status(of: 1, seenBy: 0) == .suspect)
        #expect(cluster.instance(1).me.incarnation == 0)
        // B comes back and hears the rumour: it refutes, and the refutation wins everywhere.
        cluster.advance(by: .seconds(3))
        #expect(cluster.instance(1).me.incarnation >= 1)
        #expect(cluster.status(of: 1, seenBy: 0) == .alive)
        #expect(cluster.status(of: 1, seenBy: 2) == .alive)
    }

    @Test("a member declared dead while only cut off rejoins when the cut heals")
    func deadButAliveRejoins() {
        var cluster = ManualCluster(count: 4)
        let d = cluster[3]
        cluster.advance(by: MembershipSettings.lan.deadDetectionBound(memberCount: 4), down: [d])
        #expect(cluster.status(of: 3, seenBy: 0) == .dead)
        cluster.advance(by: .seconds(15))
        for observer in 0..<4 {
            for member in 0..<4 {
                #expect(cluster.status(of: member, seenBy: observer) == .alive, "\(member) seen by \(observer)")
            }
        }
    }

    @Test("a suspect that never refutes is declared dead within the suspicion bounds")
    func suspectBecomesDead() {
        var cluster = ManualCluster(count: 5)
        let dead = cluster[4]
        let settings = MembershipSettings.lan
        cluster.advance(by: settings.deadDetectionBound(memberCount: 5), down: [dead])
        for observer in 0..<4 {
            #expect(cluster.status(of: 4, seenBy: observer) == .dead, "observer \(observer)")
        }
    }

    @Test("Lifeguard: suspicion timeout starts at the maximum and shrinks with confirmations")
    func suspicionDecay() {
        let a = NodeID(high: 1, low: 1), b = NodeID(high: 2, low: 2), c = NodeID(high: 3, low: 3)
        var suspicion = Suspicion(
            incarnation: 0, accuser: a, start: .zero, minimum: .seconds(2),
            maximum: .seconds(8), expectedConfirmations: 2)
        #expect(suspicion.timeout == .seconds(8))
        let repeated = suspicion.confirm(by: a)
        #expect(repeated == false, "the same accuser does not count twice")
        let second = suspicion.confirm(by: b)
        #expect(second)
        let afterOne = suspicion.timeout
        #expect(afterOne < .seconds(8) && afterOne > .seconds(2))
        let third = suspicion.confirm(by: c)
        #expect(third)
        #expect(suspicion.timeout == .seconds(2))
        let beyond = suspicion.confirm(by: NodeID(high: 4, low: 4))
        #expect(beyond == false, "beyond the expected count nothing changes")
    }

    @Test("Lifeguard: a node whose probes all fail raises its local health score and slows its probing")
    func localHealthStretches() {
        var cluster = ManualCluster(count: 4)
        let a = cluster[0]
        // A hears nothing at all: every probe and every nack is lost.
        let aAddress = cluster.addresses[a]
        cluster.advance(by: .seconds(4), drop: { $0.to == aAddress })
        let score = cluster.nodes[a]!.localHealth.score
        #expect(score > 0)
        // Its probes now come further apart than the base interval.
        #expect(cluster.nodes[a]!.probePeriod > MembershipSettings.lan.probeInterval * Double(score))
        // And a healthy period brings it back down (A rejoins if it was declared dead meanwhile).
        cluster.advance(by: .seconds(30))
        #expect(cluster.nodes[a]!.localHealth.score < score)
    }

    @Test("a signed departure makes a member left everywhere; a forged one is ignored")
    func leave() throws {
        var cluster = ManualCluster(count: 3)
        // Forged: C claims that B left, signing with its own key.
        let c = cluster.identities[cluster[2]]!
        var forged = Departure(member: cluster[1], incarnation: 0)
        forged.signature = c.sign(forged.signedBytes)
        cluster.deliver(frames: [.left(forged)], from: 2, to: 0)
        #expect(cluster.status(of: 1, seenBy: 0) == .alive)

        var b = cluster.nodes[cluster[1]]!
        let out = b.leave(now: cluster.now)
        cluster.nodes[cluster[1]] = b
        #expect(!out.isEmpty)
        cluster.collect(out, from: cluster[1])
        cluster.pump()
        cluster.advance(by: .seconds(2), down: [cluster[1]])
        #expect(cluster.status(of: 1, seenBy: 0) == .left)
        #expect(cluster.status(of: 1, seenBy: 2) == .left)
    }

    @Test("forged or unsigned records are ignored")
    func forgedRecordsIgnored() {
        var cluster = ManualCluster(count: 2)
        let mallory = NodeIdentity.generate()
        let victim = cluster.identities[cluster[1]]!
        // A record for the victim's id with a higher incarnation, signed by someone else.
        var stolen = ManualCluster.record(victim, index: 2, incarnation: 9)
        stolen = stolen.signed(by: Ed25519Authority(identity: mallory))
        cluster.deliver(frames: [.alive(stolen)], from: 1, to: 0)
        #expect(cluster.instance(0).member(cluster[1])?.record.incarnation == 0)
        // An unsigned record of a new node.
        let unsigned = ManualCluster.record(mallory, index: 9)
        cluster.deliver(frames: [.alive(unsigned)], from: 1, to: 0)
        #expect(cluster.instance(0).member(mallory.nodeID) == nil)
        // A properly signed one is accepted.
        cluster.deliver(frames: [.alive(unsigned.signed(by: Ed25519Authority(identity: mallory)))], from: 1, to: 0)
        #expect(cluster.instance(0).member(mallory.nodeID)?.status == .alive)
    }

    @Test("a member that comes back with a new boot rejoins with a higher incarnation")
    func rejoinAfterDeath() throws {
        var cluster = ManualCluster(count: 3)
        let b = cluster[1]
        cluster.advance(by: MembershipSettings.lan.deadDetectionBound(memberCount: 3), down: [b])
        #expect(cluster.status(of: 1, seenBy: 0) == .dead)
        let deadIncarnation = try #require(cluster.instance(0).member(b)?.incarnation)

        // B restarts: same identity, new boot, incarnation 0 again, and joins through A.
        let identity = cluster.identities[b]!
        let record = ManualCluster.record(identity, index: 2, incarnation: 0, boot: 777)
        var reborn = MembershipInstance(
            record: record, authority: Ed25519Authority(identity: identity),
            settings: .lan, datagramBudget: 1118, seed: 99, now: cluster.now)
        let out = reborn.join([ManualCluster.address(1)], now: cluster.now)
        cluster.nodes[b] = reborn
        cluster.collect(out, from: b)
        cluster.pump()
        cluster.advance(by: .seconds(3))
        #expect(cluster.instance(1).me.incarnation > deadIncarnation)
        #expect(cluster.status(of: 1, seenBy: 0) == .alive)
        #expect(cluster.status(of: 1, seenBy: 2) == .alive)
        #expect(cluster.instance(0).member(b)?.record.bootID == 777)
    }

    @Test("dead members are forgotten after the configured time")
    func forget() {
        var settings = MembershipSettings.lan
        settings.forgetAfter = .seconds(5)
        var cluster = ManualCluster(count: 3, settings: settings)
        let c = cluster[2]
        var waited = Duration.zero
        while cluster.status(of: 2, seenBy: 0) != .dead, waited < settings.deadDetectionBound(memberCount: 3) {
            cluster.advance(by: .milliseconds(100), down: [c])
            waited += .milliseconds(100)
        }
        #expect(cluster.status(of: 2, seenBy: 0) == .dead)
        cluster.advance(by: .seconds(4), down: [c])
        #expect(cluster.status(of: 2, seenBy: 0) == .dead, "not forgotten before forgetAfter")
        cluster.advance(by: .seconds(2), down: [c])
        #expect(cluster.status(of: 2, seenBy: 0) == nil)
    }

    @Test("a joiner gets the whole member list through the state exchange")
    func joinGetsFullState() throws {
        var cluster = ManualCluster(count: 4)
        let joiner = try cluster.addJoiner(50, through: ManualCluster.address(2))
        cluster.pump()
        #expect(cluster.nodes[joiner]?.activeCount == 5)
        cluster.advance(by: .seconds(3))
        for observer in 0..<4 {
            #expect(cluster.status(of: 4, seenBy: observer) == .alive, "observer \(observer)")
        }
    }

    /// Found in the NAT lab: a home node joined through a public member while a second public
    /// member joined too. The first member gossiped the second's record to the home's private
    /// address (no datagram of the home's had proved its public one yet); the second could not
    /// reach the home through its NAT. The home learned of it only at the first periodic
    /// push-pull, 22 s or more later.
    @Test(
        "a joiner that missed the gossip of a member joining beside it learns of it from one push-pull soon after its join"
    )
    func joinFollowUpRepairsMissedGossip() throws {
        var cluster = ManualCluster(count: 1)
        let seed = cluster[0]
        let home = try cluster.addJoiner(60, through: ManualCluster.address(1))
        cluster.pump()
        #expect(cluster.nodes[home]?.member(seed)?.status == .alive, "the home is in")
        let other = try cluster.addJoiner(61, through: ManualCluster.address(1))
        let homeAddress = ManualCluster.address(60)
        // For 2 s nothing reaches the home: the seed's gossip went to its private address.
        cluster.advance(by: .seconds(2), drop: { $0.to == homeAddress })
        #expect(cluster.nodes[home]?.member(other) == nil, "the home heard of the other member while cut off")
        #expect(cluster.nodes[seed]?.member(other)?.status == .alive)
        // Then only the seed reaches it (the other member's datagrams meet the home's NAT). Over
        // before the seed's first reconnect (5 s after it started), which could also repair it.
        cluster.advance(by: .seconds(2.5), drop: { $0.to == homeAddress && $0.from != seed })
        #expect(cluster.nodes[seed]?.member(home)?.status == .alive, "the seed holds the home alive")
        #expect(
            cluster.nodes[home]?.member(other)?.status == .alive,
            "the home learns of the member that joined beside it within 4.5 s")
    }

    @Test("a joiner probed by a member keeps asking to join until a member's record reaches it")
    func joinRetriesUntilStateArrives() throws {
        let cluster = ManualCluster(count: 2)
        var (identity, joiner) = try ManualCluster.standalone(51, now: cluster.now)
        _ = joiner.join([ManualCluster.address(2)], now: cluster.now)
        func asksToJoin(_ directives: [MembershipDirective]) -> Bool {
            directives.contains { directive in
                if case let .send(frames, _, _) = directive {
                    frames.contains(.syncRequest(SyncRequest(isJoin: true)))
                } else {
                    false
                }
            }
        }
        // The answer to the join (the member list) was lost; a member that heard of the joiner by
        // gossip probes it. Found by the whole-node simulation: the joiner stopped asking here.
        _ = joiner.onFrames(
            [.probe(Probe(sequence: 1, target: identity.nodeID))], from: cluster[0],
            address: ManualCluster.address(1), now: cluster.now)
        let interval = MembershipSettings.lan.joinRetryInterval
        #expect(asksToJoin(joiner.onTick(now: cluster.now + interval)))
        // A member's record arrives: it is in, and stops asking.
        _ = joiner.onFrames(
            [.alive(cluster.instance(0).me)], from: cluster[0],
            address: ManualCluster.address(1), now: cluster.now + interval)
        #expect(!asksToJoin(joiner.onTick(now: cluster.now + interval * 3)))
    }

    @Test("a member we do not know that writes to us is asked for its state, once per join retry interval")
    func strangerIsAskedForItsState() throws {
        let cluster = ManualCluster(count: 3)
        var (identity, joiner) = try ManualCluster.standalone(52, now: cluster.now)
        _ = joiner.join([ManualCluster.address(1)], now: cluster.now)
        func asksForState(_ directives: [MembershipDirective], at address: PeerAddress) -> Bool {
            directives.contains { directive in
                guard case let .send(frames, _, to) = directive, to == address else { return false }
                return frames.contains(.syncRequest(SyncRequest(isJoin: false)))
            }
        }
        // The join's answer was lost, but member 0's record came by gossip: the joiner is in, and
        // stops asking to join. Member 1, whose record's gossip ended long ago, probes it.
        _ = joiner.onFrames(
            [.alive(cluster.instance(0).me)], from: cluster[0], address: ManualCluster.address(1), now: cluster.now)
        let probe: [Frame] = [.probe(Probe(sequence: 1, target: identity.nodeID))]
        let stranger = ManualCluster.address(2)
        #expect(
            asksForState(joiner.onFrames(probe, from: cluster[1], address: stranger, now: cluster.now), at: stranger))
        // Not again at once (a stranger's traffic cannot make us send without bound) ...
        #expect(
            !asksForState(joiner.onFrames(probe, from: cluster[1], address: stranger, now: cluster.now), at: stranger))
        // ... but again once the interval has passed, if the answer was lost too.
        let later = cluster.now + MembershipSettings.lan.joinRetryInterval
        #expect(asksForState(joiner.onFrames(probe, from: cluster[1], address: stranger, now: later), at: stranger))
        // Its state arrives: it is known, and never asked again.
        _ = joiner.onFrames([.alive(cluster.instance(1).me)], from: cluster[1], address: stranger, now: later)
        #expect(joiner.member(cluster[1])?.status == .alive)
        let muchLater = later + MembershipSettings.lan.joinRetryInterval * 3
        #expect(
            !asksForState(joiner.onFrames(probe, from: cluster[1], address: stranger, now: muchLater), at: stranger))
        // A member known to the joiner is never asked: member 0 probes too.
        #expect(
            !asksForState(
                joiner.onFrames(probe, from: cluster[0], address: ManualCluster.address(1), now: muchLater),
                at: ManualCluster.address(1)))
    }

    @Test("a member we probe that keeps sending us other datagrams is not suspected while its acks are late")
    func trafficFromTheTargetAnswersTheProbe() throws {
        var cluster = ManualCluster(count: 3)
        let a = cluster[0]
        // A's next probe, whoever it targets.
        var target: NodeID?
        for _ in 0..<20 where target == nil {
            cluster.now = cluster.instance(0).nextDeadline
            cluster.tick(0)
            let probe = cluster.inFlight.first { $0.from == a && !$0.frames.probes.isEmpty }
            target = probe.flatMap { probe in cluster.addresses.first { $0.value == probe.to }?.key }
        }
        let probed = try #require(target)
        let index = try #require(cluster.order.firstIndex(of: probed))
        // The target is flooded: nothing it is sent gets an answer for 10 s, yet its own probes
        let targetAddress = cluster.addresses[probed]
        let busy: (ManualCluster.Datagram) -> Bool = {
            $0.to == targetAddress || ($0.from == probed && !$0.frames.acks.isEmpty)
        }
        // (its timer still fires between batches) reach the others, one every 500 ms, in turn.
        let others = (0..<3).filter { $0 != index }
        for step in 0..<20 {
            cluster.advance(by: .milliseconds(500), drop: busy)
            let to = others[step % 2]
            cluster.deliver(
                frames: [.probe(Probe(sequence: UInt64(9_000 + step), target: cluster[to]))], from: index, to: to)
        }
        for observer in others {
            #expect(
                cluster.status(of: index, seenBy: observer) == .alive,
                "suspected by \(observer) while it was sending to it")
        }
        #expect(!cluster.changes.contains { $0.member.id == probed && $0.member.status != .alive })
    }

    @Test("a flood of join requests from one member gets one answer per half join retry interval")
    func joinFloodIsAnsweredSparingly() throws {
        let cluster = ManualCluster(count: 3)
        var node = cluster.instance(0)
        let request: [Frame] = [.syncRequest(SyncRequest(isJoin: true)), .alive(cluster.instance(1).me)]
        func answers(_ directives: [MembershipDirective]) -> Int {
            directives.filter { if case let .send(frames, _, _) = $0 { !frames.aliveRecords.isEmpty } else { false } }
                .count
        }
        var answered = 0
        for step in 0..<500 {
            let now = cluster.now + .milliseconds(step)  // 500 requests in 0.5 s
            answered +=
                answers(node.onFrames(request, from: cluster[1], address: ManualCluster.address(2), now: now)) > 0
                ? 1 : 0
        }
        #expect(answered == 1, "\(answered) state transfers for 500 joins in 0.5 s")
        let later = cluster.now + MembershipSettings.lan.joinRetryInterval
        #expect(
            answers(node.onFrames(request, from: cluster[1], address: ManualCluster.address(2), now: later)) > 0,
            "a join retried after the interval is answered")
        // Another member's join is not held back by the first one's flood.
        #expect(
            answers(
                node.onFrames(
                    [.syncRequest(SyncRequest(isJoin: true))], from: cluster[2],
                    address: ManualCluster.address(3), now: later)) > 0)
    }

    @Test("joins under 300 made-up ids in one window: at most 256 answered, and the windows kept stay bounded")
    func joinsUnderMadeUpIdsAreBounded() throws {
        let cluster = ManualCluster(count: 2)
        var node = cluster.instance(0)
        var answered = 0
        for index in 0..<300 {
            let madeUp = NodeID(high: 0xBAD, low: UInt64(index))
            let directives = node.onFrames(
                [.syncRequest(SyncRequest(isJoin: true))], from: madeUp, address: ManualCluster.address(9),
                now: cluster.now + .microseconds(index))
            if directives.contains(where: {
                if case let .send(frames, _, _) = $0 { !frames.aliveRecords.isEmpty } else { false }
            }) {
                answered += 1
            }
        }
        #expect(answered == MembershipInstance.maxSyncWindows, "\(answered) of 300 joins answered")
        #expect(node.answeredSyncs.count == MembershipInstance.maxSyncWindows)
        // Once the windows close, a join is answered again.
        let later = cluster.now + MembershipSettings.lan.joinRetryInterval
        #expect(
            node.onFrames(
                [.syncRequest(SyncRequest(isJoin: true))], from: cluster[1], address: ManualCluster.address(2),
                now: later
            ).contains { if case let .send(frames, _, _) = $0 { !frames.aliveRecords.isEmpty } else { false } })
    }

    @Test(
        "a member's new boot from another address: its record goes to the old address at once (a live twin hears it there); a restart in place sends nothing more"
    )
    func newBootIsToldToTheOldAddress() throws {
        let cluster = ManualCluster(count: 3)
        var node = cluster.instance(0)
        let identity = try #require(cluster.identities[cluster[1]])
        let authority = Ed25519Authority(identity: identity)
        func sendsToOldAddress(_ record: MemberRecord) -> Bool {
            node.onFrames(
                [.alive(record.signed(by: authority))], from: cluster[2], address: ManualCluster.address(3),
                now: cluster.now
            ).contains {
                if case let .send(frames, _, address) = $0 {
                    address == ManualCluster.address(2) && frames.aliveRecords.contains { $0.id == cluster[1] }
                } else {
                    false
                }
            }
        }
        var moved = ManualCluster.record(identity, index: 1, incarnation: 1, boot: 777)
        moved.addresses = [ManualCluster.address(9)]
        #expect(sendsToOldAddress(moved), "the boot at the old address is told it was outbid")
        // Restarted in place (yet another boot at the same address): nobody else is there to tell.
        var inPlace = ManualCluster.record(identity, index: 1, incarnation: 2, boot: 778)
        inPlace.addresses = [ManualCluster.address(9)]
        let directives = node.onFrames(
            [.alive(inPlace.signed(by: authority))], from: cluster[2],
            address: ManualCluster.address(3), now: cluster.now)
        let toOldAddress = directives.filter {
            if case let .send(frames, _, address) = $0 {
                address == ManualCluster.address(9) && !frames.aliveRecords.isEmpty
            } else {
                false
            }
        }
        #expect(toOldAddress.isEmpty, "\(toOldAddress)")
        #expect(node.member(cluster[1])?.record.bootID == 778)
    }

    @Test(
        "a live twin of our identity (a copied data dir) is reported by both once it outbids us repeatedly; a dead earlier boot never is"
    )
    func liveTwinIsReported() throws {
        let identity = try NodeIdentity(seed: [UInt8](repeating: 61, count: 32))
        let authority = Ed25519Authority(identity: identity)
        let gossiper = try NodeIdentity(seed: [UInt8](repeating: 62, count: 32)).nodeID
        let now = MeshInstant(nanoseconds: 1_000_000_000)
        func boot(_ bootID: UInt64, incarnation: UInt64) -> MembershipInstance {
            MembershipInstance(
                record: ManualCluster.record(identity, index: 61, incarnation: incarnation, boot: bootID),
                authority: authority, settings: .lan, datagramBudget: 1118, seed: bootID, now: now)
        }
        func conflicts(_ directives: [MembershipDirective]) -> [MemberRecord] {
            directives.compactMap { if case let .identityConflict(record) = $0 { record } else { nil } }
        }
        // Two live boots see each other's records, as the others' gossip brings them.
        var older = boot(100, incarnation: 0), newer = boot(200, incarnation: 0)
        var reportedByOlder: [MemberRecord] = [], reportedByNewer: [MemberRecord] = []
        for _ in 0..<10 {
            reportedByOlder += conflicts(
                older.onFrames([.alive(newer.me)], from: gossiper, address: ManualCluster.address(62), now: now))
            reportedByNewer += conflicts(
                newer.onFrames([.alive(older.me)], from: gossiper, address: ManualCluster.address(62), now: now))
        }
        #expect(reportedByOlder.map(\.bootID) == [200], "once, naming the twin")
        #expect(reportedByNewer.map(\.bootID) == [100])

        // A restart: the records of the dead boot that others still hold, in any order, some
        // above the incarnation the restart remembered. Outbid, never reported.
        var restarted = boot(300, incarnation: 5)
        var stale: [MembershipDirective] = []
        for incarnation: UInt64 in [2, 6, 4, 6, 3, 5, 1, 6] {
            let record = ManualCluster.record(identity, index: 61, incarnation: incarnation, boot: 100).signed(
                by: authority)
            stale += restarted.onFrames([.alive(record)], from: gossiper, address: ManualCluster.address(62), now: now)
        }
        #expect(conflicts(stale).isEmpty)
        #expect(restarted.me.incarnation == 7)
        // Even stale records that climb one by one past ours (an old boot that refuted often, a
        // restart that remembered an incarnation well behind): each meets what we just signed.
        var lagging = boot(400, incarnation: 2)
        var climbing: [MembershipDirective] = []
        for incarnation: UInt64 in 2...12 {
            let record = ManualCluster.record(identity, index: 61, incarnation: incarnation, boot: 300).signed(
                by: authority)
            climbing += lagging.onFrames([.alive(record)], from: gossiper, address: ManualCluster.address(62), now: now)
        }
        #expect(conflicts(climbing).isEmpty)
    }

    @Test("records past the most live members a session holds are refused until a slot frees")
    func liveMembersAreCapped() throws {
        var settings = MembershipSettings.lan
        settings.maxLiveMembers = 4
        let identity = try NodeIdentity(seed: [UInt8](repeating: 70, count: 32))
        let now = MeshInstant(nanoseconds: 1_000_000_000)
        var node = MembershipInstance(
            record: ManualCluster.record(identity, index: 70), authority: Ed25519Authority(identity: identity),
            settings: settings, datagramBudget: 1118, seed: 70, now: now)
        let others = try (71...76).map { try NodeIdentity(seed: [UInt8](repeating: UInt8($0), count: 32)) }
        func record(_ index: Int, incarnation: UInt64 = 0) -> MemberRecord {
            ManualCluster.record(others[index], index: 71 + index, incarnation: incarnation)
                .signed(by: Ed25519Authority(identity: others[index]))
        }
        func full(_ directives: [MembershipDirective]) -> Int {
            directives.filter { if case .sessionFull = $0 { true } else { false } }.count
        }
        let sender = others[0].nodeID
        let first = node.onFrames(
            (0..<6).map { .alive(record($0)) }, from: sender, address: ManualCluster.address(71), now: now)
        #expect(node.activeCount == 4)
        #expect(node.counters.recordsRefusedFull == 3)
        #expect(full(first) == 1, "said once, not per record")
        let admitted = node.view.dropFirst().map(\.id)
        let refused = try #require((0..<6).first { !admitted.contains(others[$0].nodeID) })
        // Its join is not answered (it keeps asking, as when nobody answers); a member's is.
        func answered(_ directives: [MembershipDirective]) -> Bool {
            directives.contains { if case .send = $0 { true } else { false } }
        }
        let join: (Int) -> [Frame] = { [.syncRequest(SyncRequest(isJoin: true)), .alive(record($0))] }
        #expect(
            !answered(
                node.onFrames(join(refused), from: others[refused].nodeID, address: ManualCluster.address(80), now: now)
            ))
        let member = try #require((0..<6).first { admitted.contains(others[$0].nodeID) })
        #expect(
            answered(
                node.onFrames(join(member), from: others[member].nodeID, address: ManualCluster.address(81), now: now)))
        // Said again only a minute later.
        #expect(
            full(node.onFrames([.alive(record(refused))], from: sender, address: ManualCluster.address(71), now: now))
                == 0)
        #expect(
            full(
                node.onFrames(
                    [.alive(record(refused))], from: sender, address: ManualCluster.address(71), now: now + .seconds(61)
                ))
                == 1)
        // A slot frees when a member dies; a refused record is taken then.
        let dying = admitted[0]
        _ = node.onFrames(
            [.dead(Accusation(member: dying, incarnation: 0, accuser: admitted[1]))], from: sender,
            address: ManualCluster.address(71), now: now + .seconds(62))
        #expect(node.activeCount == 3)
        _ = node.onFrames(
            [.alive(record(refused))], from: sender, address: ManualCluster.address(71), now: now + .seconds(63))
        #expect(node.activeCount == 4)
        #expect(node.member(others[refused].nodeID)?.status == .alive)
        // The dead one coming back finds no slot.
        let dyingIndex = try #require((0..<6).first { others[$0].nodeID == dying })
        _ = node.onFrames(
            [.alive(record(dyingIndex, incarnation: 1))], from: sender, address: ManualCluster.address(71),
            now: now + .seconds(64))
        #expect(node.member(dying)?.status == .dead)
    }
}
