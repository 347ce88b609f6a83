import MeshCrypto
import NIOCore

/// The holder's side of congestion control: the pieces it owes each member leave at the rate
/// that member asked for (its downlink's controller decides; `ChunkWant.rate`, `ChunkPace`),
/// instead of a chunk's worth at once into somebody's home router. Pure: `due(now:)` hands out
/// what may go now, `nextDeadline` says when more may.
///
/// Per member, chunks take turns piece by piece, so each of them starts at once and trickles at
/// an even pace: a requester that hears nothing of a chunk for a while takes it as lost. A want
/// for a chunk whose pieces are still queued adds only the pieces not queued, so asking again
/// for what is late costs no second copy.
package struct PiecePacer: Sendable {
    package struct Settings: Sendable {
        /// Pieces whose time comes within this much go together: one timer per slice instead of
        /// one per datagram, at the price of bursts this long.
        package var slice: Duration = .milliseconds(2)
        /// After a pause (nothing queued), at most this much of the rate may go at once.
        package var burst: Duration = .milliseconds(10)
        package init() {}
    }

    struct Queued: Sendable {
        let digest: SHA256Digest
        var pieces: [ChunkPiece]
        var next = 0
        /// The pieces still to send (a want again for one already sent queues it again).
        var indexes: Set<Int>
    }

    struct Lane: Sendable {
        /// Bytes per second; 0: unpaced.
        var rate = 0
        var nextSendAt = MeshInstant.zero
        var chunks: [Queued] = []
        var turn = 0
        var bytes = 0
        /// When the last piece of each chunk lately sent whole left (at most `recentlyLeftLimit`).
        var recentlyLeft: [SHA256Digest: MeshInstant] = [:]
    }

    /// Chunks per member whose departure time is kept (`leftAt`).
    static let recentlyLeftLimit = 64

    package let settings: Settings
    private var lanes: [NodeID: Lane] = [:]
    package private(set) var queuedBytes = 0

    package init(settings: Settings = .init()) { self.settings = settings }

    package func queuedBytes(for peer: NodeID) -> Int { lanes[peer]?.bytes ?? 0 }
    package func rate(for peer: NodeID) -> Int? { lanes[peer]?.rate }
    package var isEmpty: Bool { queuedBytes == 0 }

    /// Chunks queued for `peer`.
    package func queuedChunks(for peer: NodeID) -> Int { lanes[peer]?.chunks.count ?? 0 }

    /// When a chunk's last piece left for `peer`: `now` while pieces of it are still queued; nil
    /// when it was not sent lately.
    package func leftAt(_ digest: SHA256Digest, for peer: NodeID, now: MeshInstant) -> MeshInstant? {
        guard let lane = lanes[peer] else { return nil }
        if lane.chunks.contains(where: { $0.digest == digest }) { return now }
        return lane.recentlyLeft[digest]
    }

    /// Queues `pieces` of one chunk for `peer`; those already queued are not queued twice.
    /// Returns the payload bytes queued.
    @discardableResult
    package mutating func enqueue(_ pieces: [ChunkPiece], digest: SHA256Digest, to peer: NodeID) -> Int {
        guard !pieces.isEmpty else { return 0 }
        // Each lane is changed where it lies in `lanes`: a lane copied out (and written back)
        // shares its queue with the table's, and the first change then copies the queue and the
        // set of every chunk it touches (a tenth of a pacing holder's tick, perf).
        let (added, dropped) = lanes[peer, default: Lane()].enqueue(pieces, digest: digest)
        queuedBytes += added - dropped
        return added
    }

    /// `peer` wants no more of a chunk: its pieces still queued are dropped. Returns their bytes.
    @discardableResult
    package mutating func cancel(_ digest: SHA256Digest, for peer: NodeID) -> Int {
        let dropped = lanes[peer]?.cancel(digest) ?? 0
        queuedBytes -= dropped
        return dropped
    }

    /// The rate `peer` asked for (bytes per second; 0: unpaced).
    package mutating func setRate(_ rate: Int, for peer: NodeID) {
        lanes[peer, default: Lane()].rate = max(0, rate)
    }

    /// A member is gone, or restarted: its pieces are dropped.
    package mutating func remove(_ peer: NodeID) {
        queuedBytes -= lanes.removeValue(forKey: peer)?.bytes ?? 0
    }

    /// The pieces whose time has come, per member, in the order to send them.
    package mutating func due(now: MeshInstant) -> [(peer: NodeID, pieces: [ChunkPiece])] {
        guard queuedBytes > 0 else { return [] }
        var out: [(peer: NodeID, pieces: [ChunkPiece])] = []
        for peer in lanes.keys.sorted() {
            let pieces = lanes[peer]?.takeDue(now: now, settings: settings) ?? []
            guard !pieces.isEmpty else { continue }
            queuedBytes -= pieces.reduce(0) { $0 + $1.payload.readableBytes }
            out.append((peer, pieces))
        }
        return out
    }

    /// When `due` has pieces to hand out next.
    package var nextDeadline: MeshInstant? {
        guard queuedBytes > 0 else { return nil }
        var deadline: MeshInstant?
        for lane in lanes.values where lane.bytes > 0 {
            // At `nextSendAt` (not a slice before): each tick then sends a slice's worth.
            let at = lane.rate == 0 ? MeshInstant.zero : lane.nextSendAt
            deadline = deadline.map { min($0, at) } ?? at
        }
        return deadline
    }

    static func time(_ bytes: Int, at rate: Int) -> Duration {
        .nanoseconds(Int64(bytes) * 1_000_000_000 / Int64(max(1, rate)))
    }
}

extension PiecePacer.Lane {
    /// Queues a chunk's pieces, or those of them not queued yet. Returns the payload bytes
    /// queued, and those dropped (a chunk queued at another piece size gives way).
    mutating func enqueue(_ pieces: [ChunkPiece], digest: SHA256Digest) -> (added: Int, dropped: Int) {
        var added = 0, dropped = 0
        // Asked again at another piece size (the asker's path shrank): what waits at the old size
        // would go unused, so the new pieces take its place.
        if let position = chunks.firstIndex(where: { $0.digest == digest }),
            chunks[position].pieces.first?.pieceSize != pieces[0].pieceSize
        {
            dropped = removeChunk(at: position)
        }
        if let position = chunks.firstIndex(where: { $0.digest == digest }) {
            for piece in pieces where chunks[position].indexes.insert(piece.index).inserted {
                chunks[position].pieces.append(piece)
                added += piece.payload.readableBytes
            }
        } else {
            chunks.append(PiecePacer.Queued(digest: digest, pieces: pieces, indexes: Set(pieces.map(\.index))))
            added = pieces.reduce(0) { $0 + $1.payload.readableBytes }
        }
        bytes += added
        return (added, dropped)
    }

    /// Drops a queued chunk's unsent pieces; returns their bytes (0 when it is not queued).
    mutating func cancel(_ digest: SHA256Digest) -> Int {
        guard let position = chunks.firstIndex(where: { $0.digest == digest }) else { return 0 }
        return removeChunk(at: position)
    }

    /// The pieces whose time has come, in the order to send them.
    mutating func takeDue(now: MeshInstant, settings: PiecePacer.Settings) -> [ChunkPiece] {
        guard bytes > 0 else { return [] }
        var pieces: [ChunkPiece] = []
        if rate == 0 {
            while let piece = take(now: now) { pieces.append(piece) }
            return pieces
        }
        // Credit does not pile up over a pause: after one, at most `burst` goes at once.
        nextSendAt = max(nextSendAt, now + (.zero - settings.burst))
        let horizon = now + settings.slice
        while nextSendAt <= horizon, let piece = take(now: now) {
            pieces.append(piece)
            nextSendAt = nextSendAt + PiecePacer.time(piece.payload.readableBytes + ChunkPiece.overhead, at: rate)
        }
        return pieces
    }

    /// Drops a queued chunk's unsent pieces; returns their bytes. The turn stays with the chunk
    /// it was at.
    mutating func removeChunk(at position: Int) -> Int {
        let queued = chunks.remove(at: position)
        let dropped = queued.pieces[queued.next...].reduce(0) { $0 + $1.payload.readableBytes }
        if turn > position { turn -= 1 }
        bytes -= dropped
        return dropped
    }

    /// The next piece, taking the chunks in turn.
    mutating func take(now: MeshInstant) -> ChunkPiece? {
        guard !chunks.isEmpty else { return nil }
        if turn >= chunks.count { turn = 0 }
        let piece = chunks[turn].pieces[chunks[turn].next]
        chunks[turn].next += 1
        chunks[turn].indexes.remove(piece.index)
        bytes -= piece.payload.readableBytes
        if chunks[turn].next == chunks[turn].pieces.count {
            noteLeft(chunks.remove(at: turn).digest, at: now)
        } else {
            turn += 1
        }
        return piece
    }

    /// Keeps when a chunk left, forgetting the earliest past the limit.
    mutating func noteLeft(_ digest: SHA256Digest, at now: MeshInstant) {
        recentlyLeft[digest] = now
        if recentlyLeft.count > PiecePacer.recentlyLeftLimit,
            let earliest = recentlyLeft.min(by: { $0.value < $1.value })?.key
        {
            recentlyLeft[earliest] = nil
        }
    }
}
