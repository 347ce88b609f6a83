import MeshCrypto

/// Decides which chunk to ask of which member (the swarm's brain; pure). Requests go to every
/// holder at once, rarest chunks first, so a fresh attachment spreads through the members
/// instead of everyone pulling it from its uploader; each member gets a window of requests in
/// flight that grows while it keeps up and halves when it times out; near the end the last
/// chunks are asked of a second holder (end game); a member that sends a chunk whose hash does
/// not match is not asked for that chunk again, and one that does so repeatedly is avoided.
package struct TransferScheduler: Sendable {
    package struct Settings: Sendable, Equatable {
        package var initialWindow = 2
        package var maximumWindow = 48
        /// Chunks in flight from all members together, at most (the chunks being assembled, in
        /// memory): the downlink's congestion control sets the limit below this
        /// (`inFlightLimit`), from its rate and round trip, and the chunks waiting for a repair.
        package var maximumInFlight = 128
        /// Of those, chunks whose pieces are still on their way, at most (the rest wait for a
        /// lost piece asked again).
        package var maximumFlowing = 64
        package var requestTimeout: Duration = .milliseconds(1500)
        /// End game when no more than this many chunks are missing: each is asked of a second
        /// holder too, once its request is late (`endGameAfter`).
        package var endGameChunks = 4
        /// Late: this share of the request's timeout has passed, or twice its holder's latency
        /// when sooner, but not this share of the pace's time for a chunk (0: at once).
        package var endGameLateness = 0.5
        /// Bad chunks after which a member is avoided altogether.
        package var maxBadChunks = 3
        /// How long to wait before asking again for a chunk its only holder was too busy to send.
        package var busyRetry: Duration = .milliseconds(200)
        /// A seed that left a chunk to others is not asked for it again while another member
        /// holds it, and then only once this long has passed since its first such answer and
        /// those members failed it (busy, or no answer), or let any request time out with no
        /// chunk from them since (silent); or after four times this, whatever they do. Meanwhile
        /// the chunk waits for room at the holders.
        /// Asked every `busyRetry`, a slow member whose windows at the holders stay full would be
        /// refused again and again and then served a second copy at the seed's `busyGrace`
        /// (Docs/DESIGN-NOTES.md). As long as the seed's grace
        /// (`SeedingPolicy.Settings.busyGrace`), so a seed asked again serves at once.
        package var leftToOthersWait: Duration = .seconds(5)
        package init() {}
    }

    package struct Request: Sendable, Equatable {
        package var peer: NodeID
        package var attachment: SHA256Digest
        package var index: Int
        package var digest: SHA256Digest
    }

    struct Job: Sendable {
        /// The manifest's id, hashed once (it names every request).
        let id: SHA256Digest
        var manifest: Manifest
        var have: ChunkBitmap
        /// Index → the members asked, with when.
        var inFlight: [Int: [NodeID: MeshInstant]] = [:]
        /// Index → members that sent a bad copy.
        var refused: [Int: Set<NodeID>] = [:]
        /// Index → when to ask again after a busy answer.
        var notBefore: [Int: MeshInstant] = [:]
        /// Index → members that said busy for it, until when they are not asked for it.
        var busy: [Int: [NodeID: MeshInstant]] = [:]
        /// Index → seeds that left it to others, with when they first did.
        var leftToOthers: [Int: [NodeID: MeshInstant]] = [:]
        /// Seeds that left some chunk of it to others, with when they last did. A seed leaves
        /// every chunk that members it saw fetching hold, so no chunk others hold is asked of it
        /// first: asked chunk by chunk, a share of a late joiner's first asks would go to a seed
        /// that refuses them all, and the share of the rate told it would go unused, holding slow
        /// start back (it waits for deliveries that cannot catch up; Docs/DESIGN-NOTES.md).
        var seedsLeaving: [NodeID: MeshInstant] = [:]
        /// Indexes a seed left to others that another holder then failed (busy, or no answer).
        var othersFailed: Set<Int> = []
        /// Indexes whose copy, made of pieces from several members, failed its hash: asked of one
        /// member at a time from then on, so the one that lies is found.
        var solo: Set<Int> = []
        /// Indexes whole and being checked and stored: not asked again meanwhile, even when their
        /// requests timed out while the pieces still came.
        var storing: Set<Int> = []
    }

    struct Peer: Sendable {
        var window: Int
        /// When it last let a request time out, and when it last sent a chunk.
        var failedAt: MeshInstant?
        var servedAt: MeshInstant?
        var inFlight = 0
        /// Of `inFlight`, chunks that only wait for lost pieces asked again (`repairing`).
        var repairing = 0
        /// Piece bytes from this member not yet counted toward its window (less than a chunk).
        var credit = 0
        var badChunks = 0
        /// Smoothed time from request to chunk: a slow or busy member gets a longer timeout
        /// instead of being asked again while its answer is still on the way.
        var latency: Duration?

        /// Room for another request: a chunk waiting for a repair holds nothing on the line, and
        /// takes no slot (up to a window's worth of them). Counted in full, on a lossy path a
        /// holder's window fills with chunks waiting a round trip for one piece each, and the
        /// line goes idle at the start of a fetch (Docs/DESIGN-NOTES.md).
        var hasRoom: Bool { inFlight - min(repairing, window) < window }
    }

    package let settings: Settings
    private var jobs: [SHA256Digest: Job] = [:]
    private var availability: [NodeID: [SHA256Digest: ChunkBitmap]] = [:]
    private var peers: [NodeID: Peer] = [:]
    private var random: SplitMix64
    package private(set) var timeouts: UInt64 = 0
    /// The latest time seen by `nextRequests` or `onTick`, for latency samples.
    private var lastNow: MeshInstant?

    /// Chunks in flight in all, as the downlink's congestion control allows (at most the setting).
    package var inFlightLimit: Int?
    /// Holders asked only when no other with room holds the chunk: those reached through a relay
    /// (their pieces cost a third member's link, and are carried at its per-pair rate).
    package var lastResort: Set<NodeID> = []
    /// How long a chunk takes at the pace asked for: no request times out sooner than this.
    package var minimumTimeout: Duration = .zero

    /// How long to wait for `peer`'s answer: at least the settings, and four smoothed latencies.
    func timeout(for peer: NodeID) -> Duration {
        max(settings.requestTimeout, minimumTimeout, (peers[peer]?.latency ?? .zero) * 4)
    }

    /// How long a chunk's only request runs before the end game asks a second holder too: twice
    /// its holder's smoothed latency (before the first, half its timeout: `endGameLateness`), and
    /// never less than half the time a chunk takes at the pace asked for (a latency measured at a
    /// faster pace is no measure of lateness). Asked of both at once, the last chunks would come
    /// twice on a paced line (each holder sends at its share of the rate, and both send the
    /// pieces still missing; Docs/DESIGN-NOTES.md). A late request still gets its second holder:
    /// one that stalls at the end costs this, not a timeout.
    package func endGameAfter(_ peer: NodeID) -> Duration {
        let late = timeout(for: peer) * settings.endGameLateness
        guard let latency = peers[peer]?.latency else { return late }
        return max(min(late, latency * 2), minimumTimeout * settings.endGameLateness)
    }

    /// The one member chunk `index` is asked of, and when the end game asks a second: nil for a
    /// chunk asked of more, of none, of one at a time (`solo`), or being stored.
    private func endGameDue(
        _ index: Int, _ asked: [NodeID: MeshInstant], in job: Job
    ) -> (holder: NodeID, at: MeshInstant)? {
        guard asked.count == 1, !job.solo.contains(index), !job.storing.contains(index),
            let (only, askedAt) = asked.first
        else { return nil }
        return (only, askedAt + endGameAfter(only))
    }

    /// How long after a seed's latest "left to others" its answer stands for the chunks it was
    /// never asked (`Job.seedsLeaving`), and how long a chunk it left waits at most.
    private var seedAnswerLasts: Duration { settings.leftToOthersWait * 4 }

    /// Members that hold chunks still wanted, and may be asked.
    package var holderCount: Int {
        availability.count { peer, attachments in
            !isAvoided(peer)
                && attachments.contains { id, bitmap in
                    guard let job = jobs[id] else { return false }
                    return bitmap.held > 0 && bitmap.count == job.have.count
                }
        }
    }

    /// Chunks in flight to each member that has some.
    package var inFlightByPeer: [NodeID: Int] {
        peers.compactMapValues { $0.inFlight > 0 ? $0.inFlight : nil }
    }
    /// Chunks assembled whose store has not answered yet (still counted in flight).
    package var storingCount: Int { jobs.values.reduce(0) { $0 + $1.storing.count } }
    package init(settings: Settings = .init(), seed: UInt64) {
        self.settings = settings
        self.random = SplitMix64(seed: seed)
    }

    package var activeAttachments: [SHA256Digest] { jobs.keys.sorted() }

    /// The members asked for one of the attachment's chunks, and not answered yet.
    package func holdersSending(_ attachment: SHA256Digest) -> Int {
        guard let job = jobs[attachment] else { return 0 }
        return Set(job.inFlight.values.flatMap(\.keys)).count
    }

    package func progress(_ attachment: SHA256Digest) -> (have: Int, total: Int)? {
        jobs[attachment].map { ($0.have.held, $0.have.count) }
    }

    /// Chunks waiting for a repair, as the requests that asked them, before requests go out. Only
    /// those still in flight to their member count: one whose request timed out holds no slot, and
    /// counted anyway it would open its member's window past what it has on the line.
    /// Returns how many counted.
    @discardableResult
    package mutating func setRepairing(_ chunks: [Request]) -> Int {
        for peer in peers.keys { peers[peer]?.repairing = 0 }
        var counted = 0
        for chunk in chunks
        where jobs[chunk.attachment]?.inFlight[chunk.index]?[chunk.peer] != nil && peers[chunk.peer] != nil {
            peers[chunk.peer]?.repairing += 1
            counted += 1
        }
        return counted
    }

    /// The largest number of requests in flight any member has, and its window (for tests).
    package func window(of peer: NodeID) -> (inFlight: Int, window: Int)? {
        peers[peer].map { ($0.inFlight, $0.window) }
    }

    /// Members that announced some chunks of the attachment.
    package func peersWithChunks(of attachment: SHA256Digest) -> [NodeID] {
        availability.filter { ($0.value[attachment]?.held ?? 0) > 0 }.map(\.key).sorted()
    }

    /// What each member that may be asked (not avoided) announced of the attachment: the holders
    /// a seed weighs (`SeedingPolicy.verdict`).
    package func announced(_ attachment: SHA256Digest) -> [NodeID: ChunkBitmap] {
        var holders: [NodeID: ChunkBitmap] = [:]
        for (peer, attachments) in availability where !isAvoided(peer) {
            if let bitmap = attachments[attachment] { holders[peer] = bitmap }
        }
        return holders
    }

    package func isAvoided(_ peer: NodeID) -> Bool { (peers[peer]?.badChunks ?? 0) >= settings.maxBadChunks }

    // MARK: input

    /// Starts (or resumes) fetching the attachment; `have` says which chunks are already stored.
    package mutating func start(_ manifest: Manifest, have: ChunkBitmap) {
        let id = manifest.id
        guard jobs[id] == nil, !have.isComplete else { return }
        jobs[id] = Job(id: id, manifest: manifest, have: have)
    }

    package mutating func cancel(_ attachment: SHA256Digest) {
        guard let job = jobs.removeValue(forKey: attachment) else { return }
        for asked in job.inFlight.values { for peer in asked.keys { peers[peer]?.inFlight -= 1 } }
    }

    /// What a member announced it holds of an attachment.
    package mutating func setAvailability(_ bitmap: ChunkBitmap, of attachment: SHA256Digest, at peer: NodeID) {
        availability[peer, default: [:]][attachment] = bitmap
        if peers[peer] == nil { peers[peer] = Peer(window: settings.initialWindow) }
    }

    /// A member is gone: what it was asked goes back to the pool.
    package mutating func removePeer(_ peer: NodeID) {
        availability[peer] = nil
        peers[peer] = nil
        for id in jobs.keys {
            // Back (restarted), it is asked afresh: its seeding state went with it.
            jobs[id]?.seedsLeaving[peer] = nil
            for (index, asked) in jobs[id]?.inFlight ?? [:] where asked[peer] != nil {
                jobs[id]?.inFlight[index]?[peer] = nil
                if jobs[id]?.inFlight[index]?.isEmpty == true { jobs[id]?.inFlight[index] = nil }
            }
        }
    }

    /// Piece bytes of chunk `index` of `attachment` arrived from `peer`: its window grows by one
    /// per chunk's worth (the manifest's chunk size), as TCP's grows by bytes acknowledged (RFC
    /// 3465). Counted by chunks completed, a window would grow only as fast as repairs come: on a
    /// lossy path most chunks wait a round trip for one piece, which holds slow start back on a
    /// long path. Only pieces of a chunk asked of `peer` count: pieces of chunks
    /// asked of others open nothing.
    /// Returns whether it counted (the chunk was asked of `peer`).
    @discardableResult
    package mutating func onPieceBytes(_ bytes: Int, of attachment: SHA256Digest, index: Int, from peer: NodeID) -> Bool
    {
        guard let job = jobs[attachment], job.inFlight[index]?[peer] != nil, var state = peers[peer] else {
            return false
        }
        let chunk = max(1, job.manifest.chunkSize)
        state.credit += bytes
        if state.credit >= chunk {
            state.window = min(settings.maximumWindow, state.window + state.credit / chunk)
            state.credit %= chunk
        }
        peers[peer] = state
        return true
    }

    /// Chunk `index` of `attachment` is whole and goes to be checked and stored (`onChunk`, or
    /// `onMixedBadChunk`, or `onMissing` for a store that failed, follow). Until then it is
    /// not asked again: a request that timed out while its pieces still came leaves the chunk
    /// looking missing, and asked again in that moment it was fetched whole a second time.
    package mutating func onAssembled(attachment: SHA256Digest, index: Int) {
        jobs[attachment]?.storing.insert(index)
    }

    /// A chunk arrived from `peer` and was checked against its hash. Returns true when it
    /// completed its attachment.
    @discardableResult
    package mutating func onChunk(attachment: SHA256Digest, index: Int, from peer: NodeID, valid: Bool) -> Bool {
        guard var job = jobs[attachment] else { return false }
        job.storing.remove(index)
        if let sentAt = job.inFlight[index]?.removeValue(forKey: peer) {
            peers[peer]?.inFlight -= 1
            if valid, let now = lastNow, var state = peers[peer] {
                let sample = now - sentAt
                state.latency = state.latency.map { $0 * 0.875 + sample * 0.125 } ?? sample
                peers[peer] = state
            }
        }
        // Also a chunk whose request had timed out: a slow holder, not a silent one.
        if valid, let now = lastNow { peers[peer]?.servedAt = now }
        if valid {
            job.have.insert(index)
            // Other copies asked in the end game are no longer needed.
            for other in job.inFlight[index]?.keys ?? [:].keys { peers[other]?.inFlight -= 1 }
            job.inFlight[index] = nil
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

    /// A copy put together from pieces of several members failed its hash: one of them lied, and
    /// which one is unknown. Blaming all would let one liar shut honest holders out of the chunk
    /// (it did, in HostileMemberTests); so nobody is blamed, and the chunk is asked again of one
    /// member at a time (no end-game second copy), where a bad copy names its sender.
    package mutating func onMixedBadChunk(attachment: SHA256Digest, index: Int, from contributors: Set<NodeID>) {
        guard var job = jobs[attachment] else { return }
        job.storing.remove(index)
        for peer in contributors where job.inFlight[index]?.removeValue(forKey: peer) != nil {
            peers[peer]?.inFlight -= 1
        }
        if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
        job.solo.insert(index)
        jobs[attachment] = job
    }

    /// `peer` answered that it does not have the chunk (after all): ask someone else, no penalty.
    package mutating func onMissing(attachment: SHA256Digest, index: Int, from peer: NodeID) {
        jobs[attachment]?.storing.remove(index)
        guard var job = jobs[attachment], job.inFlight[index]?.removeValue(forKey: peer) != nil else { return }
        peers[peer]?.inFlight -= 1
        job.refused[index, default: []].insert(peer)
        if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
        jobs[attachment] = job
    }

    /// `peer` answered that it is busy with this chunk: ask again a little later, from anyone.
    /// `asked` is false when the request never left (no room here to put the chunk together):
    /// that is no failure of the holder's.
    package mutating func onBusy(
        attachment: SHA256Digest, index: Int, from peer: NodeID, now: MeshInstant,
        asked: Bool = true
    ) {
        if asked, jobs[attachment]?.inFlight[index]?[peer] != nil {
            noteFailure(of: peer, index: index, in: attachment, now: now)
        }
        settle(attachment: attachment, index: index, answeredBy: peer, now: now)
    }

    /// A request answered without the chunk: the holder is not asked for it for `busyRetry`, nor
    /// is the chunk, when every holder that may be asked said so.
    private mutating func settle(attachment: SHA256Digest, index: Int, answeredBy peer: NodeID, now: MeshInstant) {
        guard var job = jobs[attachment], job.inFlight[index]?.removeValue(forKey: peer) != nil else { return }
        peers[peer]?.inFlight -= 1
        if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
        job.busy[index, default: [:]][peer] = now + settings.busyRetry
        let refused = job.refused[index] ?? []
        let askable = holders(
            of: index, among: holderBitmaps(of: attachment, count: job.have.count), in: job,
            seedsLeaving: seedsLeaving(in: job, now: now), now: now
        )
        .filter { !refused.contains($0) }
        if askable.allSatisfy({ job.busy[index]?[$0].map { now < $0 } ?? false }) {
            job.notBefore[index] = now + settings.busyRetry
        }
        jobs[attachment] = job
    }

    /// `peer` answered busy for chunk `index`: a seed that left the chunk to it may be asked
    /// again after its wait.
    private mutating func noteFailure(of peer: NodeID, index: Int, in attachment: SHA256Digest, now: MeshInstant) {
        guard let job = jobs[attachment] else { return }
        let seeds = seedsThatLeft(index, in: job, now: now)
        if !seeds.isEmpty, seeds[peer] == nil { jobs[attachment]?.othersFailed.insert(index) }
    }

    /// The seeds that left chunk `index` to others, with when: those that said so of it, and
    /// those that said so of another chunk within four waits (`Job.seedsLeaving`).
    private func seedsThatLeft(_ index: Int, in job: Job, now: MeshInstant) -> [NodeID: MeshInstant] {
        seedsThatLeft(index, in: job, leaving: seedsLeaving(in: job, now: now))
    }

    /// `seedsThatLeft`, given the seeds that said so of any chunk within four waits (the part every
    /// chunk shares, worked out once per pass of `nextRequests`): a chunk no seed left itself has
    /// those alone, without a table of its own.
    private func seedsThatLeft(
        _ index: Int, in job: Job, leaving: [NodeID: MeshInstant]
    ) -> [NodeID: MeshInstant] {
        guard var left = job.leftToOthers[index] else { return leaving }
        for (seed, at) in leaving where left[seed] == nil { left[seed] = at }
        return left
    }

    /// The seeds that said within four waits that they leave chunks to others, with when.
    private func seedsLeaving(in job: Job, now: MeshInstant) -> [NodeID: MeshInstant] {
        let lasts = seedAnswerLasts
        return job.seedsLeaving.filter { now < $0.value + lasts }
    }

    /// A seed answered that it leaves this chunk to the members that hold it (`SeedingPolicy`):
    /// ask them, and the seed only when no one else holds it, or after `leftToOthersWait`.
    package mutating func onLeftToOthers(attachment: SHA256Digest, index: Int, from peer: NodeID, now: MeshInstant) {
        guard var job = jobs[attachment], job.inFlight[index]?[peer] != nil else { return }
        // Timed from the first such answer, as the seed's grace is: asked again after it, the
        // seed serves. Left again after the wait (the seed forgot us, or restarted), its grace
        // starts again.
        if job.leftToOthers[index]?[peer].map({ now >= $0 + settings.leftToOthersWait }) ?? true {
            job.leftToOthers[index, default: [:]][peer] = now
            if job.leftToOthers[index]?.count == 1 { job.othersFailed.remove(index) }
        }
        // A new episode (none from it within four waits): failures seen in an earlier one no
        // longer count for the chunks it was never asked.
        if job.seedsLeaving[peer].map({ now >= $0 + seedAnswerLasts }) ?? true {
            job.othersFailed = job.othersFailed.filter { job.leftToOthers[$0] != nil }
        }
        job.seedsLeaving[peer] = now
        jobs[attachment] = job
        settle(attachment: attachment, index: index, answeredBy: peer, now: now)
    }

    /// Whether some chunk of the attachment is asked of someone, or being stored, right now, or
    /// waits for room at the members a seed left it to (up to four waits, when the seed may be
    /// asked: the fetch must not give up on it meanwhile), or is held by a seed that left us
    /// others (the same).
    package func hasRequestsInFlight(_ attachment: SHA256Digest) -> Bool {
        guard let job = jobs[attachment] else { return false }
        if !job.inFlight.isEmpty || !job.storing.isEmpty { return true }
        guard let now = lastNow else { return false }
        let wait = seedAnswerLasts
        if job.leftToOthers.contains(where: { index, seeds in
            !job.have.contains(index) && seeds.values.contains { now < $0 + wait }
        }) {
            return true
        }
        return job.seedsLeaving.contains { seed, at in
            guard now < at + wait, let bitmap = availability[seed]?[attachment], bitmap.count == job.have.count else {
                return false
            }
            return (0..<bitmap.count).contains { bitmap.contains($0) && !job.have.contains($0) }
        }
    }

    /// Requests that went unanswered: their members' windows halve, the chunks are asked again.
    package mutating func onTick(now: MeshInstant) {
        lastNow = now
        for id in jobs.keys.sorted() {
            guard var job = jobs[id] else { continue }
            for index in job.inFlight.keys.sorted() {
                for (peer, sentAt) in job.inFlight[index] ?? [:] where now >= sentAt + timeout(for: peer) {
                    job.inFlight[index]?[peer] = nil
                    timeouts += 1
                    let seeds = seedsThatLeft(index, in: job, now: now)
                    if !seeds.isEmpty, seeds[peer] == nil { job.othersFailed.insert(index) }
                    peers[peer]?.failedAt = now
                    if var state = peers[peer] {
                        state.inFlight -= 1
                        state.window = max(1, state.window / 2)
                        state.credit = 0
                        peers[peer] = state
                    }
                }
                if job.inFlight[index]?.isEmpty == true { job.inFlight[index] = nil }
            }
            // Waits that are over: left in place they would be a deadline in the past forever,
            // and the node's timer would fire without pause.
            job.notBefore = job.notBefore.filter { now < $0.value }
            job.busy = job.busy.compactMapValues { answers in
                let pending = answers.filter { now < $0.value }
                return pending.isEmpty ? nil : pending
            }
            jobs[id] = job
        }
    }

    package var nextDeadline: MeshInstant? {
        var deadline: MeshInstant?
        for job in jobs.values {
            for instant in job.notBefore.values where instant > .zero {
                deadline = deadline.map { min($0, instant) } ?? instant
            }
            for asked in job.inFlight.values {
                for (peer, sentAt) in asked {
                    let due = sentAt + timeout(for: peer)
                    deadline = deadline.map { min($0, due) } ?? due
                }
            }
            // When a seed that left us chunks may be asked again (after one wait, when the others
            // failed; after four), and when the end game's next late request is due. Only ahead:
            // one passed that changed nothing (no holder with room) waits for the next event, not
            // a timer that fires without pause.
            for at in job.seedsLeaving.values {
                for due in [at + settings.leftToOthersWait, at + seedAnswerLasts]
                where lastNow.map({ due > $0 }) ?? true {
                    deadline = deadline.map { min($0, due) } ?? due
                }
            }
            guard job.have.count - job.have.held <= settings.endGameChunks else { continue }
            for (index, asked) in job.inFlight {
                guard let due = endGameDue(index, asked, in: job)?.at, lastNow.map({ due > $0 }) ?? true else {
                    continue
                }
                deadline = deadline.map { min($0, due) } ?? due
            }
        }
        return deadline
    }

    // MARK: output

    /// Fills every member's window: for each attachment, missing chunks not yet asked, rarest
    /// first (random among equals), each from a random holder with room; then the end game.
    package mutating func nextRequests(now: MeshInstant) -> [Request] {
        lastNow = now
        // Every window full is the common case between chunks (this runs after each one): no
        // request can go out, and the scan below would cost a pass over every chunk.
        guard peers.values.contains(where: \.hasRoom) else { return [] }
        var requests: [Request] = []
        var inFlight = peers.values.reduce(0) { $0 + max(0, $1.inFlight) }
        let maximumInFlight = min(settings.maximumInFlight, inFlightLimit ?? settings.maximumInFlight)
        for id in jobs.keys.sorted() {
            guard var job = jobs[id] else { continue }
            let bitmaps = holderBitmaps(of: id, count: job.have.count)
            // Once per pass: a pass may weigh every missing chunk, each with these seeds.
            let leaving = seedsLeaving(in: job, now: now)
            if inFlight < maximumInFlight {
                var missing = (0..<job.have.count).filter { index in
                    !job.have.contains(index) && job.inFlight[index] == nil && !job.storing.contains(index)
                        && (job.notBefore[index].map { now >= $0 } ?? true)
                }
                missing.shuffle(using: &random)
                let everyHolderWhole = bitmaps.allSatisfy(\.bitmap.isComplete)
                if !everyHolderWhole {
                    let counts = (0..<job.have.count).map { index in bitmaps.count { $0.bitmap.contains(index) } }
                    missing.sort { counts[$0] < counts[$1] }
                }
                // A plain chunk (every holder has it, and no holder left, refused or turned it down
                // as busy) has the same holders as every other plain chunk in this pass, and windows
                // only fill during a pass: once one found no holder with room, the rest find none.
                var plainChunksFull = false
                for index in missing {
                    guard inFlight < maximumInFlight else { break }
                    // Once every window is full no later chunk can be asked (`pickHolder` takes
                    // only members with room, and draws nothing when none has): after a stored
                    // chunk freed one slot, the rest of this pass was a scan of every chunk.
                    guard peers.values.contains(where: \.hasRoom) else { break }
                    let plain =
                        everyHolderWhole && job.leftToOthers[index] == nil && job.refused[index] == nil
                        && job.busy[index] == nil && !job.othersFailed.contains(index)
                    if plain, plainChunksFull { continue }
                    let holders = holders(of: index, among: bitmaps, in: job, seedsLeaving: leaving, now: now)
                    let busy = Set((job.busy[index] ?? [:]).filter { now < $0.value }.keys)
                    let candidates = holders.filter { !busy.contains($0) }
                    // Everyone who has it said busy: ask one of them anyway (they serve a member
                    // refused for long enough).
                    let pool = candidates.isEmpty ? holders : candidates
                    guard let peer = pickHolder(pool, excluding: job.refused[index] ?? []) else {
                        if plain { plainChunksFull = true }
                        continue
                    }
                    ask(peer, index: index, in: &job, now: now, into: &requests)
                    inFlight += 1
                }
            }
            // End game: the last few chunks, each also from a second holder.
            let outstanding = job.have.count - job.have.held
            if outstanding <= settings.endGameChunks {
                for index in job.inFlight.keys.sorted() {
                    guard let due = endGameDue(index, job.inFlight[index] ?? [:], in: job), now >= due.at else {
                        continue
                    }
                    guard
                        let peer = pickHolder(
                            holders(of: index, among: bitmaps, in: job, seedsLeaving: leaving, now: now),
                            excluding: (job.refused[index] ?? []).union([due.holder]))
                    else { continue }
                    ask(peer, index: index, in: &job, now: now, into: &requests)
                }
            }
            jobs[id] = job
        }
        return requests
    }

    private mutating func ask(
        _ peer: NodeID, index: Int, in job: inout Job, now: MeshInstant, into requests: inout [Request]
    ) {
        job.inFlight[index, default: [:]][peer] = now
        peers[peer]?.inFlight += 1
        requests.append(Request(peer: peer, attachment: job.id, index: index, digest: job.manifest.chunks[index]))
    }

    /// What each member that may be asked announced of the attachment, in id order.
    private func holderBitmaps(of attachment: SHA256Digest, count: Int) -> [(peer: NodeID, bitmap: ChunkBitmap)] {
        availability.keys.sorted().compactMap { peer in
            guard let bitmap = availability[peer]?[attachment], bitmap.count == count, !isAvoided(peer) else {
                return nil
            }
            return (peer, bitmap)
        }
    }

    private func holders(of index: Int, among bitmaps: [(peer: NodeID, bitmap: ChunkBitmap)]) -> [NodeID] {
        bitmaps.compactMap { $0.bitmap.contains(index) ? $0.peer : nil }
    }

    /// The holders to ask for chunk `index`: seeds that left it (or, lately, another chunk) to
    /// others only when no other member that has not refused it holds it, or after their wait
    /// (`leftToOthersWait`). `seedsLeaving`: `seedsLeaving(in: job, now: now)`.
    private func holders(
        of index: Int, among bitmaps: [(peer: NodeID, bitmap: ChunkBitmap)], in job: Job,
        seedsLeaving: [NodeID: MeshInstant], now: MeshInstant
    ) -> [NodeID] {
        let all = holders(of: index, among: bitmaps)
        let left = seedsThatLeft(index, in: job, leaving: seedsLeaving)
        guard !left.isEmpty else { return all }
        let refused = job.refused[index] ?? []
        let others = all.filter { left[$0] == nil && !refused.contains($0) }
        guard !others.isEmpty else { return all }
        let since = left.values.min() ?? now
        // A holder failing now and then on a slow line still serves: only one whose latest
        // request timed out, with no chunk from it since (a silent one), gives the seed back for
        // every chunk.
        let failed =
            job.othersFailed.contains(index)
            || others.allSatisfy { peer in
                guard let state = peers[peer], let failedAt = state.failedAt else { return false }
                return failedAt >= since && failedAt > (state.servedAt ?? since)
            }
        // A chunk the seeds were never asked (held back by their answers for other chunks): once
        // the others failed it, asked at once. Its grace starts only when it is asked: held back
        // the same wait first, it waited two before the seed served it.
        let neverAsked = job.leftToOthers[index]?.isEmpty ?? true
        let waited = (failed && neverAsked) || now >= since + settings.leftToOthersWait * (failed ? 1 : 4)
        return waited ? all : all.filter { left[$0] == nil }
    }

    /// A random holder with room in its window, not among `excluded`, one of `lastResort` only
    /// when no other has room.
    private mutating func pickHolder(_ holders: [NodeID], excluding excluded: Set<NodeID>) -> NodeID? {
        var open = holders.filter { peer in
            guard !excluded.contains(peer), let state = peers[peer] else { return false }
            return state.hasRoom
        }
        if !lastResort.isEmpty, open.contains(where: { !lastResort.contains($0) }) {
            open.removeAll { lastResort.contains($0) }
        }
        guard !open.isEmpty else { return nil }
        return open[Int(random.next() % UInt64(open.count))]
    }
}
