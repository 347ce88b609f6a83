import MeshCrypto
import NIOCore

/// Key epochs in the node (Docs/SECURITY.md §Key epochs): removing a member moves the session
/// to a new secret handed to each remaining member; members still speaking an earlier epoch
/// are answered with the next one if they are owed it.
extension NodeInstance {
    /// Stores the epochs as they are now: the chain and the rotations that lost.
    private mutating func saveEpochs() {
        let files = keying.epochs.files
        keying.storedRivals = files.rivals
        store(.saveEpochs(files), .saveEpochs)
    }

    /// The rotations that lost changed without a change of epoch (one more handed to us, a
    /// notice that removes us): stored too. Not while our own removal is being stored, which
    /// writes the chain with them once committed.
    mutating func saveRivalsIfChanged() {
        guard keying.pendingRemoval == nil, keying.storedRivals.map({ $0 != keying.epochs.encodedRivals() }) ?? true
        else { return }
        openLostEpochs()
        saveEpochs()
    }

    /// A codec for every epoch that lost which we hold the secret of, handed to us as well as
    /// ours: a member still in one is handed the winner, as it is after a restart.
    private mutating func openLostEpochs() {
        for secret in keying.epochs.earlierSecrets
        where secret.sessionID != keying.codec.sessionID && keying.earlierCodecs[secret.sessionID] == nil {
            keying.earlierCodecs[secret.sessionID] = DatagramCodec(
                session: secret, localID: localID, localBootID: bootID, configuration: settings.wire)
        }
    }

    /// The codecs of epochs the chain no longer holds (its oldest forgotten, `KeyEpochs.maxTransitions`) go.
    private mutating func closeForgottenEpochs() {
        let held = Set(keying.epochs.earlierSecrets.map(\.sessionID))
        keying.earlierCodecs = keying.earlierCodecs.filter { held.contains($0.key) }
    }

    /// At most this many handovers wait for a removal being stored; more are dropped (their
    /// senders hand over again when they hear us in the epoch we are in).
    static let maxDeferredHandovers = 16
    /// Removed members told with the beacons (the latest removed).
    static let maxRemovedToTell = 16
    /// The earlier epochs of the chain the removed are told in (and those that lost out of them).
    static let epochsToTellRemovedIn = 4

    mutating func takeDeferredHandovers(now: MeshInstant) {
        let deferred = keying.deferredHandovers
        keying.deferredHandovers = []
        for item in deferred { receiveHandover(item.handover, header: item.header, from: item.address, now: now) }
    }

    /// Switches to the epoch `transition` opened: the secret is stored (unless it already is),
    /// the codec and pairwise keys change, the removed members are excluded, and (when handing
    /// over) every live member is handed the secret. Returns how many were.
    @discardableResult
    mutating func enterEpoch(
        _ transition: KeyEpochs.Transition, handingOver: Bool, stored: Bool = false,
        now: MeshInstant
    ) -> Int {
        if stored { saveRivalsIfChanged() } else { saveEpochs() }
        // Left out of the epoch we were in: not of this one; and what was answered in the one
        // we left is answered afresh.
        directory.leftOutBy = nil
        keying.unknownEpochBeacons = [:]
        keying.earlierCodecs[keying.codec.sessionID] = keying.codec
        // Back to an epoch we were in (a rival that stands again): its codec goes on from the
        // packet numbers it reached, as a new one would seal under the same keys and nonces.
        keying.codec =
            keying.earlierCodecs.removeValue(forKey: transition.secret.sessionID)
            ?? DatagramCodec(
                session: transition.secret, localID: localID, localBootID: bootID,
                configuration: settings.wire)
        openLostEpochs()
        closeForgottenEpochs()
        // The dead too: keys stay until a member is forgotten (one declared dead that was only
        // cut off comes back to the pairwise keys it had, and proves its address with them).
        for member in membership.view.dropFirst()
        where member.status != .left && !keying.epochs.removed.contains(member.id) {
            installKeys(for: member)
        }
        // Before they leave our view: where each member this rotation removes is reached. Kept
        // with those removed before (a member of a competing epoch may hold only an older key).
        for id in transition.rotation.removed where !keying.removedToTell.contains(where: { $0.member == id }) {
            if let address = directory.addresses[id] ?? membership.member(id)?.address {
                keying.removedToTell.append((id, address, links.paths.relay(of: id)))
            }
        }
        keying.removedToTell = Array(keying.removedToTell.suffix(Self.maxRemovedToTell))
        let excluded = membership.exclude(keying.epochs.removed, now: now)
        apply(excluded, now: now)
        log(
            .notice, "key epoch changed",
            [
                "session": "\(transition.secret.sessionID)", "previous": "\(transition.rotation.previousSession)",
                "removed": transition.rotation.removed.map(\.description).joined(separator: ","),
                "by": "\(transition.rotation.author)",
            ])
        // Beacons in the epoch we left: a member that took a competing rotation out of it (and
        // missed ours) answers with its own, and whichever wins reaches both.
        keying.beaconsLeft = settings.epochBeacons
        keying.beaconAt = now + settings.epochBeaconInterval
        var handed = 0
        if handingOver {
            for member in membership.view.dropFirst() where !member.status.isGone {
                if handOver(to: member.record, heardIn: transition.rotation.previousSession, now: now) {
                    handed += 1
                }
            }
        }
        emit(.epochChanged(transition.secret.sessionID))
        // A staged removal waiting for rivals waits afresh out of the epoch entered now (a rival
        // that won, another member's rotation): its rivals are the ones to weigh next.
        if let at = keying.stagedRemoval?.nextAt {
            let later = max(at, now + settings.removalNoticeHold)
            keying.stagedRemoval?.nextAt = later
        }
        return handed
    }

    /// A beacon to every live member, in the epoch our current one left: our record and, as a
    /// ping's token, the session we are in. A member in that same session stays quiet; one in a
    /// competing one hands us its rotation, and is handed ours.
    mutating func sendEpochBeacons(now: MeshInstant) {
        guard let due = keying.beaconAt, now >= due else { return }
        keying.beaconsLeft -= 1
        keying.beaconAt = keying.beaconsLeft > 0 ? now + settings.epochBeaconInterval : nil
        guard let left = keying.epochs.transitions.last?.rotation.previousSession, keying.earlierCodecs[left] != nil
        else { return }
        let me = membership.me
        for member in membership.view.dropFirst() where !member.status.isGone {
            guard let route = keysRoute(to: member.id, fallback: member.address) else { continue }
            sendKeys([.alive(me), .ping(Ping(token: session.sessionID.value))], in: left, to: member.id, route: route)
        }
        // The removed, told with the rotation's signature as proof, so that they stop instead of
        // staying up alone (no secret goes with it). Sealed in each of the last earlier epochs we
        // hold: a member removed on top of a competing rotation is still in the epoch before both.
        // (Not in every one: a long chain would make each beacon a burst.) And in the epochs its
        // own removal left, however many removals came since.
        let recent = keying.epochs.recentEarlierSessions(Self.epochsToTellRemovedIn)
        for (member, address, relay) in keying.removedToTell {
            guard
                let rotation = keying.epochs.transitions.last(where: { $0.rotation.removed.contains(member) })?.rotation
            else { continue }
            let sessions = recent + keying.epochs.epochsARemovalLeft(rotation).filter { !recent.contains($0) }
            for session in sessions where keying.earlierCodecs[session] != nil {
                let route: KeysRoute = relay.map { .relayed(via: $0, else: address) } ?? .direct(address)
                sendKeys([.removalNotice(rotation)], in: session, to: member, route: route)
                // Pairwise as well: a member that left this epoch believes only a notice that
                // only we could have sealed (a removed member holds the epoch's key too).
                sendKeys([.removalNotice(rotation)], in: session, to: member, route: route, pairwise: true)
            }
        }
    }

    /// How a key-epoch datagram reaches a member: the way our other datagrams to it go.
    enum KeysRoute: Equatable {
        /// Straight to this address (where its own datagrams come from, its TURN allocation's, or
        /// what its record gives).
        case direct(PeerAddress)
        /// Through the member relaying for it; to the address when that relay cannot be used.
        case relayed(via: NodeID, else: PeerAddress)
    }

    /// Our route to `member` now: through its relay while it is relayed, else where we reach it,
    /// else `fallback`.
    func keysRoute(to member: NodeID, fallback: PeerAddress?) -> KeysRoute? {
        guard let address = directory.addresses[member] ?? fallback else { return nil }
        if let relay = links.paths.relay(of: member), relay != member { return .relayed(via: relay, else: address) }
        return .direct(address)
    }

    /// `frames` in a hello datagram of the earlier epoch `session`, to `member` along `route`.
    /// Through a relay, the wrapping is sealed for the relay in that same epoch: a relay still in
    /// it carries it (with its keys of that epoch, which the member opens); one already past it
    /// drops it, and has handed the member the epoch itself, straight.
    mutating func sendKeys(
        _ frames: [Frame], in session: SessionID, to member: NodeID, route: KeysRoute,
        pairwise: Bool = false
    ) {
        guard var earlier = keying.earlierCodecs[session] else { return }
        let sealed = pairwise ? earlier.seal(frames, to: member) : earlier.sealHello(frames, nonce: randomNonce())
        guard let datagram = sealed else { return }
        switch route {
        case let .direct(address):
            transmit(datagram, to: address, kind: .keys)
        case let .relayed(relay, address):
            if let relayAddress = directory.addresses[relay],
                let outer = earlier.seal([.relayForward(RelayedDatagram(peer: member, datagram: datagram))], to: relay)
            {
                counters.relayedSent += 1
                transmit(outer, to: relayAddress, kind: .keys)
            } else {
                transmit(datagram, to: address, kind: .keys)
            }
        }
        keying.earlierCodecs[session] = earlier
    }

    /// Seals the epoch after `session` for `record`'s boot and sends it in a hello datagram of
    /// `session`: to `address` (where the datagram we answer came from) if the record (signed)
    /// names it or it is where we reach the member; else the way our other datagrams to the
    /// member go, when the record is of the boot we know (straight, or through its relay); else
    /// to the record's first address. A replayed record from elsewhere does not redirect the
    /// handover: every destination is one the member signed or one its own datagrams proved.
    /// False when it is not owed one, or not now (rate limit).
    /// `proven`: `address` is where a pairwise datagram of the member came from (only it could
    /// seal one), so it is trusted too; `checked`: that datagram answered our address check, and
    /// goes past the rate limit (the handover before it went where the member no longer is).
    @discardableResult
    private mutating func handOver(
        to record: MemberRecord, heardIn session: SessionID, address: PeerAddress? = nil,
        proven: Bool = false, checked: Bool = false, now: MeshInstant
    ) -> Bool {
        let trusted = address.flatMap { proven || vouches(for: $0, record: record) ? $0 : nil }
        let known = membership.member(record.id)?.record.bootID == record.bootID
        guard
            let route = trusted.map({ KeysRoute.direct($0) })
                ?? (known ? keysRoute(to: record.id, fallback: record.addresses.first) : nil)
                    ?? record.addresses.first.map({ KeysRoute.direct($0) }),
            keying.earlierCodecs[session] != nil,
            let transition = keying.epochs.handover(
                to: record.id, heardIn: session, now: now, overridingInterval: checked),
            let previous = keying.epochs.secret(of: transition.rotation.previousSession),
            let handover = EpochHandover.seal(
                transition.secret, rotation: transition.rotation, previous: previous,
                sender: membership.me, local: ephemeral, recipient: record,
                nonce: randomNonce())
        else { return false }
        counters.handoversSent += 1
        sendKeys([.epochHandover(handover)], in: session, to: record.id, route: route)
        return true
    }

    /// A datagram in an epoch we never held, from where a member we know is (its record, its
    /// own datagrams, or where it was lost say so; a header's sender is only a claim, so nothing
    /// goes anywhere else): the member may be in a rotation out of the epoch ours left that lost,
    /// which only its author held (gone, or restarted without it). A beacon in the epoch ours
    /// left, as after a rotation, draws that rotation from it, and it is handed ours in return.
    /// Per member at waits that double from `unknownEpochBeaconInterval` (two members each in an
    /// epoch the other never held would otherwise answer each other's beacons for ever), until
    /// our epoch changes; within `answerFactor` times the datagram's size unless its own
    /// datagrams proved the address.
    private mutating func beaconUnknownEpoch(
        of sender: NodeID, at address: PeerAddress, requestBytes: Int, now: MeshInstant
    ) {
        guard sender != localID, !keying.epochs.removed.contains(sender),
            let left = keying.epochs.transitions.last?.rotation.previousSession, keying.earlierCodecs[left] != nil,
            directory.addresses[sender] == address
                || membership.member(sender)?.record.addresses.contains(address) == true
                || membership.lost[sender]?.addresses.contains(address) == true
        else { return }
        let last = keying.unknownEpochBeacons[sender]
        if let last, now < last.at + last.wait { return }
        if last == nil, keying.unknownEpochBeacons.count >= Self.maxUnknownEpochBeacons {
            keying.unknownEpochBeacons = keying.unknownEpochBeacons.filter { now < $0.value.at + $0.value.wait }
            guard keying.unknownEpochBeacons.count < Self.maxUnknownEpochBeacons else { return }
        }
        let frames: [Frame] = [.alive(membership.me), .ping(Ping(token: session.sessionID.value))]
        guard
            isProvenSource(address, of: sender)
                || frames.map(FrameCodec.encodedLength).reduce(0, +)
                    <= Self.answerLimit(toRequestOf: requestBytes, factor: EndedSessionNotice.answerFactor)
        else { return }
        keying.unknownEpochBeacons[sender] = (
            now, last.map { min($0.wait * 2, Self.unknownEpochBeaconMaximumWait) } ?? Self.unknownEpochBeaconInterval
        )
        sendKeys(frames, in: left, to: sender, route: .direct(address))
    }

    static let unknownEpochBeaconInterval: Duration = .seconds(5)
    static let unknownEpochBeaconMaximumWait: Duration = .seconds(300)
    /// Members answered so at once, at most: the rest wait for a place.
    static let maxUnknownEpochBeacons = 16

    /// Where to answer a member whose key datagram came from `address`: there, if its record or
    /// its own datagrams name it (not on a hello's word), else the way we reach it.
    private func route(to member: MemberRecord, heardAt address: PeerAddress) -> KeysRoute? {
        vouches(for: address, record: member)
            ? .direct(address) : keysRoute(to: member.id, fallback: member.addresses.first)
    }

    /// Whether the member's signed record or its own earlier datagrams name `address`.
    func vouches(for address: PeerAddress, record: MemberRecord) -> Bool {
        record.addresses.contains(address) || directory.addresses[record.id] == address
    }

    /// A datagram whose session is not the current one: if it is an earlier epoch of ours and
    /// its sender is owed the next one, hand it over; nothing else in it is believed.
    mutating func receiveEarlierEpoch(_ datagram: ByteBuffer, from address: PeerAddress, now: MeshInstant) {
        var peek = datagram
        guard case let .success(header) = DatagramHeader.decode(&peek) else { return counters.countDrop(.foreign) }
        guard var earlier = keying.earlierCodecs[header.sessionID] else {
            beaconUnknownEpoch(of: header.sender, at: address, requestBytes: datagram.readableBytes, now: now)
            return counters.countDrop(.foreign)
        }
        let result = earlier.open(datagram)
        keying.earlierCodecs[header.sessionID] = earlier
        let opened: OpenedDatagram
        switch result {
        case let .success(success): opened = success
        case let .failure(reason): return counters.countDrop(reason)
        }
        counters.received.count(.keys, bytes: datagram.readableBytes)
        // A competing rotation handed to us in the epoch ours left (two removals at once).
        if case .epochHandover = opened.frames.first {
            for case let .epochHandover(handover) in opened.frames {
                receiveHandover(handover, header: opened.header, from: address, now: now)
            }
            return
        }
        // A member that took a competing rotation out of this epoch, which removes us.
        if case let .removalNotice(rotation) = opened.frames.first {
            return receiveRemovalNotice(
                rotation, from: header.sender, address: address,
                leftEpoch: (header.sessionID, opened.header.keyKind == .pairwise), now: now)
        }
        // A member's datagram that a relay still in this epoch carried to us: answered the way
        // we reach that member (through the relay), as a relayed datagram proves no address.
        if opened.header.keyKind == .pairwise {
            for case let .relayDelivery(delivery) in opened.frames {
                answerRelayed(
                    delivery.datagram, origin: delivery.peer, via: header.sender, in: header.sessionID,
                    now: now)
            }
        }
        // Key datagrams for another member that we would have relayed, had we still been in this
        // epoch: their sender already holds the next one (it is handing it on), nothing to answer.
        if !opened.frames.isEmpty, opened.frames.allSatisfy({ if case .relayForward = $0 { true } else { false } }) {
            return
        }
        // A beacon from a member already in the epoch that followed this one here: nothing to do.
        let next = keying.epochs.transition(after: header.sessionID)?.secret.sessionID
        for case let .ping(ping) in opened.frames where ping.token == next?.value { return }
        // One in another epoch out of this one: it still disagrees, and may be told the field again.
        if opened.frames.contains(where: { if case .ping = $0 { true } else { false } }) {
            keying.epochs.forgetFieldTold(header.sender)
        }
        guard keying.epochs.isEntitled(header.sender, heardIn: header.sessionID), let record = senderRecord(opened)
        else {
            answerRemoved(
                header.sender, at: address, in: header.sessionID, requestBytes: datagram.readableBytes,
                pairwise: opened.header.keyKind == .pairwise, now: now)
            answerOutOfDateJoin(
                opened, at: address, requestBytes: datagram.readableBytes, now: now)
            return counters.countDrop(.staleEpoch)
        }
        let pairwise = opened.header.keyKind == .pairwise
        let checked = pairwise && answersAddressCheck(opened.frames, of: record.id, at: address, in: header.sessionID)
        handOver(to: record, heardIn: header.sessionID, address: address, proven: pairwise, checked: checked, now: now)
        if !pairwise, !vouches(for: address, record: record) {
            checkAddress(of: record.id, at: address, inEarlier: header.sessionID, now: now)
        }
    }

    /// A member removed while it was away speaks in an epoch it knew: the beacons that told the
    /// removed are long over, so it is answered with the rotation that removed it, and stops
    /// instead of waiting alone for members that will never answer. Once per member per
    /// `removedAnswerInterval`, for a few members at a time. A hello's source is only its claim:
    /// the answer stays within `EndedSessionNotice.answerFactor` times its size, as the answer to
    /// a member of an ended session does. A pairwise datagram is the member's own: answered
    /// whatever the size, pairwise too (the only notice believed in an epoch it has left).
    private mutating func answerRemoved(
        _ member: NodeID, at address: PeerAddress, in session: SessionID, requestBytes: Int, pairwise: Bool,
        now: MeshInstant
    ) {
        guard keying.epochs.removed.contains(member),
            let rotation = keying.epochs.transitions.last(where: { $0.rotation.removed.contains(member) })?.rotation,
            keying.removedAnsweredAt[member].map({ now >= $0 + Self.removedAnswerInterval }) ?? true,
            pairwise
                || FrameCodec.encodedLength(of: .removalNotice(rotation))
                    <= Self.answerLimit(toRequestOf: requestBytes, factor: EndedSessionNotice.answerFactor)
        else { return }
        if keying.removedAnsweredAt[member] == nil, keying.removedAnsweredAt.count >= Self.maxRemovedToTell {
            keying.removedAnsweredAt = keying.removedAnsweredAt.filter { now < $0.value + Self.removedAnswerInterval }
            guard keying.removedAnsweredAt.count < Self.maxRemovedToTell else { return }
        }
        keying.removedAnsweredAt[member] = now
        sendKeys([.removalNotice(rotation)], in: session, to: member, route: .direct(address))
        if pairwise {
            sendKeys([.removalNotice(rotation)], in: session, to: member, route: .direct(address), pairwise: true)
        }
    }

    static let removedAnswerInterval: Duration = .seconds(5)

    /// A join in an epoch we left, from a node that is not owed the next one and was not removed
    /// either: a newcomer whose invite is older than a removal, or a member left off the
    /// rotation's roster (long dead). It is answered with the rotation that left that epoch (no
    /// secret goes with it), so that it can say its invite is out of date instead of waiting for
    /// ever. Within three times the hello's size, and once per `outOfDateAnswerInterval` in
    /// all: the sender's id is its own to invent.
    private mutating func answerOutOfDateJoin(
        _ opened: OpenedDatagram, at address: PeerAddress, requestBytes: Int, now: MeshInstant
    ) {
        let sender = opened.header.sender, session = opened.header.sessionID
        // Not for a member owed the next epoch (a join forged in its name, or one whose record
        // did not come with it): it is handed the epoch once it proves itself.
        guard opened.header.keyKind == .hello, !keying.epochs.removed.contains(sender),
            !keying.epochs.isEntitled(sender, heardIn: session),
            opened.frames.contains(where: { if case let .syncRequest(request) = $0 { request.isJoin } else { false } }),
            keying.outOfDateAnsweredAt.map({ now >= $0 + Self.outOfDateAnswerInterval }) ?? true,
            // A superseded epoch's next is a rotation out of another: the joiner could not read it.
            let rotation = keying.epochs.transition(after: session)?.rotation, rotation.previousSession == session,
            FrameCodec.encodedLength(of: .removalNotice(rotation))
                <= Self.answerLimit(toRequestOf: requestBytes, factor: EndedSessionNotice.answerFactor)
        else { return }
        keying.outOfDateAnsweredAt = now
        sendKeys([.removalNotice(rotation)], in: session, to: sender, route: .direct(address))
    }

    static let outOfDateAnswerInterval: Duration = .seconds(1)

    /// A datagram of the earlier epoch `session` that `origin` sent through `relay`: if it opens
    /// as the origin's and the origin is owed the next epoch, hand it over.
    private mutating func answerRelayed(
        _ datagram: ByteBuffer, origin: NodeID, via relay: NodeID, in session: SessionID,
        now: MeshInstant
    ) {
        guard origin != relay, origin != localID, var earlier = keying.earlierCodecs[session] else { return }
        let result = earlier.open(datagram)
        keying.earlierCodecs[session] = earlier
        guard case let .success(opened) = result, opened.header.sender == origin,
            opened.header.sessionID == session
        else { return counters.countDrop(.malformed) }
        guard keying.epochs.isEntitled(origin, heardIn: session), let record = senderRecord(opened) else {
            return counters.countDrop(.staleEpoch)
        }
        handOver(to: record, heardIn: session, now: now)
    }

    /// The sender's record for the boot that sent `datagram`: ours if current, else one it carries.
    private func senderRecord(_ datagram: OpenedDatagram) -> MemberRecord? {
        let sender = datagram.header.sender
        if let known = membership.member(sender)?.record, known.bootID == datagram.header.bootID { return known }
        for case let .alive(record) in datagram.frames
        where record.id == sender && record.bootID == datagram.header.bootID && record.hasValidSignature(authority) {
            return record
        }
        return nil
    }

    /// Members a rotation that lost excluded, which the winner keeps: members again, and no
    /// longer told that they were removed.
    private mutating func readmit(_ ids: Set<NodeID>, now: MeshInstant) {
        guard !ids.isEmpty else { return }
        keying.removedToTell.removeAll { ids.contains($0.member) }
        let readmitted = membership.readmit(ids, now: now)
        apply(readmitted, now: now)
        log(
            .notice, "members removed by a rotation that lost are members again",
            ["members": ids.sorted().map(\.description).joined(separator: ",")])
    }

    /// A member removed us: a rotation it signed names us (out of our epoch, or out of one that
    /// followed it, when we were removed on top of a competing rotation; or, sealed in an epoch we
    /// left, one that stands among those we know out of that epoch: members removing each
    /// other). Believed from a member we know (any member may remove any other), never from anyone
    /// else, and never when a rotation of ours out of the same epoch beats it.
    ///
    /// `leftEpoch`: the notice came sealed in an epoch we left (and whether pairwise). Anyone who
    /// held that epoch's key can seal a hello in it, a member removed since too; so such a notice
    /// counts only if it is pairwise from a member not removed, its rotation leaves that epoch,
    /// and it beats the rotation we took out of it.
    mutating func receiveRemovalNotice(
        _ rotation: KeyRotation, from sender: NodeID, address: PeerAddress,
        leftEpoch: (session: SessionID, pairwise: Bool)? = nil, now: MeshInstant
    ) {
        // A rotation that leaves our epoch without us, in answer to our join (or to our asks of
        // members we lost): not a removal.
        if leftEpoch == nil, !rotation.removed.contains(localID) {
            return noteOutOfDateInvite(rotation, from: sender)
        }
        // One more rotation out of the epoch ours left, which removes us: it joins the field
        // whether or not it stands, and another of ours may stand now (three or more at once).
        // Held to what a notice must be to count (pairwise from an epoch we left; neither sender
        // nor author removed before that epoch), and not while our own removal is being stored.
        let removedBefore = keying.epochs.removed(before: rotation.previousSession)
        if keying.pendingRemoval == nil, rotation.removed.contains(localID), leftEpoch?.pairwise ?? true,
            !removedBefore.contains(sender), !removedBefore.contains(rotation.author),
            knownMemberIDs.contains(rotation.author), rotation.hasValidSignature(authority)
        {
            if case let .adopted(transition, replacing) = keying.epochs.noteRemovingRival(rotation, localID: localID) {
                adopt(transition, replacing: replacing, heardAt: address, now: now)
            } else {
                saveRivalsIfChanged()
            }
        }
        let ours = keying.epochs.transitions.first { $0.rotation.previousSession == rotation.previousSession }
        // Sealed in the epoch both left, by a member that took a rotation ours beats (and that
        // we did not remove): it is handed ours, which it may never have heard of.
        if let left = leftEpoch, left.pairwise, rotation.previousSession == left.session, let ours,
            ours.rotation.nextSession != rotation.nextSession, !keying.epochs.removed.contains(sender),
            !keying.epochs.stands(rotation), let record = membership.member(sender)?.record
        {
            handOver(to: record, heardIn: left.session, address: address, now: now)
        }
        let believable =
            leftEpoch.map { left in
                left.pairwise && !keying.epochs.removed.contains(sender) && rotation.previousSession == left.session
                    && ours != nil && keying.epochs.stands(rotation)
            } ?? true
        guard believable, rotation.removed.contains(localID),
            knownMemberIDs.contains(rotation.author), knownMemberIDs.contains(sender),
            rotation.hasValidSignature(authority)
        else {
            counters.handoversRefused += 1
            return
        }
        if let ours, ours.rotation.nextSession != rotation.nextSession, !keying.epochs.stands(rotation) {
            // We removed each other and ours stands: the sender took the rotation that lost
            // (it will not hand us anything, as that rotation removes us). Hand it ours.
            counters.handoversRefused += 1
            if let record = membership.member(sender)?.record {
                handOver(to: record, heardIn: rotation.previousSession, address: address, now: now)
            }
            return
        }
        guard ours != nil else {
            // Out of an epoch we forgot (it was long ago), not a word about us now.
            guard !keying.epochs.forgot(rotation.previousSession) else { return counters.handoversRefused += 1 }
            // Out of our current epoch, and we took no rotation out of it yet: one that keeps us
            // may still come (its handover lost or late) and win over this one. Held until then.
            if !keying.heldRemovalNotices.contains(where: { $0.rotation.previousSession == rotation.previousSession }),
                keying.heldRemovalNotices.count < Self.maxHeldRemovalNotices
            {
                keying.heldRemovalNotices.append((rotation, now + settings.removalNoticeHold))
                counters.removalNoticesHeld += 1
                log(
                    .notice, "told of this node's removal; waiting for a rotation that keeps it",
                    ["by": "\(rotation.author)"])
            }
            return
        }
        stopRemoved(by: rotation.author, now: now)
    }

    static let maxHeldRemovalNotices = 4

    /// Held removal notices whose time has come: each stands unless a rotation that keeps us came
    /// meanwhile out of the same epoch and wins over it.
    mutating func decideHeldRemovalNotices(now: MeshInstant) {
        let due = keying.heldRemovalNotices.filter { now >= $0.until }
        guard !due.isEmpty else { return }
        keying.heldRemovalNotices.removeAll { now >= $0.until }
        for (rotation, _) in due {
            let previous = rotation.previousSession
            if keying.epochs.transitions.contains(where: { $0.rotation.previousSession == previous }),
                !keying.epochs.stands(rotation)
            {
                log(.notice, "a removal notice lost to the rotation that keeps this node", ["by": "\(rotation.author)"])
                continue
            }
            return stopRemoved(by: rotation.author, now: now)
        }
    }

    /// We are no longer in the session: said once, and the node stops (whatever drives it), as
    /// nothing the members send opens with the keys it still holds.
    mutating func stopRemoved(by author: NodeID, now: MeshInstant) {
        guard !keying.removedFromSession else { return }
        // The driver says it in its own line (the error it stops with): logged below that level.
        log(.notice, "this node was removed from the session", ["by": "\(author)"])
        keying.removedFromSession = true
        emit(.removedFromSession(by: author))
        stop(now: now)
    }

    /// A competing rotation that does not stand: its sender is handed ours and the others we
    /// hold that lost (those owed to it), and told those we know that remove it (it can be handed
    /// none of them), so that it chooses from the field we chose from.
    private mutating func answerRival(_ handover: EpochHandover, from address: PeerAddress, now: MeshInstant) {
        let previous = handover.rotation.previousSession
        let sender = handover.sender
        handOver(to: sender, heardIn: previous, address: address, now: now)
        // Where its record or its own datagrams say, as for any handover: not on a hello's word.
        // The field once per member boot until it changes (or the member shows it still
        // disagrees): two members that agree would otherwise answer each other's lost rivals
        // for ever.
        guard
            let route = route(to: sender, heardAt: address),
            keying.epochs.mayTellField(outOf: previous, to: sender.id, boot: sender.bootID)
        else { return }
        for lost in keying.epochs.lostTransitions(outOf: previous) where lost.rotation != handover.rotation {
            handLost(lost, to: sender, route: route)
        }
        for rotation in keying.epochs.rivals(outOf: previous, removing: sender.id) {
            sendKeys([.removalNotice(rotation)], in: previous, to: sender.id, route: route, pairwise: true)
        }
    }

    /// A rotation that lost (with its secret), sealed for `member` in the epoch it left: so that
    /// the member weighs the same field, and can hand the winner to anyone still in the one that
    /// lost. Only to a member it owes (never to one we removed).
    private mutating func handLost(_ lost: KeyEpochs.Transition, to member: MemberRecord, route: KeysRoute) {
        let previous = lost.rotation.previousSession
        guard lost.rotation.owes(member.id), !keying.epochs.removed.contains(member.id),
            let secret = keying.epochs.secret(of: previous),
            let sealed = EpochHandover.seal(
                lost.secret, rotation: lost.rotation, previous: secret, sender: membership.me,
                local: ephemeral, recipient: member, nonce: randomNonce())
        else { return }
        counters.handoversSent += 1
        sendKeys([.epochHandover(sealed)], in: previous, to: member.id, route: route)
    }

    /// Switches to `transition`, handed to us (by `sender`) or standing now among the rotations we
    /// know out of one epoch (`replacing` the one we were in).
    private mutating func adopt(
        _ transition: KeyEpochs.Transition, replacing: KeyEpochs.Transition?, heardAt address: PeerAddress,
        from sender: MemberRecord? = nil, now: MeshInstant
    ) {
        // Handed on to every live member too: under loss, and when members removed someone at
        // once, every member must see the rotation that stands.
        enterEpoch(transition, handingOver: true, now: now)
        // The epoch we leave lost, and the member that handed us the winner may never have held
        // it: it is handed ours, so that a member still in ours (cut off now) can be handed the
        // winner by it too, not only by us.
        if let replacing, let sender,
            let route = route(to: sender, heardAt: address)
        {
            handLost(replacing, to: sender, route: route)
        }
        if let replacing {
            // Members the losing rotation removed and the winner does not: our own removal is
            // made again, on top of the winner; anyone else's is undone here.
            let rest = Set(replacing.rotation.removed).subtracting(keying.epochs.removed)
            let candidates = rosterCandidates
            if replacing.rotation.author == localID, !rest.isEmpty,
                let again = try? keying.epochs.rotation(
                    removing: rest, to: randomSecret(), live: candidates.live,
                    others: candidates.others, authority: authority)
            {
                keying.epochs.commit(again)
                enterEpoch(again, handingOver: true, now: now)
            } else {
                readmit(rest, now: now)
            }
        }
        // After the members a losing rotation excluded were taken back.
        membership.keepExcluded(within: keying.epochs.removed)
        // Our view may be empty (back from a restart): join again, now in the new epoch.
        let seeds = Set(
            [address] + directory.remembered.addresses + membership.view.dropFirst().compactMap(\.address))
        let joining = membership.join(seeds.sorted(), now: now)
        apply(joining, now: now)
    }

    /// A handover to us, in a datagram of our current epoch: adopt the next epoch if it is
    /// genuine, for our boot, and from a member we know.
    mutating func receiveHandover(
        _ handover: EpochHandover, header: DatagramHeader, from address: PeerAddress,
        now: MeshInstant
    ) {
        // Our own rotation is being stored: it commits first, as if storing took no time.
        guard keying.pendingRemoval == nil else {
            if keying.deferredHandovers.count < Self.maxDeferredHandovers {
                keying.deferredHandovers.append((handover, header, address))
            }
            return
        }
        // Cheap checks first: signatures and key exchange only for what could be taken.
        guard handover.recipient == localID, handover.recipientBoot == bootID, handover.sender.id == header.sender,
            handover.sender.bootID == header.bootID,
            handover.rotation.nextSession != session.sessionID,
            let previous = keying.epochs.secret(of: handover.rotation.previousSession),
            knownMemberIDs.contains(header.sender),
            handover.sender.hasValidSignature(authority),
            let secret = handover.open(previous: previous, local: ephemeral)
        else {
            counters.handoversRefused += 1
            return
        }
        switch keying.epochs.accept(
            handover.rotation, secret: secret, from: header.sender, localID: localID,
            members: knownMemberIDs, authority: authority)
        {
        case let .adopted(transition, replacing):
            adopt(transition, replacing: replacing, heardAt: address, from: handover.sender, now: now)
        case .removesUs:
            counters.handoversRefused += 1
            stopRemoved(by: handover.rotation.author, now: now)
        case .notOurEpoch:
            saveRivalsIfChanged()
            answerRival(handover, from: address, now: now)
        case .known:
            // One we hold as a rival (it lost): its sender has not chosen as we did.
            if keying.epochs.lost(handover.rotation) { answerRival(handover, from: address, now: now) }
        case .invalid:
            counters.handoversRefused += 1
        }
    }
}
