import MeshCrypto

/// The slow check of every chunk (and manifest) of the attachments this node holds whole (a
/// scrub). A chunk is
/// hashed when it is read, but one nobody asks for could sit damaged on disk for months while the
/// node says it holds the attachment whole, and a member that leaves counts on that copy and
/// hands nothing over. So those chunks are read again in passes, one at a time and spaced, and
/// never while a fetch runs or a chunk is being read for a member: the first pass soon after
/// start, then one a day.
package struct ChunkScrub: Sendable {
    /// One pass: the chunks it started from, and how far it got.
    struct Pass: Sendable {
        var chunks: [SHA256Digest]
        var next = 0
    }

    enum Phase: Sendable {
        /// Not started: the first tick sets the first pass.
        case starting
        /// Until the next pass.
        case waiting(until: MeshInstant)
        /// A pass, and when its next read goes.
        case scrubbing(Pass, nextAt: MeshInstant)
        /// A read is out; its outcome spaces the next.
        case reading(Pass)
    }

    package struct Settings: Sendable {
        /// Between passes; nil: no scrub.
        package var every: Duration? = .seconds(24 * 3600)
        /// The first pass after start, once start-up's own reads are done.
        package var firstAfter: Duration = .seconds(60)
        /// Between two reads of a pass (a 100 MiB attachment of 256 KiB chunks: 40 s).
        package var spacing: Duration = .milliseconds(100)
        /// How long a read waits while the node is busy fetching or reading for members.
        package var busyWait: Duration = .seconds(5)

        package init() {}
    }

    /// Chunks no longer held that one tick passes over (an attachment removed mid-pass): the
    /// rest wait for the next tick, so a tick stays short however large the library.
    static let maxSkipsPerTick = 256

    var phase = Phase.starting
    /// Chunks read by the scrub, and those found damaged.
    package private(set) var chunksChecked: UInt64 = 0
    package private(set) var chunksDamaged: UInt64 = 0

    package init() {}

    var nextDeadline: MeshInstant? {
        switch phase {
        case .starting: .zero
        case let .waiting(until): until
        case let .scrubbing(_, nextAt): nextAt
        case .reading: nil
        }
    }

    /// The chunk to read now, if one is due: a pass starts from `held` (every chunk of the
    /// attachments held whole, once each) and passes over what is no longer held when its turn
    /// comes.
    mutating func due(
        now: MeshInstant, settings: Settings, busy: Bool, held: () -> [SHA256Digest],
        stillHeld: (SHA256Digest) -> Bool
    ) -> SHA256Digest? {
        guard let every = settings.every, let deadline = nextDeadline, now >= deadline else { return nil }
        var pass: Pass
        switch phase {
        case .starting:
            phase = .waiting(until: now + settings.firstAfter)
            return nil
        case .waiting: pass = Pass(chunks: held())
        case let .scrubbing(current, _): pass = current
        case .reading: return nil
        }
        if busy {
            phase = .scrubbing(pass, nextAt: now + settings.busyWait)
            return nil
        }
        var skipped = 0
        while pass.next < pass.chunks.count {
            let chunk = pass.chunks[pass.next]
            pass.next += 1
            if stillHeld(chunk) {
                phase = .reading(pass)
                return chunk
            }
            skipped += 1
            if skipped >= Self.maxSkipsPerTick {
                phase = .scrubbing(pass, nextAt: now + settings.spacing)
                return nil
            }
        }
        phase = .waiting(until: now + every)
        return nil
    }

    /// The read of a chunk came back: `intact` unless it failed its hash (or was gone).
    mutating func read(intact: Bool, now: MeshInstant, settings: Settings) {
        guard case let .reading(pass) = phase else { return }
        chunksChecked += 1
        if !intact { chunksDamaged += 1 }
        phase = .scrubbing(pass, nextAt: now + settings.spacing)
    }
}
