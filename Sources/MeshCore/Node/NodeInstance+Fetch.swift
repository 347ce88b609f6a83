import MeshCrypto

/// A fetch of one attachment, as state: its manifest (asked of one holder after another), then
/// what the store already holds (a restarted node resumes), then the swarm, then durability.
package struct Fetch: Sendable {
    package enum Stage: Sendable {
        /// Asking for the manifest: who was asked, who is being asked and until when (nil: no
        /// holder known yet, waiting for one until `deadline`; or every holder was asked, and the
        /// next round starts at `answerBy`).
        case manifest(deadline: MeshInstant, tried: Set<NodeID>, asking: NodeID?, answerBy: MeshInstant?)
        /// The manifest is being stored (kept here: a remove meanwhile must collect it).
        case storingManifest(Manifest)
        /// The store is asked which chunks it already holds.
        case inspecting
        /// The swarm: the scheduler picks chunk and holder.
        case chunks(have: ChunkBitmap)
        /// Every chunk is stored; waiting for them to be durable.
        case completing
    }

    package var stage: Stage
    /// Holders that answered with a manifest that is not the one asked for: their copy is bad (a
    /// datagram that opened was sealed by them as it is), so this fetch asks them no more.
    var badManifestFrom: Set<NodeID> = []
    /// Members that said they do not hold the manifest: asked once only when no holder is known.
    var noManifestFrom: Set<NodeID> = []
    let startedAt: MeshInstant
    var lastProgress: MeshInstant
    /// Chunks this fetch had to bring (for the "fetched" log line).
    var needed = 0
    /// When half of them were here: the second half's rate is what the path carries once the
    /// controller's slow start is over (slow start takes a few round trips on a long path).
    var halfwayAt: MeshInstant?
    /// Started to hold the attachment here (replication, or a leaving member's request), not
    /// only for the loads waiting on it: a lazy node keeps it when those loads are given up.
    var forReplication = false
    /// Only the manifest is wanted (a lazy node's damaged one): once stored, the fetch ends
    /// with what is here, unless a load waits for it by then.
    var manifestOnly = false

    package var held: Int? {
        if case let .chunks(have) = stage { return have.held }
        return nil
    }

    /// A manifest on its way to the store, not yet among the node's.
    var manifestBeingStored: Manifest? {
        if case let .storingManifest(manifest) = stage { return manifest }
        return nil
    }
}

extension NodeInstance {
    /// Fetches every attachment in the journal that is not whole here, unless `--lazy`, or
    /// paused after a chunk could not be stored.
    mutating func replicate(now: MeshInstant) {
        refetchDamagedManifests(now: now)
        guard !settings.lazy, !isReplicationPaused(now: now) else { return }
        for id in journal.state.presentContents
        where !library.complete.contains(id) && fetchTable.retries[id].map({ now >= $0.at }) != false {
            startFetch(id, forReplication: true, now: now)
        }
    }

    func isReplicationPaused(now: MeshInstant) -> Bool {
        fetchTable.replicationPausedUntil.map { now < $0 } ?? false
    }

    mutating func startFetch(_ id: SHA256Digest, forReplication: Bool = false, now: MeshInstant) {
        if forReplication, fetchTable.fetches[id] != nil {
            fetchTable.fetches[id]?.forReplication = true
            fetchTable.fetches[id]?.manifestOnly = false
        }
        guard fetchTable.fetches[id] == nil, phase.isActive, journal.state.hasContent(id) else { return }
        defer { fetchTable.fetches[id]?.forReplication = forReplication }
        if let manifest = manifests[id] {
            fetchTable.fetches[id] = Fetch(stage: .inspecting, startedAt: now, lastProgress: now)
            store(.inspect(manifest), .inspect(id))
        } else {
            fetchTable.fetches[id] = Fetch(
                stage: .manifest(
                    deadline: now + settings.unavailableTimeout, tried: [], asking: nil,
                    answerBy: nil),
                startedAt: now, lastProgress: now)
            askForManifest(id, now: now)
        }
    }

    /// A load: at once when the attachment is whole here, else once its fetch ends (started now,
    /// even when lazy or paused: someone is waiting).
    mutating func load(_ id: SHA256Digest, into destination: ExportDestination, request: RequestID, now: MeshInstant) {
        guard journal.state.hasContent(id) else { return complete(request, .failure(.unknownAttachment(id))) }
        if library.complete.contains(id), let manifest = manifests[id] {
            return store(.export(manifest, to: destination), .export(request, manifest, destination))
        }
        fetchTable.loadWaiters[id, default: []].append((request, destination))
        if case .chunks = fetchTable.fetches[id]?.stage, let manifest = manifests[id] {
            prepareExport(manifest, to: destination)
        }
        startFetch(id, now: now)
    }

    /// The caller gave up a load (`get` interrupted, an app's task cancelled): it fails as
    /// `cancelled` and its output's temporary file goes. The fetch goes on while another load
    /// waits for it or the node replicates (not lazy, or a leaving member asked); otherwise it
    /// stops, and the members asked for its chunks are told.
    package mutating func cancel(_ request: RequestID, now: MeshInstant) {
        guard
            let (id, index) = fetchTable.loadWaiters.lazy.compactMap({ id, waiters in
                waiters.firstIndex { $0.request == request }.map { (id, $0) }
            }).first, let waiter = fetchTable.loadWaiters[id]?.remove(at: index)
        else { return }
        if fetchTable.loadWaiters[id]?.isEmpty == true { fetchTable.loadWaiters[id] = nil }
        failLoad(waiter, .cancelled)
        guard fetchTable.loadWaiters[id] == nil, settings.lazy, let fetch = fetchTable.fetches[id],
            !fetch.forReplication, !fetch.manifestOnly
        else { return }
        // Every chunk stored: only their sync is left, and then the attachment is whole here.
        if case .completing = fetch.stage { return }
        log(.info, "fetch given up: no one waits for it", ["attachment": String(id.hex.prefix(16))])
        if let held = fetch.held { library.knownHeld[id] = held }
        dropFetch(id)
    }

    /// A load into a file has its file written while the fetch stores chunks (`prepareExport`).
    mutating func prepareExport(_ manifest: Manifest, to destination: ExportDestination) {
        guard case .file = destination else { return }
        store(.prepareExport(manifest, to: destination), .housekeeping)
    }

    /// A load that will not complete: the caller hears why, and a file prepared for it goes.
    mutating func failLoad(_ waiter: (request: RequestID, destination: ExportDestination), _ error: NodeError) {
        fetchTable.exportRetries[waiter.request] = nil
        if case .file = waiter.destination { store(.cancelExport(to: waiter.destination), .housekeeping) }
        complete(waiter.request, .failure(error))
    }

    mutating func exported(
        _ result: Result<StorageOutcome, StorageFailure>, manifest: Manifest, request: RequestID,
        destination: ExportDestination, now: MeshInstant
    ) {
        let retries = fetchTable.exportRetries.removeValue(forKey: request) ?? 0
        switch result {
        case let .success(.exported(bytes)): complete(request, .success(.loaded(manifest, bytes: bytes)))
        case let .failure(.damaged(detail)):
            // What was damaged was discarded: fetched again from the members that hold it, and the
            // load waits for that fetch (twice at most: a disk that damages everything it keeps
            // would have us fetch for ever).
            attachmentDamaged(manifest.id, detail: detail, now: now)
            // No fetch to wait for (the attachment was removed meanwhile, or the node stops).
            guard retries < Self.maxExportRetries, fetchTable.fetches[manifest.id] != nil else {
                return complete(request, .failure(.store(.damaged(detail))))
            }
            fetchTable.exportRetries[request] = retries + 1
            fetchTable.loadWaiters[manifest.id, default: []].append((request, destination))
        case let .failure(failure): complete(request, .failure(.store(failure)))
        case .success: complete(request, .failure(.store(.failed("the store did not export"))))
        }
    }

    static let maxExportRetries = 2

    /// Chunks of a whole attachment were found damaged on disk and discarded: it is no longer
    /// whole here (members hear so), and what is missing is fetched again, lazy or not (we held
    /// it; a member leaving may count on us).
    mutating func attachmentDamaged(_ id: SHA256Digest, detail: String, now: MeshInstant) {
        guard library.complete.remove(id) != nil else { return }
        log(
            .warning, "attachment damaged on disk: fetching what was lost again",
            ["attachment": String(id.hex.prefix(16)), "detail": detail])
        announceHoldings(now: now)
        startFetch(id, forReplication: true, now: now)
    }

    // MARK: the manifest

    /// Asks a holder that was not asked yet (else any) for the manifest, or waits for one.
    private mutating func askForManifest(_ id: SHA256Digest, now: MeshInstant) {
        guard case .manifest(let deadline, var tried, _, _) = fetchTable.fetches[id]?.stage else { return }
        let candidates = manifestCandidates(id)
        let fresh = candidates.filter { !tried.contains($0) }
        let pool = fresh.isEmpty ? candidates : fresh
        guard !pool.isEmpty else {
            fetchTable.fetches[id]?.stage = .manifest(deadline: deadline, tried: tried, asking: nil, answerBy: nil)
            return
        }
        let holder = pool[Int(random.next() % UInt64(pool.count))]
        tried.insert(holder)
        let answerBy = now + settings.manifestRequestTimeout
        fetchTable.fetches[id]?.stage = .manifest(deadline: deadline, tried: tried, asking: holder, answerBy: answerBy)
        sendJournal(.chunkRequest(id), to: holder, now: now)
    }

    /// Who may be asked for a fetch's manifest: the holders known, but not those whose copy
    /// proved bad. When every holder known proved bad, each alive member once: one may hold it
    /// although we have not heard so yet (its holdings lost on the way), and one that does not
    /// says so.
    private func manifestCandidates(_ id: SHA256Digest) -> [NodeID] {
        let fetch = fetchTable.fetches[id]
        let bad = fetch?.badManifestFrom ?? []
        let known = (holders(of: id) + transfer.peersWithChunks(of: id)).filter { $0 != localID && !bad.contains($0) }
        guard known.isEmpty, !bad.isEmpty else { return known }
        let said = fetch?.noManifestFrom ?? []
        return aliveMemberIDs.filter { !bad.contains($0) && !said.contains($0) }
    }

    /// `member` is suspect or gone: a manifest asked of it is asked elsewhere now, not after
    /// `manifestRequestTimeout` (a leaving member's handover lost 5 of its 10 s that way when
    /// the member it asked had just asked one that crashed). A late answer from it is ignored.
    mutating func manifestHolderFailed(_ member: NodeID, now: MeshInstant) {
        for id in fetchTable.fetches.keys.sorted() {
            guard case .manifest(_, _, member?, _) = fetchTable.fetches[id]?.stage else { continue }
            manifestRetry(id, now: now)
        }
    }

    mutating func manifestAnswer(_ digest: SHA256Digest, bytes: [UInt8]?, from peer: NodeID, now: MeshInstant) {
        guard case .manifest(_, _, let asking, _) = fetchTable.fetches[digest]?.stage, asking == peer else { return }
        guard let bytes, SHA256Digest.hashing(bytes) == digest, let manifest = try? Manifest(decoding: bytes) else {
            if bytes != nil {
                fetchTable.fetches[digest]?.badManifestFrom.insert(peer)
            } else {
                fetchTable.fetches[digest]?.noManifestFrom.insert(peer)
            }
            return manifestRetry(digest, now: now)
        }
        fetchTable.fetches[digest]?.stage = .storingManifest(manifest)
        store(.writeChunk(bytes, expected: digest), .storeManifest(manifest))
    }

    /// The asked holder said no, sent a bad manifest, or nothing: the next one, or give up after
    /// the deadline. Once every holder was asked, the next round waits a little: a holder that
    /// answers at once with a bad manifest would otherwise have us ask it in a tight loop.
    private mutating func manifestRetry(_ id: SHA256Digest, now: MeshInstant) {
        guard case let .manifest(deadline, tried, _, _) = fetchTable.fetches[id]?.stage else { return }
        if now >= deadline {
            return finishFetch(id, .failure(.manifestUnavailable(id)), now: now)
        }
        let candidates = manifestCandidates(id)
        if !candidates.isEmpty, candidates.allSatisfy(tried.contains) {
            let nextRound = now + settings.manifestRoundPause
            fetchTable.fetches[id]?.stage = .manifest(deadline: deadline, tried: [], asking: nil, answerBy: nextRound)
        } else {
            askForManifest(id, now: now)
        }
    }

    mutating func manifestStored(
        _ result: Result<StorageOutcome, StorageFailure>, _ manifest: Manifest,
        now: MeshInstant
    ) {
        let id = manifest.id
        guard case .storingManifest = fetchTable.fetches[id]?.stage else {
            // The fetch ended meanwhile; a stored manifest stays known, so a remove collects it.
            if case .success(.written(stored: true)) = result, journal.state.hasContent(id), manifests[id] == nil {
                library.manifestTable.insert(manifest)
            }
            return
        }
        switch result {
        case .success(.written(stored: true)):
            library.manifestTable.insert(manifest)
            fetchTable.fetches[id]?.stage = .inspecting
            store(.inspect(manifest), .inspect(id))
        case let .failure(failure):
            storeFailed(failure, fetching: [id], now: now)
        case .success:
            finishFetch(id, .failure(.manifestUnavailable(id)), now: now)
        }
    }

    mutating func inspected(_ result: Result<StorageOutcome, StorageFailure>, id: SHA256Digest, now: MeshInstant) {
        guard case .inspecting = fetchTable.fetches[id]?.stage, let manifest = manifests[id] else { return }
        guard case let .success(.inspected(missingList)) = result else {
            return storeFailed(result.failure ?? .failed("the store did not answer"), fetching: [id], now: now)
        }
        let missing = Set(missingList)
        var have = ChunkBitmap(count: manifest.chunks.count)
        for (index, digest) in manifest.chunks.enumerated() where !missing.contains(digest) { have.insert(index) }
        guard !have.isComplete else {
            fetchTable.fetches[id]?.stage = .completing
            return store(.flush, .completeFetch(id))
        }
        if fetchTable.fetches[id]?.manifestOnly == true, fetchTable.loadWaiters[id] == nil {
            log(
                .info, "manifest fetched again; the rest of the attachment is left until asked for",
                ["attachment": String(id.hex.prefix(16)), "chunks": "\(have.held) of \(manifest.chunks.count)"])
            library.knownHeld[id] = have.held
            dropFetch(id)
            return persistManifest(manifest)
        }
        fetchTable.fetches[id]?.stage = .chunks(have: have)
        fetchTable.fetches[id]?.needed = manifest.chunks.count - have.held
        for waiter in fetchTable.loadWaiters[id] ?? [] { prepareExport(manifest, to: waiter.destination) }
        offerResume(for: id, now: now)
        transfer.start(manifest, have: have)
        refreshAvailability()
        pumpTransfers(now: now)
    }

    // MARK: the swarm

    /// Sends the scheduler's requests.
    mutating func pumpTransfers(now: MeshInstant) {
        applyDownlinkLimits()
        transfer.lastResort = links.paths.relayedMembers
        for request in transfer.nextRequests(now: now) {
            noteRequested(ChunkRef(attachment: request.attachment, index: request.index), digest: request.digest)
            measurePath(from: request.peer, now: now)
            if let length = manifests[request.attachment]?.length(ofChunk: request.index),
                let want = receiving.assembler.begin(request.digest, length: length, from: request.peer, now: now)
            {
                sendWant(want, to: request.peer, now: now)
            } else {
                transfer.onBusy(
                    attachment: request.attachment, index: request.index, from: request.peer, now: now, asked: false)
            }
        }
        retunePacing(now: now)
    }

    /// Records a chunk asked for, once however often it is asked (after a timeout, in the end
    /// game): each ref is one outcome to report, and reported twice a bad chunk counted twice
    /// against its sender.
    mutating func noteRequested(_ ref: ChunkRef, digest: SHA256Digest) {
        guard fetchTable.requested[digest]?.contains(ref) != true else { return }
        fetchTable.requested[digest, default: []].append(ref)
    }

    /// Tells the scheduler who holds what: members that announced whole attachments, as full bitmaps.
    mutating func refreshAvailability() {
        let live = Set(activeMemberIDs)
        for id in Set(transfer.activeAttachments).union(manifests.keys).sorted() {
            guard let count = manifests[id]?.chunks.count else { continue }
            for holder in journal.holders(of: id) where live.contains(holder) {
                transfer.setAvailability(.full(count), of: id, at: holder)
            }
        }
    }

    /// A member came alive: a fetch whose every known holder sent a bad manifest, and which
    /// waits for someone to ask, may ask it (its holdings may not have reached us yet).
    mutating func memberCameAlive(now: MeshInstant) {
        for id in fetchTable.fetches.keys.sorted() {
            guard case .manifest(_, _, nil, nil) = fetchTable.fetches[id]?.stage,
                fetchTable.fetches[id]?.badManifestFrom.isEmpty == false
            else { continue }
            askForManifest(id, now: now)
        }
    }

    /// Who holds which attachment whole changed: manifests may now have someone to ask.
    mutating func holdersChanged(now: MeshInstant) {
        for id in fetchTable.fetches.keys.sorted() {
            if case .manifest(_, _, nil, _) = fetchTable.fetches[id]?.stage { askForManifest(id, now: now) }
        }
        refreshAvailability()
        replicate(now: now)
        emit(.attachmentsChanged)
        advanceHandover(now: now)
    }

    mutating func receiveAvailability(
        _ bitmap: ChunkBitmap, of attachment: SHA256Digest, from peer: NodeID,
        now: MeshInstant
    ) {
        if logs(.debug) {
            log(.debug, "availability", ["peer": String(peer.hex.prefix(6)), "held": "\(bitmap.held)/\(bitmap.count)"])
        }
        transfer.setAvailability(bitmap, of: attachment, at: peer)
        if !library.complete.contains(attachment), !settings.lazy, !isReplicationPaused(now: now) {
            startFetch(attachment, now: now)
        }
        pumpTransfers(now: now)
    }

    /// A chunk put together from pieces, the last from `peer`: the store hashes it before keeping it.
    mutating func receiveChunk(_ digest: SHA256Digest, bytes: [UInt8], from peer: NodeID, contributors: Set<NodeID>) {
        guard let refs = fetchTable.requested.removeValue(forKey: digest), !refs.isEmpty else { return }
        for ref in refs { transfer.onAssembled(attachment: ref.attachment, index: ref.index) }
        store(
            .writeChunk(bytes, expected: digest),
            .storeChunk(digest, refs: refs, from: peer, contributors: contributors))
    }

    mutating func chunkStored(
        _ result: Result<StorageOutcome, StorageFailure>, digest: SHA256Digest, refs: [ChunkRef],
        from peer: NodeID, contributors: Set<NodeID>, now: MeshInstant
    ) {
        // Refs of fetches that ended meanwhile (removed, or failed) are not counted.
        let live = refs.filter { fetchTable.fetches[$0.attachment] != nil }
        switch result {
        case .success(.written(stored: true)):
            break
        case .success:
            // Never stored, never served. A sole sender is not asked for it again; pieces from
            // several senders name no culprit, so the chunk is asked of one at a time.
            counters.chunksRejected += 1
            for ref in live {
                noteRequested(ref, digest: digest)
                if contributors.count > 1 {
                    transfer.onMixedBadChunk(attachment: ref.attachment, index: ref.index, from: contributors)
                } else {
                    for sender in contributors {
                        transfer.onChunk(attachment: ref.attachment, index: ref.index, from: sender, valid: false)
                    }
                }
            }
            return pumpTransfers(now: now)
        case let .failure(failure):
            // Our disk, not the holder: asking others would fetch the chunk again to fail again.
            for ref in live { transfer.onMissing(attachment: ref.attachment, index: ref.index, from: peer) }
            return storeFailed(failure, fetching: live.map(\.attachment), now: now)
        }
        counters.chunksFetched += 1
        // Its pieces were right: from now on they also tell the downlink's controller about the
        // line (a member that never sent a good chunk could feed it any timestamps).
        let firstProof = !receiving.provenHolders.contains(peer)
        receiving.provenHolders.formUnion(contributors)
        if let ref = live.first, let manifest = manifests[ref.attachment] {
            counters.chunkPayloadBytesFetched += UInt64(manifest.length(ofChunk: ref.index))
            // The chunk that proved it counts toward its window, as its pieces will from now on
            // (all of it: `peer` sent its last piece, maybe not every one; others proven by the
            // same chunk get nothing for it, which errs on the slow side).
            if firstProof {
                transfer.onPieceBytes(
                    manifest.length(ofChunk: ref.index), of: ref.attachment, index: ref.index, from: peer)
            }
        }
        for ref in live {
            guard case var .chunks(have) = fetchTable.fetches[ref.attachment]?.stage else { continue }
            have.insert(ref.index)
            fetchTable.fetches[ref.attachment]?.stage = .chunks(have: have)
            fetchTable.fetches[ref.attachment]?.lastProgress = now
            if let fetch = fetchTable.fetches[ref.attachment], fetch.halfwayAt == nil,
                fetch.needed - (have.count - have.held) >= fetch.needed / 2
            {
                fetchTable.fetches[ref.attachment]?.halfwayAt = now
            }
            fetchTable.dirtyBitmaps.insert(ref.attachment)
            if transfer.onChunk(attachment: ref.attachment, index: ref.index, from: peer, valid: true) {
                // Complete only once durable: a full disk can still refuse the last renames.
                fetchTable.fetches[ref.attachment]?.stage = .completing
                store(.flush, .completeFetch(ref.attachment))
            }
        }
        pumpTransfers(now: now)
    }

    mutating func fetchFlushed(_ result: Result<StorageOutcome, StorageFailure>, id: SHA256Digest, now: MeshInstant) {
        guard case .completing = fetchTable.fetches[id]?.stage, let manifest = manifests[id] else { return }
        switch result {
        case .success: finishFetch(id, .success(manifest), now: now)
        case let .failure(failure): storeFailed(failure, fetching: [id], now: now)
        }
    }

    /// Chunks cannot be stored (a full disk, most likely): the fetches that brought them end
    /// with the store's message, and replication waits before trying again.
    private mutating func storeFailed(_ failure: StorageFailure, fetching ids: [SHA256Digest], now: MeshInstant) {
        log(.warning, "cannot store a chunk", ["error": "\(failure)"])
        for id in Set(ids).sorted() where fetchTable.fetches[id] != nil {
            finishFetch(id, .failure(.store(failure)), now: now)
        }
        fetchTable.replicationPausedUntil = now + settings.replicationPauseAfterStoreFailure
    }

    /// Ends a fetch, whole or not, and answers the loads waiting for it.
    mutating func finishFetch(_ id: SHA256Digest, _ result: Result<Manifest, NodeError>, now: MeshInstant) {
        if let fetch = fetchTable.fetches.removeValue(forKey: id) {
            switch result {
            case let .success(manifest):
                if fetch.needed > 0 {
                    saveCapacity(of: id, now: now)
                    let seconds = max(1e-9, Double((now - fetch.startedAt).nanosecondsClamped) / 1e9)
                    let bytes = Double(min(UInt64(fetch.needed) * UInt64(manifest.chunkSize), manifest.size))
                    // Rates to a tenth of a MiB/s: on a home line whole MiB/s say little (1.37 logged as 1.0).
                    var fields = [
                        ("attachment", String(id.hex.prefix(16))), ("chunks", "\(fetch.needed)"),
                        ("seconds", "\((seconds * 1000).rounded() / 1000)"),
                        ("MiBps", "\((bytes / seconds / 1_048_576 * 10).rounded() / 10)"),
                    ]
                    if let halfway = fetch.halfwayAt, fetch.needed >= 8, now > halfway {
                        let second = Double((now - halfway).nanosecondsClamped) / 1e9
                        let half = Double(fetch.needed - fetch.needed / 2) / Double(fetch.needed) * bytes
                        fields.append(("secondHalfMiBps", "\((half / second / 1_048_576 * 10).rounded() / 10)"))
                        fields.append(("secondHalfSeconds", "\((second * 1000).rounded() / 1000)"))
                    }
                    if logs(.info) { emit(.log(NodeLogRecord(level: .info, message: "fetched", metadata: fields))) }
                }
            case let .failure(error):
                counters.fetchesFailed += 1
                if let held = fetch.held { library.knownHeld[id] = held }
                if error != .unknownAttachment(id) {
                    let failures = (fetchTable.retries[id]?.failures ?? 0) + 1
                    let wait = min(settings.maximumFetchRetry, settings.fetchRetry * (1 << min(failures - 1, 16)))
                    fetchTable.retries[id] = (failures, now + wait)
                }
            }
            dropFetch(id)
        }
        if case .failure(.unknownAttachment) = result { fetchTable.retries[id] = nil }
        if case let .success(manifest) = result {
            persistManifest(manifest)
            library.manifestTable.insert(manifest)
            library.complete.insert(id)
            library.knownHeld[id] = nil
            fetchTable.retries[id] = nil
            announceHoldings(now: now)
        }
        for waiter in fetchTable.loadWaiters.removeValue(forKey: id) ?? [] {
            switch result {
            case let .success(manifest):
                store(.export(manifest, to: waiter.destination), .export(waiter.request, manifest, waiter.destination))
            case let .failure(error): failLoad(waiter, error)
            }
        }
    }

    /// Forgets a fetch's requests: the members still asked for its chunks are told to stop.
    private mutating func dropFetch(_ id: SHA256Digest) {
        fetchTable.fetches[id] = nil
        fetchTable.dirtyBitmaps.remove(id)
        for digest in manifests[id]?.chunks ?? [] {
            fetchTable.requested[digest]?.removeAll { $0.attachment == id }
            if fetchTable.requested[digest]?.isEmpty == true {
                fetchTable.requested[digest] = nil
                sendCancels(of: digest, to: receiving.assembler.cancel(digest))
            }
        }
        transfer.cancel(id)
    }

    // MARK: time

    /// Manifest requests that went unanswered, quiet chunks, availability announcements, and
    /// fetches nobody can serve.
    mutating func fetchTick(now: MeshInstant) {
        for id in fetchTable.fetches.keys.sorted() {
            guard case let .manifest(deadline, _, asking, answerBy) = fetchTable.fetches[id]?.stage else { continue }
            if asking != nil, let answerBy, now >= answerBy {
                manifestRetry(id, now: now)
            } else if asking == nil, now >= deadline {
                finishFetch(id, .failure(.manifestUnavailable(id)), now: now)
            } else if asking == nil, let nextRound = answerBy, now >= nextRound {
                askForManifest(id, now: now)
            }
        }
        // The limits first: the timeouts `transfer` checks follow from the rate.
        let closedBefore = receiving.downlink.lastInterval.closedAt
        receiving.downlink.onTick(now: now)
        // Most intervals close here, at their deadline, before the next piece comes.
        if logs(.debug), receiving.downlink.lastInterval.closedAt != closedBefore { logDownlink() }
        applyDownlinkLimits()
        transfer.onTick(now: now)
        if let until = fetchTable.replicationPausedUntil, now >= until {
            fetchTable.replicationPausedUntil = nil
            replicate(now: now)
        }
        if fetchTable.retries.values.contains(where: { now >= $0.at }) { replicate(now: now) }
        for (peer, want) in receiving.assembler.onTick(now: now) { sendWant(want, to: peer, now: now) }
        reportSilences(now: now)
        applyPath(links.pathMTU.onTick(now: now), now: now)
        if now >= fetchTable.nextAvailabilityAt, !fetchTable.dirtyBitmaps.isEmpty {
            fetchTable.nextAvailabilityAt = now + settings.availabilityInterval
            for id in fetchTable.dirtyBitmaps.sorted() {
                guard case let .chunks(have) = fetchTable.fetches[id]?.stage else { continue }
                for peer in activeMemberIDs { sendJournal(.chunks(id, have), to: peer, now: now) }
            }
            fetchTable.dirtyBitmaps = []
        }
        for id in fetchTable.fetches.keys.sorted() {
            // The scan of the chunks under way last: most ticks of a fetch have requests in flight.
            guard let fetch = fetchTable.fetches[id], case let .chunks(have) = fetch.stage,
                !transfer.hasRequestsInFlight(id),
                now >= fetch.lastProgress + settings.unavailableTimeout,
                now >= lastProgress(of: id, fetch) + settings.unavailableTimeout
            else { continue }
            finishFetch(
                id, .failure(.chunksUnavailable(id, missing: have.count - have.held, total: have.count)), now: now)
        }
        pumpTransfers(now: now)
    }

    /// A chunk stored, or a piece of one still coming from a member asked for it: its requests may
    /// all have timed out at a slow pace while the holders still send. Failed then, the fetch threw
    /// away the pieces of every chunk under way and, asked again, they came whole a second time
    /// (holders sent 1.16× the file on a line where replication yields to a download).
    func lastProgress(of id: SHA256Digest, _ fetch: Fetch) -> MeshInstant {
        var latest = fetch.lastProgress
        for digest in manifests[id]?.chunks ?? []
        where fetchTable.requested[digest]?.contains(where: { $0.attachment == id }) == true {
            if let piece = receiving.assembler.lastAskedPiece(of: digest), piece > latest { latest = piece }
        }
        return latest
    }

    /// The earliest deadline of the fetches (only ones `fetchTick` acts on).
    var fetchDeadline: MeshInstant? {
        var deadline: MeshInstant?
        func consider(_ instant: MeshInstant?) {
            guard let instant else { return }
            deadline = deadline.map { min($0, instant) } ?? instant
        }
        for (id, fetch) in fetchTable.fetches {
            switch fetch.stage {
            case let .manifest(deadline, _, asking, answerBy):
                consider(answerBy)
                if asking == nil { consider(deadline) }
            case .chunks where !transfer.hasRequestsInFlight(id):
                consider(lastProgress(of: id, fetch) + settings.unavailableTimeout)
            default:
                break
            }
        }
        consider(transfer.nextDeadline)
        consider(receiving.assembler.nextDeadline)
        consider(receiving.downlink.nextDeadline)
        consider(links.pathMTU.nextDeadline)
        if !fetchTable.dirtyBitmaps.isEmpty { consider(fetchTable.nextAvailabilityAt) }
        consider(fetchTable.replicationPausedUntil)
        // Only while replication would act on them (a lazy or paused node does not).
        if !settings.lazy, fetchTable.replicationPausedUntil == nil {
            for (id, retry) in fetchTable.retries
            where fetchTable.fetches[id] == nil && !library.complete.contains(id) && journal.state.hasContent(id) {
                consider(retry.at)
            }
        }
        return deadline
    }
}
