import MeshCrypto

/// Introductions (PROTOCOL.md §3, "Introductions"): a member that joined asks the member whose
/// answer let it in (its door) to sign that it did, countersigns, and tells every member that
/// speaks protocol 2 beside its version frame, asked again until that member's version frame
/// names the same door: so each member learns who let each other in. Only protocol 2 carries
/// them; the founder and members of the previous release are unintroduced.
extension NodeInstance {
    /// Who let `member` in, as far as we know.
    package func introduction(of member: NodeID) -> Introduction? { directory.introductions[member] }

    /// Our own introduction, beside our version frame to a member that speaks protocol 2 (and,
    /// answering its frame, only when that frame named another door).
    func introductionFrames(for member: NodeID, answering: VersionAnnouncement? = nil) -> [Frame] {
        guard let own = directory.introductions[localID], versions.allows(.introduction, to: member),
            answering.map({ $0.heldDoor != own.door.high }) ?? true
        else { return [] }
        return [.introduction(own)]
    }

    /// What our version frame to `member` says we hold of its introduction: its door.
    func heldDoor(of member: NodeID) -> UInt64? { directory.introductions[member]?.door.high }

    /// The request to our door until it answers: once we are in through a member that speaks
    /// protocol 2, hold no introduction, and did not make the session; not while the door is gone,
    /// nor when we signed for it (two members that joined through each other: the first to sign
    /// stays unintroduced, and no loop forms).
    mutating func introductionsTick(now: MeshInstant) {
        let door = membership.joinedThrough.flatMap { membership.member($0) }.flatMap { $0.status.isGone ? nil : $0.id }
        guard let door, directory.introductions[localID] == nil, !directory.remembered.founder,
            !directory.introductions.hasSigned(for: door), versions.allows(.introductionRequest, to: door)
        else { return directory.introductions.stopAsking() }
        directory.introductions.ask(door, localID: localID, now: now)
        guard directory.introductions.due(now: now) != nil else { return }
        sendPairwise([.introductionRequest(IntroductionRequest())], to: door)
    }

    /// Introduction frames of a pairwise datagram, which is its sender's own. One introduction
    /// a datagram: each costs signature checks.
    mutating func receiveIntroductions(_ frames: ArraySlice<Frame>, from sender: NodeID, now: MeshInstant) {
        var introductionTaken = false
        for frame in frames {
            switch frame {
            case .introductionRequest: answerIntroductionRequest(from: sender, now: now)
            case let .introduction(introduction) where !introductionTaken:
                introductionTaken = true
                receiveIntroduction(introduction, from: sender, now: now)
            default: continue
            }
        }
    }

    /// A live member asks us to sign that we let it in (once per interval). Its word is all we
    /// have: a member we know introduced already is refused (it would change its door), and so is
    /// one that let us in, directly or through our doors (a loop). Two members asking each other
    /// at once: the smaller id answers. What one door may introduce is bounded by ROADMAP's next
    /// step, not here.
    private mutating func answerIntroductionRequest(from member: NodeID, now: MeshInstant) {
        guard member != localID, directory.introductions[member] == nil,
            !directory.introductions.isInChain(member, from: localID),
            !(directory.introductions.awaits(member) && member < localID),
            let known = membership.member(member), !known.status.isGone,
            directory.introductions.mayAnswer(member, now: now)
        else { return }
        let introduction = Introduction.signed(by: authority, admitting: member, in: session.sessionID)
        // Its request is protocol 2's: it speaks it, though its version frame may not have come.
        sendPairwise([.introduction(introduction)], to: member, gated: false)
    }

    private mutating func receiveIntroduction(_ introduction: Introduction, from sender: NodeID, now: MeshInstant) {
        if introduction.member == localID {
            // Our door's answer (one for each request that came: the first is taken).
            guard directory.introductions.awaits(sender) else { return }
            guard !introduction.isCountersigned, introduction.door == sender, introduction.isSignedByDoor(authority)
            else { return counters.countDrop(.malformed) }
            directory.introductions.take(introduction.countersigned(by: authority))
            directory.introductions.stopAsking()
            // Written at once: a crash now must not make us ask another door at the next start.
            saveRemembered()
            log(.info, "introduced by \(displayName(of: sender))", ["door": sender.hex])
            // Every member that speaks protocol 2 is asked again, with it beside.
            for member in membership.view.dropFirst() where !member.status.isGone {
                if versions.allows(.introduction, to: member.id) { versions.reask(member.id, now: now) }
            }
            return
        }
        // A live member's own, both signed: the record we hold has its key.
        guard introduction.member == sender, let member = membership.member(sender), !member.status.isGone else {
            return counters.countDrop(.malformed)
        }
        guard directory.introductions[sender] != introduction else { return }
        guard introduction.isValid(memberKey: member.record.signingKey, authority) else {
            return counters.countDrop(.malformed)
        }
        if directory.introductions.take(introduction) { directory.rememberedDirty = true }
    }
}
