import Foundation
import MeshCore
import MeshCrypto
import NIOCore

/// A chunk (or manifest) asked of one holder, and the fetches waiting for it.
struct ChunkWait {
    var holder: NodeID
    var deadline: MeshInstant
    var waiters: [CheckedContinuation<[UInt8]?, Never>]
}

extension MeshNode {
    static let chunkRequestTimeout: Duration = .seconds(5)
    static let parallelChunkRequests = 8

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
        let matches = lowered.count >= 4 ? entries.filter { $0.id.hex.hasPrefix(lowered) } : []
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
        let id = manifest.id
        manifests[id] = manifest
        complete.insert(id)
        guard var instance = journal else { throw .attachment("the node is not running") }
        var directives = instance.add(id, size: manifest.size, chunkCount: manifest.chunks.count, metadata: metadata)
        directives += instance.setHoldings(complete)
        journal = instance
        perform(journalDirectives: directives)
        rearm()
        guard let entry = instance.state.entry(id) else { throw .attachment("the attachment could not be added") }
        return entry
    }

    public func removeAttachment(_ id: SHA256Digest) throws(GroupMeshError) {
        guard var instance = journal, let directives = instance.remove(id) else {
            throw .unknownAttachment(id.hex)
        }
        journal = instance
        perform(journalDirectives: directives)
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
        guard let (_, directives) = try? delivery.send(envelope.encoded, to: [peer], mode: .reliable, now: now,
                                                       timeout: .seconds(30)) else { return }
        if case let .chunk(_, bytes) = message {
            counters.chunksServed += 1
            counters.chunkPayloadBytesSent += UInt64(bytes.count)
        }
        perform(directives)
    }

    func receiveJournal(_ body: [UInt8], from peer: NodeID) {
        guard let message = try? JournalMessage(decoding: body), var instance = journal else { return }
        switch message {
        case let .chunkRequest(digest):
            Task { await self.serveChunk(digest, to: peer) }
        case let .chunk(digest, bytes):
            resolveChunk(digest, bytes: bytes, from: peer)
        case let .noChunk(digest):
            resolveChunk(digest, bytes: nil, from: peer)
        default:
            let directives = instance.onMessage(message, from: peer)
            journal = instance
            perform(journalDirectives: directives)
        }
    }

    private func serveChunk(_ digest: SHA256Digest, to peer: NodeID) async {
        // Served only after verification: the store hashes every chunk it reads.
        if let bytes = await store?.read(digest) {
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
            complete.remove(id)
            if let manifest = manifests.removeValue(forKey: id), let store {
                let kept = entries.compactMap { manifests[$0.id] }
                Task { await store.collect(manifest, keeping: kept) }
            }
            for waiter in fetchWaiters.removeValue(forKey: id) ?? [] { waiter.resume(returning: .failure(.unknownAttachment(id.hex))) }
        }
        perform(journalDirectives: journal.map { var instance = $0; let out = instance.setHoldings(complete); journal = instance; return out } ?? [])
        replicate()
    }

    /// Fetches every attachment in the journal that is not whole here, unless `--lazy`.
    func replicate() {
        guard !configuration.lazy else { return }
        for entry in attachmentEntries where !complete.contains(entry.id) { startFetch(entry.id) }
    }

    // MARK: fetching

    func startFetch(_ id: SHA256Digest) {
        guard !fetching.contains(id), !stopped else { return }
        fetching.insert(id)
        Task { await self.runFetch(id) }
    }

    private func runFetch(_ id: SHA256Digest) async {
        let result: Result<Manifest, GroupMeshError>
        do {
            result = .success(try await fetch(id))
        } catch {
            result = .failure(error)
        }
        fetching.remove(id)
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
        // Replication retries later (the next journal change or holder announcement); a get
        // has had its answer.
        rearm()
    }

    private func fetch(_ id: SHA256Digest) async throws(GroupMeshError) -> Manifest {
        guard let store else { throw .attachment("the node is not running") }
        let manifest: Manifest
        var stored = manifests[id]
        if stored == nil { stored = await store.manifest(id) }
        if let known = stored {
            manifest = known
        } else {
            guard let bytes = try await fetchChunk(id, for: id, what: "its manifest"),
                  let decoded = try? Manifest(decoding: bytes), decoded.id == id else {
                throw .unavailable("the manifest of \(id.hex.prefix(16)) could not be fetched")
            }
            try await store.write(bytes, expected: id)
            manifest = decoded
        }
        manifests[id] = manifest
        var missing = await store.missing(manifest)
        while !missing.isEmpty {
            let batch = Array(missing.prefix(Self.parallelChunkRequests * 4))
            let fetched = await withTaskGroup(of: (SHA256Digest, [UInt8]?).self) { group in
                var results: [(SHA256Digest, [UInt8]?)] = []
                var iterator = batch.makeIterator()
                func next() -> SHA256Digest? { iterator.next() }
                for _ in 0..<Self.parallelChunkRequests {
                    guard let digest = next() else { break }
                    group.addTask { (digest, try? await self.fetchChunk(digest, for: id, what: "chunk")) }
                }
                while let result = await group.next() {
                    results.append(result)
                    if let digest = next() {
                        group.addTask { (digest, try? await self.fetchChunk(digest, for: id, what: "chunk")) }
                    }
                }
                return results
            }
            var progressed = false
            for (digest, bytes) in fetched {
                guard let bytes else { continue }
                do {
                    try await store.write(bytes, expected: digest)
                    counters.chunksFetched += 1
                    progressed = true
                } catch {
                    counters.chunksRejected += 1
                }
            }
            try await store.flush()
            missing = await store.missing(manifest)
            if !progressed && !missing.isEmpty {
                throw .unavailable("no reachable member holds \(missing.count) of the \(manifest.chunks.count) chunks of \(id.hex.prefix(16))")
            }
        }
        return manifest
    }

    /// One chunk (or manifest) from some holder of `attachment`, or nil; throws `unavailable`
    /// when no live member holds it within the timeout.
    private func fetchChunk(_ digest: SHA256Digest, for attachment: SHA256Digest, what: String) async throws(GroupMeshError) -> [UInt8]? {
        let deadline = now + configuration.unavailableTimeout
        var tried: Set<NodeID> = []
        while true {
            let candidates = holders(of: attachment).filter { $0 != nodeID }
            let fresh = candidates.filter { !tried.contains($0) }
            if let holder = (fresh.isEmpty ? candidates : fresh).randomElement() {
                tried.insert(holder)
                let bytes = await requestChunk(digest, from: holder)
                if let bytes, SHA256Digest.hashing(bytes) == digest { return bytes }
                if bytes != nil { counters.chunksRejected += 1 }
                if fresh.count <= 1 && now >= deadline { return nil }
                continue
            }
            guard now < deadline else {
                throw .unavailable("no reachable member holds \(what) of \(attachment.hex.prefix(16))")
            }
            await waitForHolders(until: deadline)
        }
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

    /// Gives up on chunk requests whose holder did not answer in time.
    func expireChunkRequests(now: MeshInstant) {
        for (digest, wait) in chunkWaiters where now >= wait.deadline {
            chunkWaiters[digest] = nil
            for waiter in wait.waiters { waiter.resume(returning: nil) }
        }
    }

    var journalDeadline: MeshInstant? {
        var deadline = journal?.nextDeadline
        for wait in chunkWaiters.values { deadline = deadline.map { min($0, wait.deadline) } ?? wait.deadline }
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
                try await loadAttachment(entry.id, to: path)
                responder.send(ControlResponse(ok: true, attachment: entry.id.hex))
            case .remove:
                let entry = try resolveAttachment(request.id ?? "")
                try removeAttachment(entry.id)
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
