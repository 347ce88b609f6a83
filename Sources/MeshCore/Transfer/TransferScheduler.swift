import MeshCrypto

/// Decides which chunk to ask of which member (the swarm's brain; pure). Requests go to every
/// holder at once, rarest chunks first, so a fresh attachment spreads through the members
/// instead of everyone pulling it from its uploader; each member gets a window of requests in
/// flight that grows while it keeps up and halves when it times out; near the end the last
/// chunks are asked of a second holder (end game); a member that sends a chunk whose hash does
/// not match is not asked for that chunk again, and one that does so repeatedly is avoided.
public struct TransferScheduler: Sendable {
    public struct Settings: Sendable, Equatable {
        public var initialWindow = 2
        public var maximumWindow = 16
        public var requestTimeout: Duration = .seconds(3)
        /// End game when no more than this many chunks are missing.
        public var endGameChunks = 4
        /// Bad chunks after which a member is avoided altogether.
        public var maxBadChunks = 3
        public init() {}
    }

    public struct Request: Sendable, Equatable {
        public var peer: NodeID
        public var attachment: SHA256Digest
        public var index: Int
        public var digest: SHA256Digest
    }

    struct Job: Sendable {
        var manifest: Manifest
        var have: ChunkBitmap
        /// Index → the members asked, with when.
        var inFlight: [Int: [NodeID: MeshInstant]] = [:]
        /// Index → members that sent a bad copy.
        var refused: [Int: Set<NodeID>] = [:]
    }

    struct Peer: Sendable {
        var window: Int
        var inFlight = 0
        var badChunks = 0
    }

    public let settings: Settings
    private var jobs: [SHA256Digest: Job] = [:]
    private var availability: [NodeID: [SHA256Digest: ChunkBitmap]] = [:]
    private var peers: [NodeID: Peer] = [:]
    private var random: SplitMix64
    public private(set) var timeouts: UInt64 = 0

    public init(settings: Settings = .init(), seed: UInt64) {
        self.settings = settings
        self.random = SplitMix64(seed: seed)
    }

    public var activeAttachments: [SHA256Digest] { jobs.keys.sorted() }

    public func progress(_ attachment: SHA256Digest) -> (have: Int, total: Int)? {
        jobs[attachment].map { ($0.have.held, $0.have.count) }
    }

    /// The largest number of requests in flight any member has, and its window (for tests).
    public func window(of peer: NodeID) -> (inFlight: Int, window: Int)? {
        peers[peer].map { ($0.inFlight, $0.window) }
    }

    /// Members that announced some chunks of the attachment.
    public func peersWithChunks(of attachment: SHA256Digest) -> [NodeID] {
        availability.filter { ($0.value[attachment]?.held ?? 0) > 0 }.map(\.key).sorted()
    }

    public func isAvoided(_ peer: NodeID) -> Bool { (peers[peer]?.badChunks ?? 0) >= settings.maxBadChunks }

    // MARK: input

    /// Starts (or resumes) fetching the attachment; `have` says which chunks are already stored.
    public mutating func start(_ manifest: Manifest, have: ChunkBitmap) {
        let id = manifest.id
        guard jobs[id] == nil, !have.isComplete else { return }
        jobs[id] = Job(manifest: manifest, have: have)
    }

    public mutating func cancel(_ attachment: SHA256Digest) {
        guard let job = jobs.removeValue(forKey: attachment) else { return }
        for asked in job.inFlight.values { for peer in asked.keys { peers[peer]?.inFlight -= 1 } }
    }

    /// What a member announced it holds of an attachment.
    public mutating func setAvailability(_ bitmap: ChunkBitmap, of attachment: SHA256Digest, at peer: NodeID) {
        availability[peer, default: [:]][attachment] = bitmap
        if peers[peer] == nil { peers[peer] = Peer(window: settings.initialWindow) }
    }

    /// A member is gone: what it was asked goes back to the pool.
    public mutating func removePeer(_ peer: NodeID) {
        availability[peer] = nil
        peers[peer] = nil
        for id in jobs.keys {
            for (index, asked) in jobs[id]?.inFlight ?? [:] where asked[peer] != nil {
                jobs[id]?.inFlight[index]?[peer] = nil
                if jobs[id]?.inFlight[index]?.isEmpty == true { jobs[id]?.inFlight[index] = nil }
            }
        }
    }

    /// A chunk arrived from `peer` and was checked against its hash. Returns true when it
    /// completed its attachment.
    @discardableResult
    public mutating func onChunk(attachment: SHA256Digest, index: Int, from peer: NodeID, valid: Bool) -> Bool {
        guard var job = jobs[attachment] else { return false }
        if job.inFlight[index]?.removeValue(forKey: peer) != nil {
            peers[peer]?.inFlight -= 1
        }
        if valid {
            job.have.insert(index)
            // Other copies asked in the end game are no longer needed.
            for other in job.inFlight[index]?.keys ?? [:].keys { peers[other]?.inFlight -= 1 }
            job.inFlight[index] = nil
            if var state = peers[peer] {
                state.window = min(settings.maximumWindow, state.window + 1)
                peers[peer] = state
            }
        } else {
            job.refused[index, default: []].insert(peer)
            peers[peer]?.badChunks += 1
            if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
        }
        if job.have.isComplete {
            jobs[attachment] = nil
            return true
        }
        jobs[attachment] = job
        return false
    }

    /// `peer` answered that it does not have the chunk (after all): ask someone else, no penalty.
    public mutating func onMissing(attachment: SHA256Digest, index: Int, from peer: NodeID) {
        guard var job = jobs[attachment], job.inFlight[index]?.removeValue(forKey: peer) != nil else { return }
        peers[peer]?.inFlight -= 1
        job.refused[index, default: []].insert(peer)
        if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
        jobs[attachment] = job
    }

    /// Whether some chunk of the attachment is asked of someone right now.
    public func hasRequestsInFlight(_ attachment: SHA256Digest) -> Bool {
        !(jobs[attachment]?.inFlight.isEmpty ?? true)
    }

    /// Requests that went unanswered: their members' windows halve, the chunks are asked again.
    public mutating func onTick(now: MeshInstant) {
        for id in jobs.keys.sorted() {
            guard var job = jobs[id] else { continue }
            for index in job.inFlight.keys.sorted() {
                for (peer, sentAt) in job.inFlight[index] ?? [:] where now >= sentAt + settings.requestTimeout {
                    job.inFlight[index]?[peer] = nil
                    timeouts += 1
                    if var state = peers[peer] {
                        state.inFlight -= 1
                        state.window = max(1, state.window / 2)
                        peers[peer] = state
                    }
                }
                if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
            }
            jobs[id] = job
        }
    }

    public var nextDeadline: MeshInstant? {
        var deadline: MeshInstant?
        for job in jobs.values {
            for asked in job.inFlight.values {
                for sentAt in asked.values {
                    let due = sentAt + settings.requestTimeout
                    deadline = deadline.map { min($0, due) } ?? due
                }
            }
        }
        return deadline
    }

    // MARK: output

    /// Fills every member's window: for each attachment, missing chunks not yet asked, rarest
    /// first (random among equals), each from a random holder with room; then the end game.
    public mutating func nextRequests(now: MeshInstant) -> [Request] {
        var requests: [Request] = []
        for id in jobs.keys.sorted() {
            guard var job = jobs[id] else { continue }
            let holdersByChunk = holders(of: id, count: job.have.count)
            var missing = (0..<job.have.count).filter { !job.have.contains($0) && job.inFlight[$0] == nil }
            missing.shuffle(using: &random)
            missing.sort { holdersByChunk[$0].count < holdersByChunk[$1].count }
            for index in missing {
                guard let peer = pickHolder(holdersByChunk[index], excluding: job.refused[index] ?? []) else { continue }
                ask(peer, index: index, in: &job, now: now, into: &requests)
            }
            // End game: the last few chunks, each also from a second holder.
            let outstanding = job.have.count - job.have.held
            if outstanding <= settings.endGameChunks {
                for index in job.inFlight.keys.sorted() where (job.inFlight[index]?.count ?? 0) == 1 {
                    let asked = Set(job.inFlight[index]?.keys ?? [:].keys)
                    guard let peer = pickHolder(holdersByChunk[index], excluding: asked.union(job.refused[index] ?? [])) else { continue }
                    ask(peer, index: index, in: &job, now: now, into: &requests)
                }
            }
            jobs[id] = job
        }
        return requests
    }

    private mutating func ask(_ peer: NodeID, index: Int, in job: inout Job, now: MeshInstant, into requests: inout [Request]) {
        job.inFlight[index, default: [:]][peer] = now
        peers[peer]?.inFlight += 1
        requests.append(Request(peer: peer, attachment: job.manifest.id, index: index, digest: job.manifest.chunks[index]))
    }

    private func holders(of attachment: SHA256Digest, count: Int) -> [[NodeID]] {
        var result = [[NodeID]](repeating: [], count: count)
        for peer in availability.keys.sorted() {
            guard let bitmap = availability[peer]?[attachment], bitmap.count == count, !isAvoided(peer) else { continue }
            for index in 0..<count where bitmap.contains(index) { result[index].append(peer) }
        }
        return result
    }

    /// A random holder with room in its window, not among `excluded`.
    private mutating func pickHolder(_ holders: [NodeID], excluding excluded: Set<NodeID>) -> NodeID? {
        let open = holders.filter { peer in
            guard !excluded.contains(peer), let state = peers[peer] else { return false }
            return state.inFlight < state.window
        }
        guard !open.isEmpty else { return nil }
        return open[Int(random.next() % UInt64(open.count))]
    }
}
