import MeshCrypto

/// The journal in the node. Durable before visible: a local add or remove is signed, appended
/// to the journal log, and only once the append succeeded applied and sent to the members, so
/// what `attach` or `remove` acknowledges survives a crash right after, and one whose append
/// failed changed nothing, here or anywhere. Operations of others are applied at once and
/// appended after; an append of theirs that fails is tried again until it holds.
extension NodeInstance {
    // MARK: adding and removing

    mutating func beginAdd(_ source: AttachmentSource, metadata: [UInt8], request: RequestID) {
        guard metadata.count <= JournalOperation.maxMetadataBytes else {
            return complete(
                request, .failure(.metadataTooLarge(size: metadata.count, limit: JournalOperation.maxMetadataBytes)))
        }
        if case let .bytes(bytes) = source, UInt64(bytes.count) > settings.maxAttachmentSize {
            return complete(
                request, .failure(.store(.tooLarge(size: UInt64(bytes.count), limit: settings.maxAttachmentSize))))
        }
        store(
            .ingest(source, chunkSize: settings.chunkSize, limit: settings.maxAttachmentSize),
            .ingest(request, metadata: metadata))
    }

    /// The chunks are stored and held: record the add in the log.
    mutating func ingested(_ result: Result<StorageOutcome, StorageFailure>, metadata: [UInt8], request: RequestID) {
        guard case let .success(.ingested(manifest)) = result else {
            return complete(request, .failure(.store(result.failure ?? .failed("the store did not ingest"))))
        }
        guard phase != .stopped else {
            releaseFailedAdd(manifest)
            return complete(request, .failure(.stopped))
        }
        let operation = journal.prepareAdd(
            AttachmentID.random(using: &random), content: manifest.id, size: manifest.size,
            chunkCount: manifest.chunks.count, metadata: metadata)
        store(.appendJournal([operation]), .appendLocal(request, operation, .add(manifest)))
    }

    mutating func beginRemove(_ id: AttachmentID, request: RequestID) {
        guard let operation = journal.prepareRemove(id) else {
            return complete(request, .failure(.unknownAttachmentID(id)))
        }
        store(.appendJournal([operation]), .appendLocal(request, operation, .remove))
    }

    /// A local operation is in the log (or not): publish it, or take back what it stored.
    mutating func localAppended(
        _ result: Result<StorageOutcome, StorageFailure>, operation: JournalOperation,
        change: LocalChange, request: RequestID, now: MeshInstant
    ) {
        if case let .failure(failure) = result {
            if case let .add(manifest) = change { releaseFailedAdd(manifest) }
            return complete(request, .failure(.store(failure)))
        }
        if case let .add(manifest) = change {
            library.manifestTable.insert(manifest)
            library.complete.insert(manifest.id)
            // Another member's add of the same bytes may be fetching: it is whole now.
            if fetchTable.fetches[manifest.id] != nil { finishFetch(manifest.id, .success(manifest), now: now) }
        }
        let published = journal.publish(operation)
        apply(published, local: true, now: now)
        announceHoldings(now: now)
        switch change {
        case let .add(manifest):
            store(.unpin(manifest, collectKeeping: nil), .housekeeping)
            if let entry = journal.state.entry(operation.attachmentID) {
                complete(request, .success(.added(entry)))
            } else {
                // Cannot be removed before anyone saw its id; kept for safety.
                complete(request, .failure(.unknownAttachmentID(operation.attachmentID)))
            }
        case .remove:
            complete(request, .success(.removed(operation.attachmentID)))
        }
    }

    /// An add that is not in the log gives back its ingest: the chunks no present attachment
    /// uses go again (a full disk gets its space back). When the same content is in the journal
    /// anyway (another member's add), they stay, and the node now knows the manifest they are
    /// stored under, so that the remove that comes one day collects them.
    private mutating func releaseFailedAdd(_ manifest: Manifest) {
        let id = manifest.id
        guard !library.complete.contains(id), !journal.state.hasContent(id) else {
            if manifests[id] == nil { library.manifestTable.insert(manifest) }
            return store(.unpin(manifest, collectKeeping: nil), .housekeeping)
        }
        store(
            .unpin(manifest, collectKeeping: journal.state.presentContents.compactMap { manifests[$0] }), .housekeeping)
    }

    // MARK: journal messages

    package mutating func sendJournal(_ message: JournalMessage, to peer: NodeID, now: MeshInstant) {
        guard
            let (_, directives) = try? delivery.send(
                message.encoded, to: [peer], mode: .reliable, stream: .journal,
                now: now, timeout: settings.journalSendTimeout)
        else { return }
        if case let .chunk(_, bytes) = message {
            counters.chunksServed += 1
            counters.chunkPayloadBytesSent += UInt64(bytes.count)
        }
        apply(directives, now: now)
    }

    /// A journal message from `peer`: complete, in order, and authenticated by the reliable channel.
    mutating func receiveJournal(_ bytes: [UInt8], from peer: NodeID, now: MeshInstant) {
        guard let message = try? JournalMessage(decoding: bytes) else {
            counters.messagesMalformed += 1
            return log(.debug, "malformed journal message", ["from": "\(peer)"])
        }
        switch message {
        case let .chunkRequest(digest):
            // Served only after verification: the store hashes every chunk it reads.
            store(.readChunk(digest), .serveManifest(digest, to: peer))
        case let .chunk(digest, bytes):
            manifestAnswer(digest, bytes: bytes, from: peer, now: now)
        case let .noChunk(digest):
            manifestAnswer(digest, bytes: nil, from: peer, now: now)
        case let .chunks(attachment, bitmap):
            serving.seeding.onAnnounced(bitmap, of: attachment, at: peer)
            receiveAvailability(bitmap, of: attachment, from: peer, now: now)
        case let .replicate(ids):
            replicateRequested(ids, now: now)
        case let .end(statement):
            receiveEnd(statement, from: peer, now: now)
        default:
            let answers = journal.onMessage(message, from: peer)
            apply(answers, now: now)
        }
    }

    mutating func manifestReadForServing(
        _ result: Result<StorageOutcome, StorageFailure>, digest: SHA256Digest,
        to peer: NodeID, now: MeshInstant
    ) {
        guard phase.isActive else { return }
        if case let .success(.read(bytes?)) = result {
            sendJournal(.chunk(digest, Array(bytes.readableBytesView)), to: peer, now: now)
        } else {
            sendJournal(.noChunk(digest), to: peer, now: now)
        }
    }

    /// `local`: the operations were appended before they were applied (`localAppended`).
    mutating func apply(_ directives: [JournalInstance.Directive], local: Bool = false, now: MeshInstant) {
        for directive in directives {
            switch directive {
            case let .send(peer, message):
                sendJournal(message, to: peer, now: now)
            case let .applied(operations):
                if !local { store(.appendJournal(operations), .appendRemote(operations)) }
                journalChanged(operations, now: now)
            case .holdersChanged:
                holdersChanged(now: now)
            }
        }
    }

    mutating func remoteAppended(
        _ result: Result<StorageOutcome, StorageFailure>, operations: [JournalOperation],
        now: MeshInstant
    ) {
        guard case let .failure(failure) = result else { return }
        // Applied but not on disk: a restart would have to learn them again from the members.
        // Appended again later, so the log catches up once the disk takes it.
        library.backlog += operations
        if library.backlogRetryAt == nil { library.backlogRetryAt = now + settings.journalLogRetryInterval }
        log(.warning, "cannot append to the journal log", ["error": "\(failure)", "operations": "\(operations.count)"])
    }

    mutating func retryJournalBacklog(now: MeshInstant) {
        guard let due = library.backlogRetryAt, now >= due else { return }
        library.backlogRetryAt = nil
        let operations = library.backlog
        library.backlog = []
        if !operations.isEmpty { store(.appendJournal(operations), .appendRemote(operations)) }
    }

    /// After new operations: tell subscribers, drop what was removed, fetch what was added.
    private mutating func journalChanged(_ operations: [JournalOperation], now: MeshInstant) {
        emit(.attachmentsChanged)
        // A content goes once no present attachment has it (the same bytes added twice stay
        // while either attachment does).
        for operation in operations where operation.kind == .remove && !journal.state.hasContent(operation.attachment) {
            let id = operation.attachment
            // Collected after whatever the store was already asked to write for it (requests run
            // in order), the manifest of a fetch too.
            let removed = manifests[id] ?? fetchTable.fetches[id]?.manifestBeingStored
            // A fetch under way stops: chunks it brought after this would never be collected.
            if fetchTable.fetches[id] != nil { finishFetch(id, .failure(.unknownAttachment(id)), now: now) }
            for waiter in fetchTable.loadWaiters.removeValue(forKey: id) ?? [] {
                failLoad(waiter, .unknownAttachment(id))
            }
            library.complete.remove(id)
            fetchTable.retries[id] = nil
            clearDamagedManifest(id)
            serving.recentChunks.removeAll()
            library.manifestTable.remove(id)
            if let removed {
                let kept = journal.state.presentContents.compactMap { manifests[$0] }
                store(.collect(removed, keeping: kept), .housekeeping)
            }
        }
        announceHoldings(now: now)
        replicate(now: now)
    }

    // MARK: what the journal holds

    /// The attachment set, as every member converges to it.
    package var attachments: [AttachmentEntry] { journal.state.attachments }

    /// An attachment named by its id or its content's hash, or a unique prefix of either (4
    /// characters at least). A content hash names an attachment only while one attachment has it.
    package func resolveAttachment(_ text: String) -> Result<AttachmentEntry, AttachmentLookupError> {
        AttachmentLookupError.find(text, in: attachments, id: \.id.hex, content: \.content.hex)
    }

    /// Live members (this node included) known to hold the attachment whole.
    package func holders(of id: SHA256Digest) -> [NodeID] {
        let live = Set(activeMemberIDs + [localID])
        return journal.holders(of: id).filter(live.contains)
    }

    /// The bytes of the chunks held here (the whole size when complete; nil before the manifest
    /// is known, when the chunk size is not).
    package func bytesHeld(of entry: AttachmentEntry) -> UInt64? {
        if library.complete.contains(entry.content) { return entry.size }
        guard let manifest = manifests[entry.content] ?? fetchTable.fetches[entry.content]?.manifestBeingStored else {
            return nil
        }
        return min(entry.size, UInt64(chunksHeld(of: entry)) * UInt64(manifest.chunkSize))
    }

    /// Chunks of an attachment held here: all when whole, what a fetch has so far, else what the
    /// last look at the store found.

    package func chunksHeld(of entry: AttachmentEntry) -> Int {
        if library.complete.contains(entry.content) { return entry.chunkCount }
        return fetchTable.fetches[entry.content]?.held ?? library.knownHeld[entry.content] ?? 0
    }
}

package enum AttachmentLookupError: Error, Sendable, Equatable {
    case unknown(String)
    case ambiguous(String)
    /// Under 4 characters: too short to name an attachment.
    case tooShort(String)

    /// The entry `text` names, as every command names an attachment: its id or content hash
    /// (hex), or a prefix of either of 4 characters or more. Shared with the CLI, which names an
    /// attachment from the node's list before it asks for it.
    package static func find<Entry>(
        _ text: String, in entries: [Entry], id: (Entry) -> String, content: (Entry) -> String
    ) -> Result<Entry, AttachmentLookupError> {
        let lowered = text.lowercased()
        if let exact = entries.first(where: { id($0) == lowered }) { return .success(exact) }
        let sameContent = entries.filter { content($0) == lowered }
        if sameContent.count == 1 { return .success(sameContent[0]) }
        if sameContent.count > 1 { return .failure(.ambiguous(text)) }
        guard lowered.count >= 4 else { return .failure(.tooShort(text)) }
        let matches = entries.filter { id($0).hasPrefix(lowered) || content($0).hasPrefix(lowered) }
        if matches.count > 1 { return .failure(.ambiguous(text)) }
        return matches.first.map { .success($0) } ?? .failure(.unknown(text))
    }
}

extension Result {
    var failure: Failure? {
        if case let .failure(failure) = self { return failure }
        return nil
    }
}

extension NodeInstance {
    /// Tells every member which attachments this node now holds whole (when that changed).
    mutating func announceHoldings(now: MeshInstant) {
        let holdings = journal.setHoldings(library.complete)
        apply(holdings, now: now)
    }
}
