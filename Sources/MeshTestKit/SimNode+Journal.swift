import MeshCore
import MeshCrypto

/// One chunk of one attachment: what a chunk request was for.
struct ChunkRef: Hashable {
    var attachment: SHA256Digest
    var index: Int
}

/// A manifest asked of one holder after another (`MeshNode.fetchManifest`'s loop, as state).
struct ManifestFetch {
    /// When the fetch gives up if nobody can be asked.
    var deadline: MeshInstant
    var tried: Set<NodeID> = []
    /// Who was asked, and until when we wait for the answer (nil: waiting for a holder).
    var holder: NodeID?
    var answerBy: MeshInstant?
}

/// The journal and attachments of a simulated node, as `MeshNode+Journal`: operations over the
/// reliable messenger, holdings, replication of every attachment, manifests fetched from holders.
extension SimNode {
    // MARK: adding and removing

    /// Adds `bytes` as an attachment: chunked, stored, announced. Returns its id.
    @discardableResult
    public func attach(_ bytes: [UInt8], metadata: [UInt8] = []) -> SHA256Digest {
        var digests: [SHA256Digest] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + configuration.chunkSize)
            let chunk = Array(bytes[offset..<end])
            store.write(chunk)
            digests.append(SHA256Digest.hashing(chunk))
            offset = end
        }
        let manifest = Manifest(size: UInt64(bytes.count), chunkSize: configuration.chunkSize, chunks: digests)
        store.write(manifest.encoded)
        let id = manifest.id
        manifests[id] = manifest
        complete.insert(id)
        var directives = journal.add(id, size: manifest.size, chunkCount: manifest.chunks.count, metadata: metadata)
        directives += journal.setHoldings(complete)
        for case let .applied(operations) in directives { created += operations }
        performJournal(directives)
        return id
    }

    /// Removes the `pick`-th present attachment (modulo how many there are); nil when there is none.
    @discardableResult
    public func removeAttachment(pick: UInt64) -> SHA256Digest? {
        let present = journal.state.attachments
        guard !present.isEmpty else { return nil }
        let id = present[Int(pick % UInt64(present.count))].id
        guard let directives = journal.remove(id) else { return nil }
        for case let .applied(operations) in directives { created += operations }
        performJournal(directives)
        return id
    }

    // MARK: journal messages

    func sendJournal(_ message: JournalMessage, to peer: NodeID) {
        let envelope = MessageEnvelope(type: JournalMessage.typeTag, body: message.encoded)
        guard let (_, directives) = try? delivery.send(envelope.encoded, to: [peer], mode: .reliable, now: now,
                                                       timeout: Self.journalSendTimeout) else {
            violations.append("\(now): a journal message was refused")
            return
        }
        performDelivery(directives)
    }

    func receiveJournal(_ body: [UInt8], from peer: NodeID, mode: DeliveryInstance.Mode) {
        guard let message = try? JournalMessage(decoding: body) else {
            violations.append("\(now): an undecodable journal message from \(peer)")
            return
        }
        // Operations, ids and whole chunks only count when they came in order and complete.
        switch message {
        case .chunkRequest, .noChunk, .chunks: break
        default: guard mode == .reliable else { return }
        }
        switch message {
        case let .chunkRequest(digest):
            // Served only after verification: the store hashes every chunk it reads.
            if let bytes = store.read(digest) {
                sendJournal(.chunk(digest, bytes), to: peer)
            } else {
                sendJournal(.noChunk(digest), to: peer)
            }
        case let .chunk(digest, bytes):
            manifestAnswer(digest, bytes: bytes, from: peer)
        case let .noChunk(digest):
            manifestAnswer(digest, bytes: nil, from: peer)
        case let .chunks(attachment, bitmap):
            receiveAvailability(bitmap, of: attachment, from: peer)
        default:
            performJournal(journal.onMessage(message, from: peer))
        }
    }

    func performJournal(_ directives: [JournalInstance.Directive]) {
        for directive in directives {
            switch directive {
            case let .send(peer, message):
                sendJournal(message, to: peer)
            case let .applied(operations):
                journalChanged(operations)
            case .holdersChanged:
                for id in manifestFetches.keys.sorted() where manifestFetches[id]?.holder == nil { askForManifest(id) }
                refreshAvailability()
                replicate()
            }
        }
    }

    /// After new operations: drop what was removed, fetch what was added.
    private func journalChanged(_ operations: [JournalOperation]) {
        let state = journal.state
        for operation in operations where operation.kind == .remove && !state.isPresent(operation.attachment) {
            let id = operation.attachment
            // A fetch under way stops: chunks it brought after this would never be collected.
            if fetching.contains(id) { stopFetch(id) }
            complete.remove(id)
            if let manifest = manifests.removeValue(forKey: id) {
                let kept = state.attachments.compactMap { manifests[$0.id] }
                store.collect(manifest, keeping: kept)
            }
        }
        performJournal(journal.setHoldings(complete))
        replicate()
    }

    /// Live members (this node included) known to hold the attachment whole.
    func holders(of id: SHA256Digest) -> [NodeID] {
        let live = Set(activeMemberIDs + [self.id])
        return journal.holders(of: id).filter(live.contains)
    }

    /// Fetches every attachment in the journal that is not whole here.
    func replicate() {
        for entry in journal.state.attachments where !complete.contains(entry.id) { startFetch(entry.id) }
    }

    // MARK: fetching

    func startFetch(_ id: SHA256Digest) {
        guard !fetching.contains(id) else { return }
        fetching.insert(id)
        lastProgress[id] = now
        if manifests[id] == nil { manifests[id] = store.manifest(id) }
        if let manifest = manifests[id] {
            beginTransfer(id, manifest)
        } else {
            manifestFetches[id] = ManifestFetch(deadline: now + configuration.unavailableTimeout)
            askForManifest(id)
        }
    }

    /// Asks the next holder for the manifest, or waits for one (until the fetch's deadline).
    func askForManifest(_ id: SHA256Digest) {
        guard var fetch = manifestFetches[id] else { return }
        let candidates = (holders(of: id) + transfer.peersWithChunks(of: id)).filter { $0 != self.id }
        let fresh = candidates.filter { !fetch.tried.contains($0) }
        let pool = fresh.isEmpty ? candidates : fresh
        if pool.isEmpty {
            fetch.holder = nil
            fetch.answerBy = nil
        } else {
            let holder = pool[Int(random.next() % UInt64(pool.count))]
            fetch.tried.insert(holder)
            fetch.holder = holder
            fetch.answerBy = now + configuration.manifestRequestTimeout
            sendJournal(.chunkRequest(id), to: holder)
        }
        manifestFetches[id] = fetch
    }

    private func manifestAnswer(_ digest: SHA256Digest, bytes: [UInt8]?, from peer: NodeID) {
        guard let fetch = manifestFetches[digest], fetch.holder == peer else { return }
        if let bytes, let manifest = try? Manifest(decoding: bytes), manifest.id == digest, store.write(bytes, expected: digest) {
            manifestFetches[digest] = nil
            manifests[digest] = manifest
            beginTransfer(digest, manifest)
        } else {
            manifestRetry(digest)
        }
    }

    /// The asked holder said no or said nothing: the next one, or give up after the deadline.
    private func manifestRetry(_ id: SHA256Digest) {
        guard let fetch = manifestFetches[id] else { return }
        if now >= fetch.deadline {
            finishFetch(id, nil)
        } else {
            askForManifest(id)
        }
    }

    func expireManifestRequests() {
        for (id, fetch) in manifestFetches.sorted(by: { $0.key < $1.key }) {
            if let answerBy = fetch.answerBy {
                if now >= answerBy { manifestRetry(id) }
            } else if now >= fetch.deadline {
                finishFetch(id, nil)
            }
        }
    }

    /// Finds what is already stored and hands the rest to the scheduler.
    private func beginTransfer(_ id: SHA256Digest, _ manifest: Manifest) {
        let missing = Set(store.missing(manifest))
        var have = ChunkBitmap(count: manifest.chunks.count)
        for (index, digest) in manifest.chunks.enumerated() where !missing.contains(digest) { have.insert(index) }
        guard !have.isComplete else { return finishFetch(id, manifest) }
        localBitmaps[id] = have
        transfer.start(manifest, have: have)
        refreshAvailability()
        pumpTransfers()
    }

    /// Ends a fetch: whole (`manifest`), or failed (nil).
    func finishFetch(_ id: SHA256Digest, _ manifest: Manifest?) {
        stopFetch(id)
        guard let manifest else {
            fetchesFailed += 1
            return
        }
        manifests[id] = manifest
        complete.insert(id)
        performJournal(journal.setHoldings(complete))
    }

    /// Forgets a fetch's requests, pieces and progress.
    private func stopFetch(_ id: SHA256Digest) {
        fetching.remove(id)
        manifestFetches[id] = nil
        for digest in manifests[id]?.chunks ?? [] {
            assembler.cancel(digest)
            requested[digest] = nil
        }
        localBitmaps[id] = nil
        lastProgress[id] = nil
        transfer.cancel(id)
    }

    /// When the journal and transfer side must be ticked next.
    var journalDeadline: MeshInstant? {
        var deadline = journal.nextDeadline
        func consider(_ instant: MeshInstant?) {
            if let instant { deadline = min(deadline, instant) }
        }
        for fetch in manifestFetches.values { consider(fetch.answerBy ?? fetch.deadline) }
        consider(transfer.nextDeadline)
        consider(assembler.nextDeadline)
        if !dirtyBitmaps.isEmpty { consider(nextBitmapAnnouncement) }
        // Only where `transferTick` would act on it: a deadline it leaves in the past spins the timer.
        for id in fetching where manifestFetches[id] == nil && !transfer.hasRequestsInFlight(id) {
            consider(lastProgress[id].map { $0 + configuration.unavailableTimeout })
        }
        return deadline
    }
}
