import MeshCrypto

/// Merging what members say about each other (SWIM with Lifeguard's refinements): alive records
/// outbid by incarnation, accusations checked for plausibility, refutations counted per boot,
/// departures taken as final.
extension MembershipInstance {
    mutating func mergeAlive(_ record: MemberRecord, now: MeshInstant, into out: inout [MembershipDirective]) {
        if record.id == me.id {
            // Someone holds a record of ours we did not sign this boot: an earlier boot's. Outbid it
            // (only one we did sign: a forged one must not move our incarnation).
            if record.incarnation > me.incarnation || (record.incarnation == me.incarnation && record != me),
                record.hasValidSignature(authority)
            {
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
            guard !existing.status.isGone || hasRoomForMember else {
                return refuseForRoom(record.id, now: now, into: &out)
            }
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
            guard hasRoomForMember else { return refuseForRoom(record.id, now: now, into: &out) }
            let member = Member(record: record, status: .alive, incarnation: record.incarnation, lastChange: now)
            add(member)
            gossip.enqueue(.alive(record), about: record.id)
            out.append(.memberChanged(member))
        }
    }

    /// Whether one more live member fits `maxLiveMembers`.
    var hasRoomForMember: Bool { activeCount < settings.maxLiveMembers }

    /// A record not taken for want of room: counted, and said once a minute at most (the same
    /// records come back with every gossip round).
    private mutating func refuseForRoom(_ id: NodeID, now: MeshInstant, into out: inout [MembershipDirective]) {
        counters.recordsRefusedFull += 1
        guard sessionFullSaidAt.map({ now >= $0 + .seconds(60) }) ?? true else { return }
        sessionFullSaidAt = now
        out.append(.sessionFull(refused: id))
    }

    /// Whether an accusation names an incarnation its member could have signed. Only a member
    /// raises its own incarnation (a signed record), so an honest accuser never names one above
    /// the latest record we hold by more than one step (a refutation we have not heard of yet).
    /// A higher one is a lie that could never be outbid (UInt64.max): ignored.
    func isPlausible(_ accusation: Accusation) -> Bool {
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
            !member.status.isGone
        else { return }
        if member.status == .suspect, var suspicion = member.suspicion, suspicion.incarnation == accusation.incarnation
        {
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
        member.suspicion = Suspicion(
            incarnation: accusation.incarnation, accuser: accusation.accuser, start: now,
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
            !member.status.isGone
        else { return }
        markGone(member, status: .dead, incarnation: accusation.incarnation, now: now, into: &out)
        gossip.enqueue(.dead(accusation), about: member.id)
    }

    mutating func mergeLeft(_ departure: Departure, now: MeshInstant, into out: inout [MembershipDirective]) {
        if departure.member == me.id {
            // A departure of an earlier boot of ours (signed by us): we are back, so outbid it.
            if !hasLeft, departure.incarnation >= me.incarnation,
                authority.isValid(
                    signature: departure.signature, message: departure.signedBytes, signingKey: me.signingKey)
            {
                refute(above: departure.incarnation)
            }
            return
        }
        guard let member = members[departure.member], departure.incarnation >= member.record.incarnation,
            departure.incarnation >= member.incarnation, member.status != .left,
            authority.isValid(
                signature: departure.signature, message: departure.signedBytes,
                signingKey: member.record.signingKey)
        else { return }
        markGone(member, status: .left, incarnation: departure.incarnation, now: now, into: &out)
        gossip.enqueue(.left(departure), about: member.id)
    }

    /// A dead earlier boot is outbid once or twice (by the stale records others still hold),
    /// and our start already outbids the incarnation we remembered; a live twin answers each
    /// refutation with a higher one of its own, four times a second.
    mutating func countRefutation(by record: MemberRecord, into out: inout [MembershipDirective]) {
        if refutationsByBoot[record.bootID] == nil, refutationsByBoot.count >= 16 { return }
        let count = (refutationsByBoot[record.bootID] ?? 0) + 1
        refutationsByBoot[record.bootID] = count
        if count == settings.identityConflictRefutations { out.append(.identityConflict(record)) }
    }

    /// Our record with new addresses (where members reach us: a reflexive address adopted),
    /// signed at the next incarnation and gossiped, so it outbids the one members hold.
    package mutating func advertise(_ addresses: [PeerAddress]) {
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

    mutating func markGone(
        _ member: Member, status: MemberStatus, incarnation: UInt64, now: MeshInstant,
        into out: inout [MembershipDirective]
    ) {
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
}
