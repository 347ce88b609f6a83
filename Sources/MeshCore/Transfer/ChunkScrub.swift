import MeshCrypto

/// The slow check of every chunk this node holds whole (a scrub). A chunk is hashed when it is
/// read, but one nobody asks for could sit damaged on disk for months while the node says it
/// holds the attachment whole, and a member that leaves counts on that copy and hands nothing
/// over. So every chunk is read again in passes, one at a time and spaced, and never while a
/// fetch runs or a member's want is being read: the first pass soon after start, then one a day.
package struct ChunkScrub: Sendable {
    enum Phase: Sendable {
        /// Not started: the first tick sets the first pass.
        case starting
        /// Until the next pass.
        case waiting(until: MeshInstant)
        /// What is left of this pass, and when the next read goes.
        case scrubbing(left: [SHA256Digest], nextAt: MeshInstant)
        /// A read is out; its outcome spaces the next.
        case reading(left: [SHA256Digest])
    }

    package struct Settings: Sendable {
        /// Between passes; nil: no scrub.
        package var every: Duration? = .seconds(24 * 3600)
        /// The first pass after start, once start-up's own reads are done.
        package var firstAfter: Duration = .seconds(60)
        /// Between two reads of a pass (a 100 MiB attachment of 256 KiB chunks: 40 s).
        package var spacing: Duration = .milliseconds(100)
        /// How long a read waits while the node is busy fetching or serving.
        package var busyWait: Duration = .seconds(5)

        package init() {}
    }

    var phase = Phase.starting
    /// Chunks read by the scrub, and those found damaged.
    package private(set) var chunksChecked: UInt64 = 0
    package private(set) var chunksDamaged: UInt64 = 0

    var nextDeadline: MeshInstant? {
        switch phase {
        case .starting: .zero
        case let .waiting(until): until
        case let .scrubbing(_, nextAt): nextAt
        case .reading: nil
        }
    }

    /// The chunk to read now, if one is due: a pass starts from `held` (every chunk of the
    /// attachments held whole, in order) and skips what is no longer held when its turn comes.
    mutating func due(
        now: MeshInstant, settings: Settings, busy: Bool, held: () -> [SHA256Digest],
        stillHeld: (SHA256Digest) -> Bool
    ) -> SHA256Digest? {
        guard let every = settings.every, let deadline = nextDeadline, now >= deadline else { return nil }
        var left: [SHA256Digest]
        switch phase {
        case .starting:
            phase = .waiting(until: now + settings.firstAfter)
            return nil
        case .waiting: left = held().reversed()
        case let .scrubbing(rest, _): left = rest
        case .reading: return nil
        }
        if busy {
            phase = .scrubbing(left: left, nextAt: now + settings.busyWait)
            return nil
        }
        while let next = left.popLast() {
            guard stillHeld(next) else { continue }
            phase = .reading(left: left)
            return next
        }
        phase = .waiting(until: now + every)
        return nil
    }

    /// The read of a chunk came back: `intact` unless it failed its hash (or was gone).
    mutating func read(intact: Bool, now: MeshInstant, settings: Settings) {
        guard case let .reading(left) = phase else { return }
        chunksChecked += 1
        if !intact { chunksDamaged += 1 }
        phase = .scrubbing(left: left, nextAt: now + settings.spacing)
    }
}
