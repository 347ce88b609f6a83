import MeshCrypto

/// Where a join through seeds stands, while no member has answered.
package struct JoinProgress: Sendable, Equatable {
    /// Where the join goes: the invite's addresses, `--join`, the seeds kept from an earlier
    /// start, and the members remembered from the last run.
    package var addresses: [PeerAddress]
    /// Tries of those addresses so far, the first included.
    package var attempts: Int
    /// When the join started (the node's start).
    package var since: MeshInstant
    /// A member answered that the session moved to a key this node is not owed (its invite is
    /// out of date): the author of that rotation.
    package var outOfDateBy: NodeID?

    package init(addresses: [PeerAddress], attempts: Int, since: MeshInstant, outOfDateBy: NodeID? = nil) {
        self.addresses = addresses
        self.attempts = attempts
        self.since = since
        self.outOfDateBy = outOfDateBy
    }
}

/// A join that has not met anyone yet: whether the user was told.
struct JoinWait: Sendable {
    var since: MeshInstant
    var noticeAt: MeshInstant
    var told = false
    /// The author of a rotation that left our epoch without us, once a member answered with one.
    var outOfDateBy: NodeID?
}

/// The first hour of a joiner: the decision to say that nobody answers (and, after that, who
/// did) is the core's, at a time its settings give; the driver only prints it.
extension NodeInstance {
    /// While joining through seeds and nobody has answered: where, how often, since when.
    package var joinProgress: JoinProgress? {
        guard phase == .joining, let joinWait = directory.joinWait, membership.isJoining else { return nil }
        return JoinProgress(
            addresses: membership.joinSeeds, attempts: membership.joinAttempts, since: joinWait.since,
            outOfDateBy: joinWait.outOfDateBy)
    }

    /// A member answered our join with the rotation that left the epoch we speak, and it does
    /// not owe us the next (PROTOCOL.md §7, "An out-of-date invite"): said once; we keep trying,
    /// since anyone who held the old key could have signed such a rotation. A node that took
    /// part (its asks of the members it lost are joins too) is told the same, once, when a
    /// member it knows sent it and none is alive to it: it was left off the roster while it was
    /// away. (While members are alive to it, such a notice is one member's word against theirs.)
    mutating func noteOutOfDateInvite(_ rotation: KeyRotation, from sender: NodeID) {
        // Told already: the members keep answering each try, which is no refused handover.
        if directory.joinWait?.outOfDateBy != nil || directory.leftOutBy != nil { return }
        let joining = directory.joinWait != nil && membership.isJoining
        guard joining || (activeMemberIDs.isEmpty && knownMemberIDs.contains(sender)),
            rotation.previousSession == keying.epochs.current.sessionID, !rotation.owes(localID),
            rotation.hasValidSignature(authority)
        else { return counters.handoversRefused += 1 }
        if joining { directory.joinWait?.outOfDateBy = rotation.author } else { directory.leftOutBy = rotation.author }
        log(.notice, "the session moved to a key this node is not owed", ["by": "\(rotation.author)"])
        emit(.inviteOutOfDate(by: rotation.author))
    }

    /// The author of the rotation this node was left out of, once told (`noteOutOfDateInvite`).
    package var leftOutBy: NodeID? { directory.leftOutBy }

    var joinNoticeDeadline: MeshInstant? {
        guard phase == .joining, let joinWait = directory.joinWait, !joinWait.told else { return nil }
        return joinWait.noticeAt
    }

    /// Tells once that nobody answers yet, when the notice's time has come.
    mutating func joinTick(now: MeshInstant) {
        if directory.joinWait != nil, phase == .running { return endJoinWait(sender: nil, address: nil, now: now) }
        guard let wait = directory.joinWait, !wait.told, now >= wait.noticeAt else { return }
        // Marked even with nothing to say (only gone members heard of): a deadline left in the
        // past would make the driver's timer spin.
        directory.joinWait?.told = true
        // A member answered that the invite is out of date, which was said: no "no answer yet".
        guard wait.outOfDateBy == nil, let progress = joinProgress else { return }
        log(
            .notice, "waiting for a first member",
            [
                "addresses": "\(progress.addresses.count)",
                "attempts": "\(progress.attempts)",
            ])
        emit(.waitingForFirstMember(progress))
    }

    /// A datagram from `sender` let us in (or, with no sender, something else did): the wait is
    /// over. Said only if the wait was told; the seeds given at start are dropped from the data
    /// dir, since the members remembered now say where the session is.
    mutating func endJoinWait(sender: NodeID?, address: PeerAddress?, now: MeshInstant) {
        guard let wait = directory.joinWait, phase == .running else { return }
        directory.joinWait = nil
        if !directory.remembered.seeds.isEmpty {
            directory.remembered.seeds = []
            directory.rememberedDirty = true
        }
        guard wait.told else { return }
        let live = membership.view.dropFirst().filter { !$0.status.isGone }
        guard let met = live.first(where: { $0.id == sender }) ?? live.first,
            let at = (met.id == sender ? address : nil) ?? directory.addresses[met.id] ?? met.address
        else { return }
        emit(.joinedAfterWaiting(member: met.id, name: met.record.name, address: at, waited: now - wait.since))
    }

    /// The seeds given at start are kept (a restart that met nobody tries them again without
    /// the invite); with none given, those kept from an earlier start are used.
    mutating func rememberSeeds(_ given: [PeerAddress]) -> [PeerAddress] {
        guard !given.isEmpty else { return directory.remembered.seedAddresses }
        var unique = Set<PeerAddress>()
        let kept = given.filter { unique.insert($0).inserted }.prefix(settings.maxRememberedSeeds)
        directory.remembered.seeds = kept.map(\.description)
        return Array(kept)
    }
}
