import MeshCrypto

/// The requesting side of chunk transfers: which chunks are being pulled from whom, the pieces
/// so far, and when to ask again for only the pieces that did not come. Pure: time comes in,
/// wants and whole chunks go out. Memory is bounded by `maxDownloads` chunks.
package struct ChunkAssembler: Sendable {
    package struct Settings: Sendable {
        /// Piece size asked for where nothing larger is known to fit (what fills a datagram of
        /// the base size every path carries).
        package var pieceSize: Int
        /// Silence after which the missing pieces are asked for again: twice the holder's
        /// smoothed answer time, at least this; doubles while nothing comes, up to `maximumStall`.
        /// Mostly it catches a burst whose last piece was lost, so it should be short where the
        /// holder answers quickly and long where it cannot.
        package var stallTimeout: Duration = .milliseconds(5)
        /// Wait for a holder's first piece before we know how quickly it answers. After that,
        /// three times its smoothed answer time (a holder serves wants one after another, so a
        /// full queue is not a loss).
        package var firstPieceTimeout: Duration = .milliseconds(250)
        /// The shortest wait for a first piece: a holder's queue of wants can be longer than
        /// its usual answer, and asking again while it is only busy costs a second copy.
        package var minimumWholeWait: Duration = .milliseconds(40)
        /// While no piece came, the whole chunk is asked again with this wait doubling up to
        /// here (the want may have been lost, or the holder's queue is long).
        package var maximumWholeWait: Duration = .seconds(4)
        /// When the last piece asked for arrives with gaps before it, the gaps are asked for
        /// after this long: pieces overtaken on the way still have time to arrive.
        package var reorderGrace: Duration = .milliseconds(5)
        package var maximumStall: Duration = .seconds(1)
        /// A chunk nobody sent a piece of for this long is dropped with its pieces.
        package var abandonAfter: Duration = .seconds(30)
        package var maxDownloads = 128
        /// And their lengths together at most (a manifest may make chunks of up to 4 MiB).
        package var maxOpenBytes = 32 << 20

        package init(pieceSize: Int) { self.pieceSize = pieceSize }
    }

    package enum PieceResult: Sendable, Equatable {
        case accepted
        /// Already here, or of another shape than asked for (a chunk length other than the
        /// manifest's, a piece size other than ours).
        case duplicate
        /// A piece of a chunk nobody asked for: dropped.
        case unsolicited
        /// The last piece: the chunk, every member that sent pieces of it (to blame all of them
        /// should its hash not match), and the members that may still have pieces of it queued
        /// (to be told to drop them).
        case complete(bytes: [UInt8], contributors: Set<NodeID>, stillSending: [NodeID])
    }

    struct Download {
        /// The chunk's length from its manifest: pieces claiming another are refused, so a
        /// member cannot make us set aside more than the chunk.
        let length: Int
        /// Members asked for it; the newest is asked again when pieces stop coming.
        var holders: [NodeID]
        /// One size for all of a chunk's pieces, whoever sends them: the newest holder's, until
        /// the first piece came.
        var pieceSize: Int
        var assembly: ChunkAssembly?
        var contributors: Set<NodeID> = []
        var lastContributor: NodeID?
        var lastActivity: MeshInstant
        /// The silence after a piece before asking again, from the newest holder's answer time.
        var silence: Duration
        var stall: Duration
        var nextAsk: MeshInstant
        /// A want to a holder with nothing of ours queued (no other open chunk had asked it), and
        /// when it went: its first piece comes a round trip later, give or take the piece its pace
        /// was still spacing. Behind our own pieces it comes when the holder's pace reaches it,
        /// which at a low rate is seconds (a replicator near its floor would take such an answer
        /// for its round trip, and its control interval with it). Nil once the chunk was asked again
        /// (which want a piece answers is unknown, as Karn's rule has it for TCP's retransmissions)
        /// or the sample was taken.
        var roundTripFrom: (holder: NodeID, at: MeshInstant)?
        /// The highest piece index asked of the newest holder.
        var lastAsked = Int.max
        /// The wait before asking for the whole chunk again while no piece has come.
        var wholeWait: Duration
        /// Its missing pieces were asked for again: it waits for a repair, not a flow of pieces.
        var repairing = false
        /// Wants sent for it, to anyone, and everyone they went to with when each was first asked
        /// (`holders` forgets those that answered busy, whose earlier pieces may still be queued).
        var wants = 0
        var asked: [NodeID: MeshInstant] = [:]
        /// When a piece last came from a member asked for it (anyone's pieces are placed, but only
        /// these say the fetch goes on: a stranger's trickle must not keep it alive).
        var lastAskedPiece: MeshInstant?

        enum Placement { case refused, placed(answerTime: Duration?, roundTrip: Duration?, complete: Bool) }

        /// Members asked that may still have pieces queued once the chunk is whole: none when one
        /// member was asked once (it sent each piece once, the last one last); else every member
        /// asked (another's copy, or a want again for pieces still on the line, queued some twice).
        var mayStillSend: [NodeID] {
            asked.count == 1 && wants == 1 ? [] : asked.keys.sorted()
        }

        /// Places a piece; with the holder's answer time when it was the first piece from the
        /// holder last asked, and whether the chunk is now whole. Everything is decided here,
        /// in place: reading the download out of the table would copy it per piece.
        mutating func add(_ piece: ChunkPiece, from peer: NodeID, now: MeshInstant, settings: Settings) -> Placement {
            guard piece.chunkLength == length, piece.pieceSize == pieceSize else { return .refused }
            if assembly == nil {
                assembly = ChunkAssembly(digest: piece.digest, length: piece.chunkLength, pieceSize: piece.pieceSize)
            }
            guard assembly?.add(piece) == true else { return .refused }
            let answer: Duration? = contributors.isEmpty && peer == holders.last ? asked[peer].map { now - $0 } : nil
            var roundTrip: Duration?
            if let from = roundTripFrom, from.holder == peer {
                roundTrip = now - from.at
                roundTripFrom = nil
            }
            // Hashing a node id per piece shows in profiles: most pieces come from the last sender.
            if peer != lastContributor {
                contributors.insert(peer)
                lastContributor = peer
            }
            lastActivity = now
            if asked[peer] != nil { lastAskedPiece = now }
            stall = silence
            nextAsk = now + stall
            guard assembly?.isComplete != true else {
                return .placed(answerTime: answer, roundTrip: roundTrip, complete: true)
            }
            // The last piece asked for came with gaps before it: a holder sends in order, so
            // they were lost (or overtaken): ask for them after a short grace, not a silence.
            let lastAsked = lastAsked == Int.max ? (assembly?.received.count ?? 0) - 1 : lastAsked
            if piece.index >= lastAsked, peer == holders.last { nextAsk = now + settings.reorderGrace }
            return .placed(answerTime: answer, roundTrip: roundTrip, complete: false)
        }
    }

    package let settings: Settings
    private var downloads: [SHA256Digest: Download] = [:]
    /// Smoothed time from a want to its first piece, per holder.
    private var answerTime: [NodeID: Duration] = [:]
    package private(set) var reasks: UInt64 = 0
    /// The latest want-to-first-piece time of a holder that had nothing of ours queued, until
    /// taken (the downlink's round trip).
    private var roundTripSample: Duration?
    /// Pieces come paced: silences shorter than this are the pace, not loss (the node sets it
    /// from the rate it asked for).
    package var minimumSilence: Duration = .zero
    /// Piece sizes larger than the base that a holder's path was proven to carry.
    private var pieceSizes: [NodeID: Int] = [:]
    /// Whole chunks asked again of a holder at a piece size above the base, with not a piece
    /// back: a sign that its path stopped carrying that size (a black hole). Until taken.
    private var silences: [(holder: NodeID, pieceSize: Int)] = []

    package init(settings: Settings) { self.settings = settings }

    package var activeCount: Int { downloads.count }

    /// Chunks that only wait for lost pieces asked again, each with the member last asked for it
    /// (on a lossy path most chunks do, for a round trip or two, while they hold no pieces on the line).
    package var repairingChunks: [(digest: SHA256Digest, holder: NodeID)] {
        downloads.compactMap { digest, download in
            guard download.repairing, let holder = download.holders.last else { return nil }
            return (digest, holder)
        }
    }

    /// The piece size to ask `holder` for.
    package func pieceSize(for holder: NodeID) -> Int {
        pieceSizes[holder] ?? settings.pieceSize
    }

    /// The largest piece size asked of anyone now (pieces of it come furthest apart at a pace).
    package var largestPieceSize: Int {
        pieceSizes.values.max() ?? settings.pieceSize
    }

    /// `holder`'s path carries pieces of `size` (nil: only the base). Chunks without a piece
    /// yet take the new size with their next want.
    package mutating func setPieceSize(_ size: Int?, for holder: NodeID) {
        pieceSizes[holder] = size.flatMap { $0 > settings.pieceSize ? $0 : nil }
    }

    /// The silent wants seen since the last call.
    package mutating func takeSilences() -> [(holder: NodeID, pieceSize: Int)] {
        defer { silences.removeAll() }
        return silences
    }
    package func isDownloading(_ digest: SHA256Digest) -> Bool { downloads[digest] != nil }

    /// When a piece of the chunk last came from a member asked for it; nil before the first.
    package func lastAskedPiece(of digest: SHA256Digest) -> MeshInstant? { downloads[digest]?.lastAskedPiece }

    /// Starts (or widens) the pull of a chunk from `holder`: the want to send, asking only for
    /// what is missing when pieces already came from others. Nil when too many chunks are open.
    package mutating func begin(
        _ digest: SHA256Digest, length: Int, from holder: NodeID, now: MeshInstant
    ) -> ChunkWant? {
        let idle = !downloads.values.contains { $0.asked[holder] != nil }
        if var download = downloads[digest] {
            download.holders.removeAll { $0 == holder }
            download.holders.append(holder)
            download.roundTripFrom = idle ? (holder, now) : nil
            download.silence = silence(for: holder)
            // What is missing now comes from this holder as a flow, not as one repair.
            download.repairing = false
            downloads[digest] = download
            return want(for: digest, download, now: now)
        }
        guard downloads.count < settings.maxDownloads,
            downloads.values.reduce(length, { $0 + $1.length }) <= settings.maxOpenBytes
        else { return nil }
        let wait = max(
            minimumSilence,
            answerTime[holder].map { min(settings.maximumStall, max(settings.minimumWholeWait, $0 * 3)) }
                ?? settings.firstPieceTimeout)
        let download = Download(
            length: length, holders: [holder], pieceSize: pieceSize(for: holder),
            lastActivity: now, silence: silence(for: holder),
            stall: settings.stallTimeout, nextAsk: now + wait,
            roundTripFrom: idle ? (holder, now) : nil, wholeWait: wait)
        downloads[digest] = download
        return want(for: digest, download, now: now)
    }

    /// The want for what is missing, remembering the last piece it asks for. Before the first
    /// piece, at the newest holder's piece size. Pieces larger than that holder's path carries
    /// (it shrank, or the chunk came from a holder on a larger path) make the chunk start over
    /// at the smaller size: asking again at the old one would go unanswered for good.
    private mutating func want(for digest: SHA256Digest, _ download: Download, now: MeshInstant) -> ChunkWant {
        var download = download
        if let holder = download.holders.last {
            let size = pieceSize(for: holder)
            if let assembly = download.assembly, assembly.pieceSize > size {
                download.assembly = nil
                download.contributors = []
                download.lastContributor = nil
                download.repairing = false
            }
            if download.assembly == nil { download.pieceSize = size }
        }
        let missing = download.assembly?.missing
        download.lastAsked = missing.map(Self.highest) ?? Int.max
        download.wants += 1
        if let holder = download.holders.last, download.asked[holder] == nil { download.asked[holder] = now }
        downloads[digest] = download
        return ChunkWant(digest: digest, pieceSize: download.pieceSize, missing: missing)
    }

    /// Twice the holder's answer time, within the settings' bounds.
    private func silence(for holder: NodeID) -> Duration {
        let silence =
            answerTime[holder].map { min(settings.maximumStall, max(settings.stallTimeout, $0 * 2)) }
            ?? settings.stallTimeout
        return max(silence, minimumSilence)
    }

    static func highest(in bitmap: ChunkBitmap) -> Int {
        (0..<bitmap.count).last(where: bitmap.contains) ?? Int.max
    }

    package mutating func onPiece(_ piece: ChunkPiece, from peer: NodeID, now: MeshInstant) -> PieceResult {
        guard let position = downloads.index(forKey: piece.digest) else { return .unsolicited }
        // One hash lookup, and the download changes in place (its chunk buffer is not copied).
        guard
            case let .placed(sample, roundTrip, complete) = downloads.values[position].add(
                piece, from: peer, now: now,
                settings: settings)
        else {
            return .duplicate
        }
        if let roundTrip { roundTripSample = roundTrip }
        if let firstAnswer = sample {
            answerTime[peer] = answerTime[peer].map { $0 * 0.75 + firstAnswer * 0.25 } ?? firstAnswer
            downloads.values[position].silence = silence(for: peer)
        }
        guard complete else { return .accepted }
        let download = downloads.remove(at: position).value
        return .complete(
            bytes: download.assembly?.contents ?? [], contributors: download.contributors,
            stillSending: download.mayStillSend)
    }

    /// The round trip the last piece measured (a first piece from a holder that had nothing of
    /// ours queued ahead of it), once.
    package mutating func takeRoundTripSample() -> Duration? {
        defer { roundTripSample = nil }
        return roundTripSample
    }

    /// `holder` will not send the chunk: it is not asked again. The pieces stay for the next holder.
    package mutating func onAbsent(_ digest: SHA256Digest, from holder: NodeID) {
        downloads[digest]?.holders.removeAll { $0 == holder }
    }

    /// The chunk is no longer wanted. Returns the members asked for it (they may still be sending).
    @discardableResult
    package mutating func cancel(_ digest: SHA256Digest) -> [NodeID] {
        downloads.removeValue(forKey: digest)?.asked.keys.sorted() ?? []
    }

    /// A member is gone: it is asked nothing more.
    package mutating func removeHolder(_ holder: NodeID) {
        answerTime[holder] = nil
        pieceSizes[holder] = nil
        for digest in downloads.keys { downloads[digest]?.holders.removeAll { $0 == holder } }
    }

    /// Asks again for the missing pieces of chunks that went quiet, and drops abandoned ones.
    package mutating func onTick(now: MeshInstant) -> [(peer: NodeID, want: ChunkWant)] {
        var out: [(peer: NodeID, want: ChunkWant)] = []
        for digest in downloads.keys.sorted() {
            guard var download = downloads[digest] else { continue }
            if now >= download.lastActivity + settings.abandonAfter {
                downloads[digest] = nil
                continue
            }
            guard now >= download.nextAsk else { continue }
            if download.assembly == nil {
                // Not a piece yet: the want may have been lost, or the holder's queue is long
                // (then asking again costs a second copy), so the wait doubles each time.
                download.wholeWait = max(minimumSilence, min(settings.maximumWholeWait, download.wholeWait * 2))
                download.nextAsk = now + download.wholeWait
            } else {
                download.stall = max(minimumSilence, min(settings.maximumStall, download.stall * 2))
                download.nextAsk = now + download.stall
            }
            download.roundTripFrom = nil
            downloads[digest] = download
            if let holder = download.holders.last {
                if download.assembly != nil { download.repairing = true }
                // Nothing back at a size above the base: a whole chunk unanswered, or a chunk under
                // way whose pieces stopped for the longest stall (a path that shrank mid-chunk).
                if download.pieceSize > settings.pieceSize,
                    download.assembly == nil || now >= download.lastActivity + settings.maximumStall
                {
                    silences.append((holder, download.pieceSize))
                }
                out.append((holder, want(for: digest, download, now: now)))
                reasks += 1
            }
        }
        return out
    }

    package var nextDeadline: MeshInstant? {
        downloads.values.map { min($0.nextAsk, $0.lastActivity + settings.abandonAfter) }.min()
    }
}
