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

    /// The request for our introduction until one comes: once we are in, hold none, and did not
    /// make the session. The member we came in through is asked first; one that refuses, goes or
    /// stays silent is passed over for the next member that speaks protocol 2. Members we signed
    /// for or introduced are not asked (two members that joined through each other: the first to
    /// sign stays unintroduced, and no loop forms).
    mutating func introductionsTick(now: MeshInstant) {
        dropIntroductionOfRemovedDoor()
        guard membership.joinedThrough != nil, directory.introductions[localID] == nil, !directory.remembered.founder
        else { return directory.introductions.stopAsking() }
        // Called on every tick: nothing to choose while the next request is not due.
        if directory.introductions.isWaiting(on: isLiveMember, now: now) { return }
        for _ in 0..<2 {
            directory.introductions.ask(among: introductionCandidates(), localID: localID, now: now)
            if let door = directory.introductions.due(now: now) {
                return sendPairwise([.introductionRequest(IntroductionRequest())], to: door)
            }
            // Passed over a silent member: the next is asked at once.
            if directory.introductions.request != nil { return }
        }
    }

    /// Who may introduce us, in the order asked: the member that removed our door (it kept us),
    /// the member we came in through, then the others by id. Not one we let in (directly or
    /// through members we let in, as far as we know: a loop), nor one we know to be full.
    private func introductionCandidates() -> [NodeID] {
        let book = directory.introductions
        // Members whose door a removal of ours took ask us first: asking them back would cross.
        let removedByUs = Set(
            keying.epochs.transitions.lazy.filter { $0.rotation.author == localID }.flatMap(\.rotation.removed))
        var candidates: [NodeID] = []
        for member in membership.view.dropFirst()
        where !member.status.isGone && versions.allows(.introductionRequest, to: member.id)
            && !book.hasSigned(for: member.id) && !closesLoop(through: member.id)
            && hasRoom(in: member.id, for: localID)
            && !(book[member.id].map { removedByUs.contains($0.door) } ?? false)
        {
            candidates.append(member.id)
        }
        candidates.sort()
        for first in [membership.joinedThrough, book.preferred] {
            guard let first, let index = candidates.firstIndex(of: first) else { continue }
            candidates.remove(at: index)
            candidates.insert(first, at: 0)
        }
        return candidates
    }

    /// The members `member` introduced, directly or through members it introduced, that are
    /// still members (not left, not removed), as far as we know: never us, nor what we
    /// introduced, nor a member of `keeping` or what it introduced. Through members that are no
    /// longer ones too (what they introduced may still be). By generation, each generation by
    /// door, then by id.
    func introducedTree(of member: NodeID, keeping: Set<NodeID> = []) -> [NodeID] {
        var byDoor: [NodeID: [NodeID]] = [:]
        for introduction in directory.introductions.byMember.values {
            byDoor[introduction.door, default: []].append(introduction.member)
        }
        var found: [NodeID] = []
        var seen: Set<NodeID> = [member, localID]
        var doors = [member]
        while !doors.isEmpty {
            var next: [NodeID] = []
            for door in doors {
                for child in (byDoor[door] ?? []).sorted() where !seen.contains(child) && !keeping.contains(child) {
                    seen.insert(child)
                    next.append(child)
                    if let known = membership.member(child), known.status != .left,
                        !keying.epochs.removed.contains(child)
                    {
                        found.append(child)
                    }
                }
            }
            doors = next
        }
        return found
    }

    /// A rotation removed our door (we were kept, or the remover did not know it let us in; also
    /// found at a start, after a crash between the two writes): our introduction names a member
    /// that is no longer one, so we drop it and ask for a new one, the rotation's author first.
    /// From the tick, once the handovers of a rotation we made are out.
    private mutating func dropIntroductionOfRemovedDoor() {
        guard let own = directory.introductions[localID], keying.epochs.removed.contains(own.door) else { return }
        directory.introductions.forget(localID)
        let removal = keying.epochs.transitions.last { $0.rotation.removed.contains(own.door) }?.rotation
        if let author = removal?.author { directory.introductions.prefer(author) }
        forgetFoundingOfRemovedDoor()
        saveRemembered()
        log(.info, "the member that introduced us was removed; asking for a new introduction")
    }

    /// Introduction frames of a pairwise datagram, which is its sender's own. One introduction
    /// a datagram: each costs signature checks.
    mutating func receiveIntroductions(_ frames: ArraySlice<Frame>, from sender: NodeID, now: MeshInstant) {
        var introductionTaken = false
        for frame in frames {
            switch frame {
            case .introductionRequest: answerIntroductionRequest(from: sender, now: now)
            case let .introductionRefusal(refusal):
                guard directory.introductions.refused(by: sender) else { continue }
                log(
                    .debug,
                    "\(displayName(of: sender)) does not introduce us (\(refusal.reason)); asking the next member")
                introductionsTick(now: now)
            case let .introduction(introduction) where !introductionTaken:
                introductionTaken = true
                receiveIntroduction(introduction, from: sender, now: now)
            default: continue
            }
        }
    }

    /// A live member asks us to sign that we let it in (one answer per interval). Its word is all
    /// we have. A member whose introduction we hold gets that one back (it lost its own), unless
    /// its door was removed. We refuse, so that it asks the next member: one that let us in,
    /// directly or through our doors (a loop); one that we ask at the same time, when its id is
    /// the larger; any past the live members one door may introduce.
    private mutating func answerIntroductionRequest(from member: NodeID, now: MeshInstant) {
        guard member != localID, let known = membership.member(member), !known.status.isGone,
            directory.introductions.mayAnswer(member, now: now)
        else { return }
        // Its request is protocol 2's: it speaks it, though its version frame may not have come.
        // Not one whose door was removed: the member asks because that one is void.
        if let held = directory.introductions[member], !keying.epochs.removed.contains(held.door) {
            return sendPairwise([.introduction(held)], to: member, gated: false)
        }
        if let reason = introductionRefusal(of: member) {
            return sendPairwise([.introductionRefusal(IntroductionRefusal(reason: reason))], to: member, gated: false)
        }
        let introduction = Introduction.signed(by: authority, admitting: member, in: session.sessionID)
        directory.introductions.signed(for: member)
        sendPairwise([.introduction(introduction)], to: member, gated: false)
    }

    private func introductionRefusal(of member: NodeID) -> IntroductionRefusal.Reason? {
        let book = directory.introductions
        if closesLoop(through: localID, for: member) { return .loop }
        if book.awaits(member) && member < localID { return .crossing }
        if !hasRoom(in: localID, for: member) { return .full }
        return nil
    }

    /// Whether `door` may introduce `member`, as far as we know (PROTOCOL.md §3: 16 live members).
    private func hasRoom(in door: NodeID, for member: NodeID) -> Bool {
        directory.introductions.hasRoom(in: door, for: member, localID: localID, isLive: isLiveMember)
    }

    /// An answer we asked for that we cannot take: as a refusal, and the next member is asked.
    private mutating func passOver(_ sender: NodeID, now: MeshInstant) {
        _ = directory.introductions.refused(by: sender)
        introductionsTick(now: now)
    }

    /// Whether `asker` (we, unless said) being introduced by `door` could close a loop
    /// (`IntroductionBook.mayCloseLoop`).
    private func closesLoop(through door: NodeID, for asker: NodeID? = nil) -> Bool {
        let removed = keying.epochs.removed
        return directory.introductions.mayCloseLoop(
            through: door, for: asker ?? localID, localID: localID, isVoid: removed.contains)
    }

    /// Whether `member` is in our view and not gone: what an introduction bound counts.
    private func isLiveMember(_ member: NodeID) -> Bool {
        membership.member(member).map { !$0.status.isGone } ?? false
    }

    private mutating func receiveIntroduction(_ introduction: Introduction, from sender: NodeID, now: MeshInstant) {
        if introduction.member == localID {
            // The answer of the member we asked (one for each request that came: the first is
            // taken). Signed by it for us to countersign, or, when we lost ours, the one it held.
            guard directory.introductions.awaits(sender) else { return }
            let taken: Introduction
            if introduction.isCountersigned {
                guard introduction.isValid(memberKey: authority.signingKey, authority) else {
                    return counters.countDrop(.malformed)
                }
                // One by a removed door is void: as a refusal.
                guard !keying.epochs.removed.contains(introduction.door) else { return passOver(sender, now: now) }
                taken = introduction
            } else {
                guard introduction.door == sender, introduction.isSignedByDoor(authority) else {
                    return counters.countDrop(.malformed)
                }
                // One that would close a loop, or that the others would not take (its door is
                // full as far as we know): as a refusal.
                guard !closesLoop(through: sender), hasRoom(in: sender, for: localID)
                else { return passOver(sender, now: now) }
                taken = introduction.countersigned(by: authority)
            }
            directory.introductions.take(taken)
            directory.introductions.stopAsking()
            // Written at once: a crash now must not make us ask another door at the next start.
            saveRemembered()
            log(.info, "introduced by \(displayName(of: taken.door))", ["door": taken.door.hex])
            // Every member that speaks protocol 2 is asked again, with it beside.
            return reaskEveryMember(now: now)
        }
        // A live member's own, both signed: the record we hold has its key.
        guard introduction.member == sender, let member = membership.member(sender), !member.status.isGone else {
            return counters.countDrop(.malformed)
        }
        let held = directory.introductions[sender]
        guard held != introduction else { return }
        guard introduction.isValid(memberKey: member.record.signingKey, authority) else {
            return counters.countDrop(.malformed)
        }
        // By a door that was removed: void (a member cannot park itself under one, out of every
        // removal's reach).
        guard !keying.epochs.removed.contains(introduction.door) else { return }
        // Past the bound of its door (a door that signed for more than it may): not taken, and
        // the member stays as introduced as we knew it.
        if held?.door != introduction.door,
            !hasRoom(in: introduction.door, for: sender)
        {
            counters.introductionsPastBound += 1
            return
        }
        if directory.introductions.take(introduction) { directory.rememberedDirty = true }
    }
}
