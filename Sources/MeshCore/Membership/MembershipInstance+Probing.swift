import MeshCrypto

/// Probing (SWIM's failure detector): one member per period, directly, then through helpers;
/// suspicions that expire make a member dead, and Lifeguard's local health slows us down when
/// our own links are the problem.
extension MembershipInstance {
    mutating func advanceProbe(now: MeshInstant, into out: inout [MembershipDirective]) {
        if var current = probe {
            if !current.indirectSent, now >= current.indirectAt {
                current.indirectSent = true
                if let address = members[current.target]?.address {
                    let helpers = pickRandom(settings.indirectProbes, excluding: [current.target])
                    current.nacksExpected = helpers.count
                    // SWIM sends the indirect probes; a second direct one halves the chance that
                    // plain loss makes a healthy member suspect.
                    out.append(
                        send(
                            probeFrames(sequence: current.sequence, target: current.target),
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
                        mergeSuspect(
                            Accusation(member: member.id, incarnation: member.incarnation, accuser: me.id),
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
        probe = ProbeState(
            target: target, sequence: sequence, sentAt: now,
            indirectAt: now + settings.probeTimeout * health.multiplier,
            endAt: now + min(period, settings.probeDeadline * health.multiplier))
        // The first probe goes pairwise: 24 bytes of nonce and 16 of target less, on the datagram
        // that makes up most of an idle node's traffic. The second one (with the indirect ones)
        // goes hello, which any boot of the target opens: a member that restarted and whose new
        // keys we lack is not suspected for it. A suspect gets hello with its suspicion.
        if member.status == .alive {
            probe?.pairwiseOnly = true
            out.append(
                send([.probe(Probe(sequence: sequence, target: nil))], to: target, address: address, pairwise: true))
        } else {
            out.append(send(probeFrames(sequence: sequence, target: target), to: target, address: address))
        }
    }

    /// A probe, and for a member we suspect the suspicion too (Lifeguard's buddy system), so a
    /// live suspect learns of it from us even if the gossip missed it.
    func probeFrames(sequence: UInt64, target: NodeID) -> [Frame] {
        var frames: [Frame] = [.probe(Probe(sequence: sequence, target: target))]
        if let member = members[target], member.status == .suspect {
            frames.append(.suspect(Accusation(member: target, incarnation: member.incarnation, accuser: me.id)))
        }
        return frames
    }

    /// Halfway through a suspicion we have not seen refuted, ask the suspect directly: a refutation
    /// our gossip missed comes back in its answer.
    mutating func verifySuspicions(now: MeshInstant, into out: inout [MembershipDirective]) {
        for id in timed.sorted() {
            guard var member = members[id], member.status == .suspect, var suspicion = member.suspicion,
                let verifyAt = suspicion.verifyAt, now >= verifyAt, let address = member.address
            else { continue }
            suspicion.verifications += 1
            member.suspicion = suspicion
            members[id] = member
            sequence += 1
            out.append(.send(frames: probeFrames(sequence: sequence, target: id), recipient: id, address: address))
        }
    }

    /// A probe of us (its target checked by the caller). A pairwise one is answered pairwise,
    /// without the target: the prober's key for us names us. `limit`: the most bytes of frames
    /// the answer may take (gossip beside the ack fills what is left).
    mutating func onProbe(
        _ probe: Probe, from sender: NodeID, address: PeerAddress, pairwise: Bool, limit: Int? = nil,
        into out: inout [MembershipDirective]
    ) {
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
        out.append(send(frames, to: sender, address: address, pairwise: pairwise, limit: limit))
    }

    /// An ack of `target`'s (named in the frame, or by the pairwise key that sealed it). While
    /// only the pairwise probe is out, only the target's pairwise answer counts: a hello ack could
    /// be any member's, in the target's name.
    mutating func onAck(
        sequence: UInt64, target: NodeID, from sender: NodeID, pairwise: Bool,
        now: MeshInstant, into out: inout [MembershipDirective]
    ) {
        if let current = probe, current.sequence == sequence, current.target == target,
            pairwise || !current.pairwiseOnly || current.indirectSent
        {
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
            out.append(
                .send(frames: [.probeAck(forwarded)], recipient: relay.requester, address: relay.requesterAddress))
        }
    }

    mutating func onProbeRequest(
        _ request: ProbeRequest, from sender: NodeID, address: PeerAddress,
        now: MeshInstant, into out: inout [MembershipDirective]
    ) {
        guard !hasLeft, request.target != me.id, relays.count < 64 else { return }
        // Only a member we know, at an address its own signed record names: otherwise any holder
        // of the secret could make every member probe a socket of its choosing.
        guard let target = members[request.target], !target.status.isGone,
            target.record.addresses.contains(request.address)
        else {
            counters.probeRequestsRefused += 1
            return
        }
        sequence += 1
        relays[sequence] = RelayedProbe(
            requester: sender, requesterAddress: address,
            requesterSequence: request.sequence, target: request.target,
            nackAt: now + settings.probeTimeout * 0.8)
        out.append(
            send(
                [.probe(Probe(sequence: sequence, target: request.target))],
                to: request.target, address: request.address))
    }

    mutating func expireRelays(now: MeshInstant, into out: inout [MembershipDirective]) {
        for key in relays.keys.sorted() {
            guard let relay = relays[key], now >= relay.nackAt else { continue }
            relays[key] = nil
            let nack = ProbeNack(sequence: relay.requesterSequence, target: relay.target)
            out.append(.send(frames: [.probeNack(nack)], recipient: relay.requester, address: relay.requesterAddress))
        }
    }

    mutating func expireSuspicions(now: MeshInstant, into out: inout [MembershipDirective]) {
        let expired = timed.compactMap { members[$0] }.filter { member in
            member.status == .suspect && member.suspicion.map { now >= $0.deadline } == true
        }.sorted { $0.id < $1.id }
        for var member in expired {
            if var suspicion = member.suspicion, !suspicion.heldOpen,
                heard(member.id, after: now, slack: suspicion.minimum), suspicion.start + suspicion.maximum > now
            {
                suspicion.heldOpen = true
                member.suspicion = suspicion
                members[member.id] = member
                continue
            }
            markGone(member, status: .dead, incarnation: member.incarnation, now: now, into: &out)
            gossip.enqueue(
                .dead(Accusation(member: member.id, incarnation: member.incarnation, accuser: me.id)),
                about: member.id)
        }
    }

    mutating func nextProbeTarget() -> NodeID? {
        guard !active.isEmpty else { return nil }
        if probeIndex >= active.count {
            active.shuffle(using: &random)
            probeIndex = 0
        }
        defer { probeIndex += 1 }
        return active[probeIndex]
    }
}
