import MeshCrypto

/// Protocol versions (PROTOCOL.md §3, "Protocol versions"): each member's boot is told ours in a
/// `protocolVersion` frame (alone in a pairwise datagram, or with our introduction to a member
/// known to speak protocol 2) until it answers or is taken for protocol 1; a frame of a later
/// protocol goes only to members that speak it (`mayCarry`).
extension NodeInstance {
    /// The gate: whether `frames` may go to `peer`. Every frame introduced after protocol 1 is sent
    /// with `sendPairwise`, and passes here. A frame the member would not know makes it drop the
    /// whole datagram, so such a datagram is not sent.
    func mayCarry(_ frames: [Frame], to peer: NodeID) -> Bool {
        for frame in frames where frame.type.introducedIn > ProtocolVersion.unannounced {
            if !versions.allows(frame.type, to: peer) { return false }
        }
        return true
    }

    /// A member's boot got keys: ask what it speaks. A member gone is forgotten (asked again
    /// should it come back).
    mutating func metVersions(of member: Member, now: MeshInstant) {
        guard settings.knowsVersionFrames, member.id != localID else { return }
        if member.status.isGone { return versions.forget(member.id) }
        guard keying.codec.installedBoot(of: member.id) == member.record.bootID else { return }
        versions.met(member.id, boot: member.record.bootID, now: now)
    }

    mutating func versionsTick(now: MeshInstant) {
        guard settings.knowsVersionFrames else { return }
        let (memberPaths, silence) = (links.paths, pathSilence)
        let (ask, gaps) = versions.due(now: now) { member in
            memberPaths.relay(of: member) != nil || memberPaths.isDirect(member, within: silence, now: now)
        }
        for member in ask { announceVersions(to: member) }
        for gap in gaps { reportGap(gap) }
        introductionsTick(now: now)
    }

    /// A member's version frame: learn it, answer it, and report once when we cannot follow.
    mutating func receiveVersion(_ announcement: VersionAnnouncement, header: DatagramHeader, now: MeshInstant) {
        let member = header.sender
        let (answer, gap) = versions.received(announcement, from: member, boot: header.bootID, now: now)
        if answer { announceVersions(to: member, answering: announcement) }
        if let gap { reportGap(gap) }
        hearFounding(announcement, from: member, now: now)
        // Until the member names the door of the introduction we hold, it is asked again, with it
        // beside (an answer of ours that carried it may be lost, and is not answered).
        if let own = heldDoor(of: localID), announcement.heldDoor != own, versions.allows(.introduction, to: member) {
            versions.reask(member, now: now)
        }
        introductionsTick(now: now)
    }

    /// Every live member that speaks protocol 2 is asked again: our version frame carries what
    /// changed (our introduction, the founding id).
    mutating func reaskEveryMember(now: MeshInstant) {
        for member in membership.view.dropFirst() where !member.status.isGone {
            if versions.allows(.introduction, to: member.id) { versions.reask(member.id, now: now) }
        }
    }

    /// Our version frame: an ask, or the answer to `answering`.
    private mutating func announceVersions(to member: NodeID, answering: VersionAnnouncement? = nil) {
        // Alone, or with our introduction to a member known to speak it: a member of a release
        // without the frame drops only this datagram.
        let founding = foundingClaim
        let version = Frame.protocolVersion(
            VersionAnnouncement(
                versions: versions.ours, isAnswer: answering != nil, heldDoor: heldDoor(of: member),
                founding: founding.id, foundingNonce: founding.nonce))
        sendPairwise([version] + introductionFrames(for: member, answering: answering), to: member)
    }

    /// An event, not a log record: the driver says it in one line of its own.
    private mutating func reportGap(_ gap: PeerVersions.Gap) {
        let name = membership.member(gap.member)?.record.name ?? ""
        emit(.protocolGap(member: gap.member, name: name, theirs: gap.theirs, ours: gap.ours))
    }
}
