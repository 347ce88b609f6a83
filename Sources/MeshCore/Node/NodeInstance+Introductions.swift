import MeshCrypto

/// Introductions (PROTOCOL.md §3, "Introductions"): a member that joined asks the member whose answer let it in
/// (its door) to sign that it did, countersigns, and tells every member that speaks protocol 2
/// beside its version frame, which is asked until answered: so each member learns who let
/// each other in. Only protocol 2 carries them; a member of the previous release is unintroduced.
extension NodeInstance {
    /// Who let `member` in, as far as we know.
    package func introduction(of member: NodeID) -> Introduction? { directory.introductions[member] }

    /// Our own introduction, beside our version frame to a member that speaks protocol 2.
    func introductionFrames(for member: NodeID) -> [Frame] {
        guard let own = directory.introductions[localID], versions.allows(.introduction, to: member) else { return [] }
        return [.introduction(own)]
    }

    /// The request to our door until it answers: once we are in through a member that speaks
    /// protocol 2, and hold no introduction; not while the door is gone.
    mutating func introductionsTick(now: MeshInstant) {
        let door = membership.joinedThrough.flatMap { membership.member($0) }.flatMap { $0.status.isGone ? nil : $0.id }
        if let door, directory.introductions[localID] == nil, versions.allows(.introductionRequest, to: door) {
            directory.introductions.ask(door, localID: localID, now: now)
        } else if door == nil {
            directory.introductions.stopAsking()
        }
        guard let door = directory.introductions.due(now: now) else { return }
        sendPairwise([.introductionRequest(IntroductionRequest())], to: door)
    }

    /// Introduction frames of a pairwise datagram, which is its sender's own.
    mutating func receiveIntroductions(_ frames: ArraySlice<Frame>, from sender: NodeID, now: MeshInstant) {
        for frame in frames {
            switch frame {
            case .introductionRequest: answerIntroductionRequest(from: sender, now: now)
            case let .introduction(introduction): receiveIntroduction(introduction, from: sender, now: now)
            default: continue
            }
        }
    }

    /// A member asks us to sign that we let it in. Any live member that asks is answered (once
    /// per interval): it holds the session's secret and its own keys, as a joiner does.
    private mutating func answerIntroductionRequest(from member: NodeID, now: MeshInstant) {
        guard member != localID, let known = membership.member(member), !known.status.isGone,
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
            let own = introduction.countersigned(by: authority)
            directory.introductions.take(own)
            directory.introductions.stopAsking()
            directory.rememberedDirty = true
            log(.info, "introduced by \(displayName(of: sender))", ["door": sender.hex])
            // Every member that speaks protocol 2 is asked again, with it beside.
            for member in membership.view.dropFirst() where !member.status.isGone {
                if versions.allows(.introduction, to: member.id) { versions.reask(member.id, now: now) }
            }
            return
        }
        // A member's own, both signed: the record we hold has its key.
        guard introduction.member == sender, let record = membership.member(sender)?.record,
            introduction.isValid(memberKey: record.signingKey, authority)
        else { return counters.countDrop(.malformed) }
        if directory.introductions.take(introduction) { directory.rememberedDirty = true }
    }
}
