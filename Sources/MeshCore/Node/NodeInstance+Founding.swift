import MeshCrypto

/// The session's founding id (PROTOCOL.md §3, "Founding"): the founder names the session by the
/// hash of its id and a nonce, and every version frame carries the id as its sender holds it, the
/// founder's with its nonce. A member that joined takes the id from its door alone (the member
/// that signed its introduction), and learns who founded the session from the founder's own
/// frame. Nothing depends on it yet: it is what lets a later release tell the founder, whom
/// nobody introduced, from a member invented by another.
extension NodeInstance {
    /// What the data dir gave: ours when this dir founded the session with a nonce, else what
    /// `members.json` kept (the founder of a session made by a release without it has none).
    static func founding(_ restored: Restored, localID: NodeID) -> SessionFounding? {
        if restored.founded, let nonce = restored.foundingNonce, nonce.count == FoundingID.nonceByteCount {
            return SessionFounding(foundedBy: localID, nonce: nonce)
        }
        return restored.remembered.sessionFounding
    }

    /// The session's founding id, and who founded it, as far as this node knows.
    package var founding: SessionFounding? { directory.founding }

    /// What our version frames carry: the id we hold, and our nonce when we founded it.
    var foundingClaim: (id: FoundingID?, nonce: [UInt8]?) {
        (directory.founding?.id, directory.founding?.nonce)
    }

    /// A member's version frame (pairwise: `member` sent it) named a founding id, or none.
    mutating func hearFounding(_ announcement: VersionAnnouncement, from member: NodeID, now: MeshInstant) {
        guard let claimed = announcement.founding else {
            // A member we let in that holds none: our frame that carried the id may have crossed
            // its answer to one that did not. Asked once more, once (a member of release 0.10.0
            // never holds one).
            if directory.founding != nil, directory.introductions[member]?.door == localID,
                directory.foundingRetold.count < Self.maxFoundingRetold,
                directory.foundingRetold.insert(member).inserted
            {
                versions.reask(member, now: now)
            }
            return
        }
        let proves = announcement.foundingNonce.map { claimed.isMade(by: member, nonce: $0) } ?? false
        guard var held = directory.founding else {
            // Only the door that signed our introduction: any member could name an id of its own.
            guard directory.introductions[localID]?.door == member else { return }
            directory.founding = SessionFounding(id: claimed, founder: proves ? member : nil)
            log(.info, "the session's founding id is \(claimed)", ["door": member.hex])
            saveRemembered()
            // Told to every member: those we let in take it from us, and the founder's answer
            // proves it (its frames that came before were not taken).
            return reaskEveryMember(now: now)
        }
        guard claimed == held.id else {
            counters.foundingMismatches += 1
            return
        }
        guard proves, held.founder != member else { return }
        held.founder = member
        directory.founding = held
        saveRemembered()
    }

    /// Members we let in that were asked once more for the founding id, at most (`foundingRetold`).
    static let maxFoundingRetold = 64

    /// Our door was removed. The id it told us goes too, unless a member that was not removed
    /// proved it: a door that lied named an id of its own making, which it proved itself, as a
    /// rule. The next door tells it again.
    mutating func forgetFoundingOfRemovedDoor() {
        guard let held = directory.founding, held.nonce == nil else { return }
        if let founder = held.founder, !keying.epochs.removed.contains(founder) { return }
        directory.founding = nil
        log(.info, "the founding id our removed door told us is forgotten; the next door tells it again")
    }
}
