import MeshCrypto

/// The serving side's initial seeding (BitTorrent's super-seeding; pure): a member that added the
/// content itself sends each chunk about once and leaves the rest to the members that hold it.
/// The node asks it what to do with each want of a chunk it seeds (`verdict`), tells it which
/// wants it admitted (`admitted`), what members announced (`onAnnounced`), and who is gone
/// (`removePeer`). Every other holder serves whatever it has, and never asks.
package struct SeedingPolicy: Sendable {
    package struct Settings: Sendable, Equatable {
        /// A chunk only we hold is served once per this long (initial seeding): the others get
        /// it from the member that has it, so an uploader sends each chunk about once. Longer
        /// than a request timeout, so a copy lost on the way is sent again soon.
        package var seedingInterval: Duration = .seconds(2)
        /// A chunk only we hold, sent to one member, goes to another member too this long after
        /// the first asked, whatever its copy does: a member whose pace has fallen so low, or
        /// that keeps re-asking, must not keep the others waiting.
        package var seedingPatience: Duration = .seconds(10)
        /// A member told "left to others" because others hold the chunk is served anyway after
        /// this long, so stale availability cannot starve it (the requester's
        /// `TransferScheduler.Settings.leftToOthersWait` is as long, so a seed asked again serves).
        package var busyGrace: Duration = .seconds(5)
        package init() {}
    }

    /// What a seed does with a want.
    package enum Verdict: Sendable, Equatable {
        /// Serve it: the chunk is new to everyone, another seed holds it, or the same member asks again.
        case serve
        /// Serve a second copy of a chunk, for this reason.
        case serveAgain(SecondCopy)
        /// Answer "left to others": the chunk is left to the member that has it or is getting it.
        case leave
    }

    /// Why a seed sends a second copy of a chunk.
    package enum SecondCopy: String, Sendable, Equatable {
        /// The member was turned away for `busyGrace`: the members that hold it did not serve it.
        case turnedAwayTooLong
        /// The first copy of a chunk only we held left `seedingInterval` ago and its member has
        /// not announced it: lost, or its member is gone.
        case firstCopyLost
        /// `seedingPatience` passed since the first member asked, and it has not announced the
        /// chunk: its pace is too slow (or it keeps the chunk to itself).
        case firstCopyTooSlow
    }

    /// A member turned away from a chunk.
    struct Refusal: Sendable {
        var first: MeshInstant
        /// Served after `busyGrace`: it stays served, and the copy counts once.
        var served = false
    }

    /// A chunk only we held, served to one member.
    struct SeededCopy: Sendable {
        var peer: NodeID
        /// When that member was first served it.
        var servedAt: MeshInstant
        /// The latest time its pieces were known to be leaving us.
        var seenLeaving: MeshInstant
    }

    package let settings: Settings
    /// Chunks we served that no one else is known to hold, with to whom and when.
    private var seeded: [SHA256Digest: [Int: SeededCopy]] = [:]
    /// When each member was first told "left to others" for a chunk, and whether it was served
    /// all the same.
    private var refusals: [SHA256Digest: [Int: [NodeID: Refusal]]] = [:]
    /// Members that announced part of an attachment (not all of it at once): a seed leaves
    /// chunks to them once they hold it whole too.
    private var seenFetching: [SHA256Digest: Set<NodeID>] = [:]

    package init(settings: Settings = .init()) {
        self.settings = settings
    }

    /// What a member announced it holds of an attachment: one seen with part of it is a member
    /// fetching it, trusted with the whole later.
    package mutating func onAnnounced(_ bitmap: ChunkBitmap, of attachment: SHA256Digest, at peer: NodeID) {
        if bitmap.held > 0, !bitmap.isComplete { seenFetching[attachment, default: []].insert(peer) }
    }

    /// A member is gone: what it was refused, and what we seeded to it (lost with it), are
    /// forgotten; back (restarted), it is a member like any other.
    package mutating func removePeer(_ peer: NodeID) {
        for id in refusals.keys {
            for index in refusals[id]?.keys ?? [:].keys { refusals[id]?[index]?[peer] = nil }
        }
        for id in seeded.keys {
            seeded[id] = seeded[id]?.filter { $0.value.peer != peer }
        }
        for id in seenFetching.keys { seenFetching[id]?.remove(peer) }
    }

    /// What to do with `peer`'s want for chunk `index` of an attachment we seed (we added its
    /// content, and hold it whole). `seeders` are the members that added the content (us among
    /// them); `holders` what each member that may be asked announced of the attachment (not
    /// those avoided for bad chunks). A seed sends each chunk about once:
    /// - a chunk that a member seen fetching the attachment announced is left to it, also once
    ///   it holds the whole (not to one that claimed the whole file at once);
    /// - another member that added the content seeds like us: while one holds it whole, we serve
    ///   all we are asked (two seeds would send each other's requesters away);
    /// - a chunk only we hold goes to one member at a time (`admitted` records to whom, once
    ///   the want is admitted), and to another only `seedingInterval` after the copy to the first
    ///   has left us (`leftAt`: when its last piece left, now while it is still queued or read,
    ///   nil when unknown): its member lost it, or is gone; or once `seedingPatience` has passed
    ///   since the first member asked, however it fares.
    /// The requester hears "left to others" and asks them. So that stale availability cannot starve
    /// anyone, a member refused a chunk that others hold is served anyway after `busyGrace` (and
    /// from then on: its asks for pieces it lost too).
    package mutating func verdict(
        attachment: SHA256Digest, index: Int, to peer: NodeID, seeders: Set<NodeID>,
        holders: [NodeID: ChunkBitmap], now: MeshInstant,
        leftAt: (NodeID) -> MeshInstant?
    ) -> Verdict {
        // Left to members seen fetching it (they showed what they held as it arrived), also once
        // they hold it whole: the uploader sends less. Not to a member
        // that claimed the whole file at once: it may be a liar, and its claim would make every
        // fetch wait out `busyGrace` for each chunk.
        let elsewhere = holders.contains { holder, bitmap in
            guard holder != peer, !seeders.contains(holder) else { return false }
            return bitmap.contains(index) && (!bitmap.isComplete || seenFetching[attachment]?.contains(holder) == true)
        }
        if elsewhere {
            guard let refusal = refusals[attachment]?[index]?[peer] else {
                refusals[attachment, default: [:]][index, default: [:]][peer] = Refusal(first: now)
                return .leave
            }
            if refusal.served { return .serve }
            return now >= refusal.first + settings.busyGrace ? .serveAgain(.turnedAwayTooLong) : .leave
        }
        let otherSeeds = holders.contains { holder, bitmap in
            holder != peer && seeders.contains(holder) && bitmap.isComplete
        }
        // The member it went to asks again only for pieces that were lost on the way: it gets them.
        guard !otherSeeds, let copy = seeded[attachment]?[index], copy.peer != peer else { return .serve }
        // Paced for a slow member, a chunk takes seconds to leave: timed from the want, the
        // interval ran out while its pieces were still queued, and another member got a second
        // copy.
        let left = max(copy.seenLeaving, leftAt(copy.peer) ?? copy.seenLeaving)
        seeded[attachment]?[index]?.seenLeaving = left
        if now >= copy.servedAt + settings.seedingPatience { return .serveAgain(.firstCopyTooSlow) }
        return now >= left + settings.seedingInterval ? .serveAgain(.firstCopyLost) : .leave
    }

    /// `peer`'s want for chunk `index` was admitted (after `verdict`, unless it left the chunk to
    /// others): the chunk is now on its way to that member. A want again from the same member
    /// keeps the patience counting from its first; a member served after its grace stays served
    /// (`Refusal.served`). A want refused later (a full queue) is never admitted: it holds the
    /// chunk for nobody.
    package mutating func admitted(attachment: SHA256Digest, index: Int, to peer: NodeID, now: MeshInstant) {
        refusals[attachment]?[index]?[peer]?.served = true
        if seeded[attachment]?[index]?.peer == peer {
            seeded[attachment]?[index]?.seenLeaving = now
        } else {
            seeded[attachment, default: [:]][index] = SeededCopy(peer: peer, servedAt: now, seenLeaving: now)
        }
    }
}
