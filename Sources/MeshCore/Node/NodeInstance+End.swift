import MeshCrypto

/// Ending the session for everyone (GroupSession's `end()`, PROTOCOL.md §4, ending a session).
/// The member that ends it signs a `SessionEnd` for the current key epoch and sends it to every
/// live member over the reliable channel; each member that takes it passes it on to the members
/// it knows (a member the first missed still hears it), records it on disk, and leaves once the
/// members it told acknowledged (or `endGrace` passed). A statement for another epoch, with a
/// bad signature, or by someone who is not a member in this epoch changes nothing.
package struct SessionEnding: Sendable {
    let statement: SessionEnd
    /// The `end` commands waiting (this node's own).
    var requests: [RequestID]
    /// The reliable send that passes the statement on, while unacknowledged.
    var sendID: UInt64?
    /// The node leaves by then whatever was acknowledged.
    let until: MeshInstant
    /// Members that told us or wrote it: never answered with it.
    var informed: Set<NodeID> = []
    /// When each member was last answered with it (`answerWithEnd`).
    var answeredAt: [NodeID: MeshInstant] = [:]
}

extension NodeInstance {
    mutating func end(request: RequestID, now: MeshInstant) {
        let statement = SessionEnd(signingKey: identity.publicKey, session: session.sessionID).signed(by: authority)
        log(.notice, "ending the session for every member")
        beginEnding(statement, requests: [request], skipping: [], now: now)
    }

    mutating func receiveEnd(_ statement: SessionEnd, from peer: NodeID, now: MeshInstant) {
        guard closing.ending == nil, phase.isActive else { return }
        let author = statement.author
        guard statement.session == session.sessionID,
            author == localID || (knownMemberIDs.contains(author) && !keying.epochs.removed.contains(author)),
            statement.hasValidSignature(authority)
        else {
            counters.endsRefused += 1
            return log(
                .warning, "refused an end of the session that is not valid here",
                ["from": displayName(of: peer), "author": displayName(of: author)])
        }
        log(.notice, "the session was ended", ["by": displayName(of: author)])
        beginEnding(statement, requests: [], skipping: [peer, author], now: now)
    }

    private mutating func beginEnding(
        _ statement: SessionEnd, requests: [RequestID], skipping: Set<NodeID>,
        now: MeshInstant
    ) {
        let author = statement.author
        // A member back alone after a restart knows the author only from `members.json`.
        let name =
            author == localID
            ? membership.me.name
            : membership.member(author)?.record.name ?? directory.remembered.members.first { $0.id == author.hex }?.name
                ?? ""
        emit(.sessionEnded(by: author, name: name))
        store(.saveEnded(statement.encoded), .saveEnded)
        closing.ending = SessionEnding(
            statement: statement, requests: requests, sendID: nil, until: now + settings.endGrace,
            informed: skipping)
        // A leave waiting for a handover has nothing left to hand over to.
        for request in closing.handover?.requests ?? [] { complete(request, .failure(.sessionEnded(by: author))) }
        closing.handover = nil
        let recipients = activeMemberIDs.filter { !skipping.contains($0) }
        guard !recipients.isEmpty,
            let (sendID, directives) = try? delivery.send(
                JournalMessage.end(statement).encoded, to: recipients,
                mode: .reliable, stream: .journal, now: now,
                timeout: settings.endGrace)
        else {
            return finishEnding(now: now)
        }
        closing.ending?.sendID = sendID
        apply(directives, now: now)
    }

    mutating func endingTick(now: MeshInstant) {
        if let ending = closing.ending, now >= ending.until { finishEnding(now: now) }
    }

    /// Leaves once the end was acknowledged and so was everything sent before it. An end
    /// acknowledged out of order (selectively) is delivered only after the earlier messages of its
    /// stream, and those arrive only while this node still retransmits them: a node that ended a
    /// session a moment after a member joined stopped before its first journal messages (sent
    /// before the member held its keys, so dropped) went again, and the member never heard the end.
    mutating func finishEndingIfDrained(now: MeshInstant) {
        guard let ending = closing.ending, ending.sendID == nil, delivery.pendingSends == 0 else { return }
        finishEnding(now: now)
    }

    /// Every member told acknowledged it (or gave up), or the grace passed: leave.
    mutating func finishEnding(now: MeshInstant) {
        guard let state = closing.ending, phase.isActive else { return }
        closing.ending?.sendID = nil
        let departure = membership.leave(now: now)
        apply(departure, now: now)
        phase = .leaving
        for request in state.requests { complete(request, .success(.ended)) }
        closing.ending?.requests = []
    }

    /// A datagram of the ending epoch from a member while we end: a member that was not told
    /// (back from offline, or not live when we sent it) is answered with the signed end, alone in a
    /// hello datagram, at most once a second per member, and never more than three times the size
    /// of what it answers unless it came from where we reach that member.
    mutating func answerWithEnd(_ datagram: OpenedDatagram, size: Int, from source: PeerAddress, now: MeshInstant) {
        guard let state = closing.ending else { return }
        let sender = datagram.header.sender
        guard sender != localID, !state.informed.contains(sender), membership.member(sender) != nil,
            !datagram.frames.contains(where: { if case .sessionEnd = $0 { true } else { false } })
        else { return }
        if let last = state.answeredAt[sender], now < last + EndedSessionNotice.answerInterval { return }
        let answer = keying.codec.sealHello([.sessionEnd(state.statement)], nonce: randomNonce())
        let proven = directory.addresses[sender] == source || learnedAddress(of: sender) == source
        guard proven || answer.readableBytes <= EndedSessionNotice.answerFactor * size else { return }
        closing.ending?.answeredAt[sender] = now
        counters.endsAnswered += 1
        transmit(answer, to: source, kind: .keys)
    }

    /// Who ended the session, once it is ending.
    package var endedBy: NodeID? { closing.ending?.statement.author }
}
