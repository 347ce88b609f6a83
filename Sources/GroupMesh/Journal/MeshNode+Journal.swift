import Foundation
import MeshCore
import MeshCrypto
import NIOCore

/// A chunk (or manifest) asked of one holder, and the fetches waiting for it.
/// One chunk of one attachment: what a chunk request was for.
struct ChunkRef: Hashable {
    var attachment: SHA256Digest
    var index: Int
}

struct ChunkWait {
    var holder: NodeID
    var deadline: MeshInstant
    var waiters: [CheckedContinuation<[UInt8]?, Never>]
}

extension MeshNode {
    static let chunkRequestTimeout: Duration = .seconds(5)
    /// Whole holders answer "busy" for chunks others can pass on (TransferScheduler.shouldServe).
    static let superSeeding = true

    // MARK: start

    /// Opens the store, restores the journal, and resumes replication.
    func startJournal(now: MeshInstant) async throws(GroupMeshError) {
        let store = try AttachmentStore(directory: configuration.dataDirectory, chunkSize: configuration.chunkSize)
        self.store = store
        var instance = JournalInstance(authority: Ed25519Authority(identity: identity), seed: SecureRandom.uint64(), now: now)
        instance.restore(await store.loadOperations())
        journal = instance
        for entry in instance.state.attachments {
            if let manifest = await store.manifest(entry.id) {
                manifests[entry.id] = manifest
                if await store.missing(manifest).isEmpty { complete.insert(entry.id) }
            }
        }
        perform(journalDirectives: journal?.setHoldings(complete) ?? [])
        replicate()
    }

    // MARK: what the journal holds

    public var attachmentEntries: [AttachmentEntry] { journal?.state.attachments ?? [] }

    public func attachmentUpdates() -> AsyncStream<[AttachmentEntry]> {
        let (stream, continuation) = AsyncStream<[AttachmentEntry]>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = nextSubscriptionID()
        attachmentSubscribers[id] = continuation
        continuation.yield(attachmentEntries)
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { await self.removeAttachmentSubscriber(id) }
        }
        return stream
    }

    func removeAttachmentSubscriber(_ id: UInt64) { attachmentSubscribers[id] = nil }

    /// An attachment named by its id or a unique prefix of it.
    public func resolveAttachment(_ text: String) throws(GroupMeshError) -> AttachmentEntry {
        let lowered = text.lowercased()
        let entries = attachmentEntries
        if let exact = entries.first(where: { $0.id.hex == lowered }) { return exact }
        guard lowered.count >= 4 else {
            throw .attachment("'\(text)' is too short to name an attachment; give at least 4 characters of its id")
        }
        let matches = entries.filter { $0.id.hex.hasPrefix(lowered) }
        guard matches.count == 1 else {
            if matches.count > 1 { throw .attachment("'\(text)' matches several attachments; give more of the id") }
            throw .unknownAttachment(text)
        }
        return matches[0]
    }

    func attachmentInfos() async -> [StatusReport.AttachmentInfo] {
        var infos: [StatusReport.AttachmentInfo] = []
        for entry in attachmentEntries {
            var have = 0
            if complete.contains(entry.id) {
                have = entry.chunkCount
            } else if let manifest = manifests[entry.id], let store {
                have = await store.heldCount(manifest)
            }
            infos.append(StatusReport.AttachmentInfo(id: entry.id.hex, size: entry.size, chunks: entry.chunkCount,
                                                     chunksHave: have, holders: holders(of: entry.id).count,
                                                     metadata: String(decoding: entry.metadata, as: UTF8.self)))
        }
        return infos
    }

    func progress(of entry: AttachmentEntry) -> TransferProgress {
        let have = complete.contains(entry.id) ? entry.chunkCount : (localBitmaps[entry.id]?.held ?? 0)
        return TransferProgress(chunksHave: have, chunks: entry.chunkCount, size: entry.size)
    }

    /// Live members (this node included) known to hold the attachment whole.
    func holders(of id: SHA256Digest) -> [NodeID] {
        let live = Set(activeMemberIDs + [nodeID])
        return (journal?.holders(of: id) ?? []).filter(live.contains)
    }

    // MARK: adding and removing

    /// Adds a file (streamed: chunked and hashed without loading it whole) or bytes.
    public func addAttachment(file path: String? = nil, bytes: [UInt8]? = nil, metadata: [UInt8]) async throws(GroupMeshError) -> AttachmentEntry {
        guard metadata.count <= JournalOperation.maxMetadataBytes else {
            throw .attachment("metadata of \(metadata.count) bytes is over the 64 KiB limit; nothing was stored")
        }
        guard let store else { throw .attachment("the node is not running") }
        let manifest: Manifest
        if let path {
            manifest = try await store.ingest(fileAt: path, limit: configuration.maxAttachmentSize)
        } else {
            manifest = try await store.ingest(bytes ?? [], limit: configuration.maxAttachmentSize)
        }
        // The store holds the chunks (no remove collects them) until the operation is in the log.
        let id = manifest.id
        guard let operation = journal?.prepareAdd(id, size: manifest.size, chunkCount: manifest.chunks.count,
                                                  metadata: metadata) else {
            await store.unpin(manifest)
            throw .attachment("the node is not running")
        }
        do {
            try await store.appendOperations([operation])
        } catch {
            // Not added: the chunks no attachment here uses go again (a full disk gets its space back).
            let kept = complete.contains(id) ? nil : attachmentEntries.compactMap { manifests[$0.id] }
            await store.unpin(manifest, collectKeeping: kept)
            throw error
        }
        guard var instance = journal else {
            await store.unpin(manifest)
            throw .attachment("the node is not running")
        }
        manifests[id] = manifest
        complete.insert(id)
        var directives = instance.publish(operation)
        directives += instance.setHoldings(complete)
        journal = instance
        carryOut(directives)
        await store.unpin(manifest)
        guard let entry = instance.state.entry(id) else { throw .attachment("the attachment could not be added") }
        return entry
    }

    public func removeAttachment(_ id: SHA256Digest) async throws(GroupMeshError) {
        guard let store else { throw .attachment("the node is not running") }
        guard let operation = journal?.prepareRemove(id) else { throw .unknownAttachment(id.hex) }
        try await store.appendOperations([operation])
        guard var instance = journal else { throw .attachment("the node is not running") }
        let directives = instance.publish(operation)
        journal = instance
        carryOut(directives)
    }

    /// Carries out the directives of a local change. Its operation went to the journal log on
    /// disk first: what `attach` or `remove` acknowledges survives a crash right after, and one
    /// whose write failed changed nothing, here or at any member.
    private func carryOut(_ directives: [JournalInstance.Directive]) {
        for directive in directives {
            if case let .applied(operations) = directive {
                journalChanged(operations)
            } else {
                perform(journalDirectives: [directive])
            }
        }
        rearm()
    }

    /// The attachment's manifest once every chunk is on disk: at once if it is, else after
    /// fetching what is missing from the members that hold it.
    public func completeAttachment(_ id: SHA256Digest) async throws(GroupMeshError) -> Manifest {
        guard journal?.state.isPresent(id) == true else { throw .unknownAttachment(id.hex) }
        if complete.contains(id), let manifest = manifests[id] { return manifest }
        let result = await withCheckedContinuation { continuation in
            fetchWaiters[id, default: []].append(continuation)
            startFetch(id)
        }
        return try result.get()
    }

    public func loadAttachment(_ id: SHA256Digest, to path: String) async throws(GroupMeshError) {
        guard !configuration.dataDirectory.ownsFile(path) else {
            throw .attachment("\(path) is one of the node's own files; write the attachment somewhere else")
        }
        let manifest = try await completeAttachment(id)
        guard let store else { throw .attachment("the node is not running") }
        try await store.assemble(manifest, to: path)
    }

    public func loadAttachment(_ id: SHA256Digest) async throws(GroupMeshError) -> [UInt8] {
        let manifest = try await completeAttachment(id)
        guard let store else { throw .attachment("the node is not running") }
        return try await store.bytes(of: manifest)
    }

    // MARK: journal messages

    func sendJournal(_ message: JournalMessage, to peer: NodeID) {
        let envelope = MessageEnvelope(type: JournalMessage.typeTag, body: message.encoded)
        let mode = DeliveryInstance.Mode.reliable
        guard let (_, directives) = try? delivery.send(envelope.encoded, to: [peer], mode: mode, now: now,
                                                            timeout: .seconds(30)) else { return }
        if case let .chunk(_, bytes) = message {
            counters.chunksServed += 1
            counters.chunkPayloadBytesSent += UInt64(bytes.count)
        }
        perform(directives)
    }

    func receiveJournal(_ body: [UInt8], from peer: NodeID, mode: DeliveryInstance.Mode) {
        guard let message = try? JournalMessage(decoding: body), var instance = journal else { return }
        // Operations, ids and whole chunks only count when they came in order and complete.
        switch message {
        case .chunkRequest, .noChunk, .chunks: break
        default: guard mode == .reliable else { return }
        }
        switch message {
        case let .chunkRequest(digest):
            Task { await self.serveManifest(digest, to: peer) }
        case let .chunk(digest, bytes):
            if chunkWaiters[digest] != nil { resolveChunk(digest, bytes: bytes, from: peer) }
        case let .noChunk(digest):
            if chunkWaiters[digest] != nil { resolveChunk(digest, bytes: nil, from: peer) }
        case let .chunks(attachment, bitmap):
            receiveAvailability(bitmap, of: attachment, from: peer)
        default:
            let directives = instance.onMessage(message, from: peer)
            journal = instance
            perform(journalDirectives: directives)
        }
    }

    private func serveManifest(_ digest: SHA256Digest, to peer: NodeID) async {
        // Served only after verification: the store hashes every chunk it reads.
        let bytes = await store?.read(digest)
        if let bytes {
            sendJournal(.chunk(digest, bytes), to: peer)
        } else {
            sendJournal(.noChunk(digest), to: peer)
        }
        rearm()
    }

    func perform(journalDirectives directives: [JournalInstance.Directive]) {
        for directive in directives {
            switch directive {
            case let .send(peer, message):
                sendJournal(message, to: peer)
            case let .applied(operations):
                Task { try? await self.store?.appendOperations(operations) }
                journalChanged(operations)
            case .holdersChanged:
                let waiters = holderWaiters
                holderWaiters = []
                for waiter in waiters { waiter.resume() }
                refreshAvailability()
                replicate()
            }
        }
    }

    /// After new operations: tell subscribers, drop what was removed, fetch what was added.
    private func journalChanged(_ operations: [JournalOperation]) {
        let entries = attachmentEntries
        for subscriber in attachmentSubscribers.values { subscriber.yield(entries) }
        guard let state = journal?.state else { return }
        for operation in operations where operation.kind == .remove && !state.isPresent(operation.attachment) {
            let id = operation.attachment
            // A fetch under way stops: chunks it brought after this would never be collected.
            if fetching.contains(id) { finishFetch(id, .failure(.unknownAttachment(id.hex))) }
            complete.remove(id)
            recentChunks.removeAll()
            if let manifest = manifests.removeValue(forKey: id), let store {
                let kept = entries.compactMap { manifests[$0.id] }
                Task { await store.collect(manifest, keeping: kept) }
            }
            for waiter in fetchWaiters.removeValue(forKey: id) ?? [] { waiter.resume(returning: .failure(.unknownAttachment(id.hex))) }
        }
        perform(journalDirectives: journal.map { var instance = $0; let out = instance.setHoldings(complete); journal = instance; return out } ?? [])
        replicate()
    }

    static let replicationPauseAfterStoreFailure: Duration = .seconds(30)

    /// Whether fetches wait for a `get` to start them, after a chunk could not be stored.
    var isReplicationPaused: Bool { replicationPausedUntil.map { now < $0 } ?? false }

    /// Fetches every attachment in the journal that is not whole here, unless `--lazy` (or
    /// paused after a chunk could not be stored).
    func replicate() {
        guard !configuration.lazy, !isReplicationPaused else { return }
        for entry in attachmentEntries where !complete.contains(entry.id) { startFetch(entry.id) }
    }

    // MARK: fetching (the swarm)

    func startFetch(_ id: SHA256Digest) {
        guard !fetching.contains(id), !stopped else { return }
        fetching.insert(id)
        lastProgress[id] = now
        fetchStartedAt[id] = now
        Task { await self.prepareFetch(id) }
    }

    /// Gets the manifest (from any member that has some of the attachment), finds what is
    /// already on disk (a restarted node resumes), and hands the rest to the scheduler.
    private func prepareFetch(_ id: SHA256Digest) async {
        guard let store else { return finishFetch(id, .failure(.attachment("the node is not running"))) }
        var manifest = manifests[id]
        if manifest == nil { manifest = await store.manifest(id) }
        if manifest == nil {
            do {
                let bytes = try await fetchManifest(id)
                try await store.write(bytes, expected: id)
                manifest = try? Manifest(decoding: bytes)
            } catch {
                return finishFetch(id, .failure(error))
            }
        }
        guard let manifest else { return finishFetch(id, .failure(.unavailable("the manifest of \(id.hex.prefix(16)) is invalid"))) }
        manifests[id] = manifest
        let missing = Set(await store.missing(manifest))
        var have = ChunkBitmap(count: manifest.chunks.count)
        for (index, digest) in manifest.chunks.enumerated() where !missing.contains(digest) { have.insert(index) }
        // Removed (and the fetch stopped) while the manifest or the store was awaited.
        guard fetching.contains(id), journal?.state.isPresent(id) == true else { return }
        guard !have.isComplete else { return finishFetch(id, .success(manifest)) }
        localBitmaps[id] = have
        fetchNeeded[id] = manifest.chunks.count - have.held
        transfer.start(manifest, have: have)
        refreshAvailability()
        pumpTransfers()
    }

    private func finishFetch(_ id: SHA256Digest, _ result: Result<Manifest, GroupMeshError>) {
        fetching.remove(id)
        if case let .success(manifest) = result, let started = fetchStartedAt[id], let needed = fetchNeeded[id] {
            let seconds = max(1e-9, Double((now - started).nanosecondsClamped) / 1e9)
            let bytes = Double(min(UInt64(needed) * UInt64(manifest.chunkSize), manifest.size))
            logger.info("fetched", metadata: ["attachment": "\(id.hex.prefix(16))", "chunks": "\(needed)",
                                              "seconds": "\((seconds * 1000).rounded() / 1000)",
                                              "MiBps": "\((bytes / seconds / 1_048_576).rounded())"])
        }
        fetchStartedAt[id] = nil
        fetchNeeded[id] = nil
        for digest in manifests[id]?.chunks ?? [] {
            assembler.cancel(digest)
            requested[digest] = nil
        }
        localBitmaps[id] = nil
        lastProgress[id] = nil
        transfer.cancel(id)
        if case let .success(manifest) = result {
            manifests[id] = manifest
            complete.insert(id)
            if var instance = journal {
                let directives = instance.setHoldings(complete)
                journal = instance
                perform(journalDirectives: directives)
            }
        }
        for waiter in fetchWaiters.removeValue(forKey: id) ?? [] { waiter.resume(returning: result) }
        rearm()
    }

    /// Sends the scheduler's requests.
    func pumpTransfers() {
        for request in transfer.nextRequests(now: now) {
            logger.debug("request", metadata: ["peer": "\(request.peer.hex.prefix(6))", "index": "\(request.index)"])
            requested[request.digest, default: []].append(ChunkRef(attachment: request.attachment, index: request.index))
            if let length = manifests[request.attachment]?.length(ofChunk: request.index),
               let want = assembler.begin(request.digest, length: length, from: request.peer, now: now) {
                sendTransfer(.chunkWant(want), to: request.peer)
            } else {
                transfer.onBusy(attachment: request.attachment, index: request.index, from: request.peer, now: now)
            }
        }
        rearm()
    }

    /// Tells the scheduler who holds what: members that announced whole attachments, as full bitmaps.
    func refreshAvailability() {
        for id in Set(transfer.activeAttachments).union(manifests.keys).sorted() {
            guard let count = manifests[id]?.chunks.count else { continue }
            for holder in holders(of: id) where holder != nodeID {
                transfer.setAvailability(.full(count), of: id, at: holder)
            }
        }
    }

    /// A chunk whose last piece came from `peer`, put together from pieces of `contributors`.
    func receiveChunk(_ digest: SHA256Digest, bytes: [UInt8], from peer: NodeID, contributors: Set<NodeID>) {
        guard let refs = requested[digest], !refs.isEmpty else { return }
        requested[digest] = nil
        Task { await self.storeChunk(digest, bytes: bytes, refs: refs, from: peer, contributors: contributors) }
    }

    /// The store hashes the chunk before keeping it (once: the node does not hash it again).
    private func storeChunk(_ digest: SHA256Digest, bytes: [UInt8], refs: [ChunkRef], from peer: NodeID,
                            contributors: Set<NodeID>) async {
        guard let store else { return }
        switch await store.writeFetched(bytes, expected: digest) {
        case .stored:
            break
        case .mismatch:
            // Never stored, never served. A sole sender is not asked for it again; pieces from
            // several senders name no culprit, so the chunk is asked of one at a time.
            counters.chunksRejected += 1
            for ref in refs {
                requested[digest, default: []].append(ref)
                if contributors.count > 1 {
                    transfer.onMixedBadChunk(attachment: ref.attachment, index: ref.index, from: contributors)
                } else {
                    for sender in contributors {
                        transfer.onChunk(attachment: ref.attachment, index: ref.index, from: sender, valid: false)
                    }
                }
            }
            pumpTransfers()
            return
        case let .failed(reason):
            // Our disk, not the holder: asking others would fetch the chunk again to fail again.
            for ref in refs { transfer.onMissing(attachment: ref.attachment, index: ref.index, from: peer) }
            return storeFailed(.store(reason), fetching: refs.map(\.attachment))
        }
        counters.chunksFetched += 1
        for ref in refs {
            localBitmaps[ref.attachment]?.insert(ref.index)
            dirtyBitmaps.insert(ref.attachment)
            lastProgress[ref.attachment] = now
            if transfer.onChunk(attachment: ref.attachment, index: ref.index, from: peer, valid: true) {
                // Complete only once durable: a full disk can still refuse the last renames.
                do {
                    try await store.flush()
                } catch {
                    storeFailed(error, fetching: [ref.attachment])
                    continue
                }
                if let manifest = manifests[ref.attachment] { finishFetch(ref.attachment, .success(manifest)) }
            }
        }
        pumpTransfers()
    }


    /// Chunks cannot be stored (a full disk, most likely): the fetches that brought them end
    /// with the store's message, and replication waits before trying again.
    private func storeFailed(_ error: GroupMeshError, fetching ids: [SHA256Digest]) {
        logger.warning("cannot store a chunk", metadata: ["error": "\(error)"])
        for id in Set(ids).sorted() where fetching.contains(id) { finishFetch(id, .failure(error)) }
        replicationPausedUntil = now + Self.replicationPauseAfterStoreFailure
    }

    func receiveAvailability(_ bitmap: ChunkBitmap, of attachment: SHA256Digest, from peer: NodeID) {
        logger.debug("availability", metadata: ["peer": "\(peer.hex.prefix(6))", "held": "\(bitmap.held)/\(bitmap.count)"])
        transfer.setAvailability(bitmap, of: attachment, at: peer)
        if !complete.contains(attachment), !fetching.contains(attachment), !configuration.lazy,
           !isReplicationPaused, journal?.state.isPresent(attachment) == true {
            startFetch(attachment)
        }
        pumpTransfers()
    }

    /// Periodic transfer work: time out requests, announce new chunks, give up on what nobody holds.
    func transferTick(now time: MeshInstant) {
        transfer.onTick(now: time)
        if let until = replicationPausedUntil, time >= until {
            replicationPausedUntil = nil
            replicate()
        }
        for (peer, want) in assembler.onTick(now: time) { sendTransfer(.chunkWant(want), to: peer) }
        if time >= nextBitmapAnnouncement {
            nextBitmapAnnouncement = time + .milliseconds(250)
            for id in dirtyBitmaps.sorted() {
                guard let bitmap = localBitmaps[id] else { continue }
                for peer in activeMemberIDs { sendJournal(.chunks(id, bitmap), to: peer) }
            }
            dirtyBitmaps = []
        }
        for id in fetching.sorted() {
            guard let last = lastProgress[id], time >= last + configuration.unavailableTimeout,
                  !transfer.hasRequestsInFlight(id), let manifest = manifests[id] else { continue }
            let missing = manifest.chunks.count - (localBitmaps[id]?.held ?? 0)
            finishFetch(id, .failure(.unavailable(
                "no reachable member holds \(missing) of the \(manifest.chunks.count) chunks of \(id.hex.prefix(16))")))
        }
        pumpTransfers()
    }

    private func fetchManifest(_ id: SHA256Digest) async throws(GroupMeshError) -> [UInt8] {
        let deadline = now + configuration.unavailableTimeout
        var tried: Set<NodeID> = []
        while true {
            let candidates = (holders(of: id) + transfer.peersWithChunks(of: id)).filter { $0 != nodeID }
            let fresh = candidates.filter { !tried.contains($0) }
            if let holder = fresh.randomElement() ?? candidates.randomElement() {
                tried.insert(holder)
                if let bytes = await requestChunk(id, from: holder), SHA256Digest.hashing(bytes) == id { return bytes }
                if now >= deadline { break }
                continue
            }
            guard now < deadline else { break }
            await waitForHolders(until: deadline)
        }
        throw .unavailable("no reachable member holds the manifest of \(id.hex.prefix(16))")
    }

    private func requestChunk(_ digest: SHA256Digest, from holder: NodeID) async -> [UInt8]? {
        await withCheckedContinuation { continuation in
            if var wait = chunkWaiters[digest] {
                wait.waiters.append(continuation)
                chunkWaiters[digest] = wait
            } else {
                chunkWaiters[digest] = ChunkWait(holder: holder, deadline: now + Self.chunkRequestTimeout, waiters: [continuation])
                sendJournal(.chunkRequest(digest), to: holder)
                rearm()
            }
        }
    }

    private func resolveChunk(_ digest: SHA256Digest, bytes: [UInt8]?, from peer: NodeID) {
        guard let wait = chunkWaiters[digest], wait.holder == peer else { return }
        chunkWaiters[digest] = nil
        for waiter in wait.waiters { waiter.resume(returning: bytes) }
    }

    /// Gives up on manifest requests whose holder did not answer in time.
    func expireChunkRequests(now: MeshInstant) {
        for (digest, wait) in chunkWaiters where now >= wait.deadline {
            chunkWaiters[digest] = nil
            for waiter in wait.waiters { waiter.resume(returning: nil) }
        }
    }

    var journalDeadline: MeshInstant? {
        var deadline = journal?.nextDeadline
        func consider(_ instant: MeshInstant?) {
            guard let instant else { return }
            deadline = deadline.map { min($0, instant) } ?? instant
        }
        for wait in chunkWaiters.values { consider(wait.deadline) }
        consider(transfer.nextDeadline)
        consider(assembler.nextDeadline)
        if !dirtyBitmaps.isEmpty { consider(nextBitmapAnnouncement) }
        // Only where `transferTick` would act on it: a deadline it leaves in the past spins the timer.
        for id in fetching where manifests[id] != nil && !transfer.hasRequestsInFlight(id) {
            consider(lastProgress[id].map { $0 + configuration.unavailableTimeout })
        }
        return deadline
    }

    /// Waits until holders change or `deadline` passes (the node's timer wakes us).
    private func waitForHolders(until deadline: MeshInstant) async {
        await withCheckedContinuation { continuation in
            holderWaiters.append(continuation)
            let delay = max(.milliseconds(1), deadline - now)
            eventLoop.scheduleTask(in: .nanoseconds(delay.nanosecondsClamped)) { [self] in
                assumeIsolated { node in
                    let waiters = node.holderWaiters
                    node.holderWaiters = []
                    for waiter in waiters { waiter.resume() }
                }
            }
        }
    }
}

extension MeshNode {
    // MARK: control socket

    func controlJournal(_ request: ControlRequest, responder: ControlResponder) {
        Task { await self.answerJournal(request, responder: responder) }
    }

    private func answerJournal(_ request: ControlRequest, responder: ControlResponder) async {
        do {
            switch request.command {
            case .attach:
                guard let path = request.path else { throw GroupMeshError.attachment("attach needs a file path") }
                let entry = try await addAttachment(file: path, metadata: Array((request.metadata ?? "").utf8))
                responder.send(ControlResponse(ok: true, attachment: entry.id.hex))
            case .attachments:
                var infos = await attachmentInfos()
                for index in infos.indices where infos[index].metadata?.isEmpty == true { infos[index].metadata = nil }
                responder.send(ControlResponse(ok: true, attachments: infos))
            case .get:
                guard let path = request.path else { throw GroupMeshError.attachment("get needs an output path") }
                let entry = try resolveAttachment(request.id ?? "")
                // Progress every 250 ms until the file is written (the CLI draws it).
                let reporter = Task {
                    while !Task.isCancelled {
                        responder.send(ControlResponse(ok: true, progress: self.progress(of: entry)))
                        try await Task.sleep(for: .milliseconds(250))
                    }
                }
                defer { reporter.cancel() }
                try await loadAttachment(entry.id, to: path)
                reporter.cancel()
                responder.send(ControlResponse(ok: true, attachment: entry.id.hex))
            case .remove:
                let entry = try resolveAttachment(request.id ?? "")
                try await removeAttachment(entry.id)
                responder.send(ControlResponse(ok: true, attachment: entry.id.hex))
            default:
                responder.send(.failure("not a journal command"))
            }
        } catch let error as GroupMeshError {
            responder.send(.failure(error.description))
        } catch {
            responder.send(.failure("\(error)"))
        }
    }
}
