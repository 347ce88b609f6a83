import MeshCrypto

/// Manifests damaged on disk. A manifest names its attachment's chunks: without it a start would
/// take them for unused and delete them, and a lazy node would never fetch it again. So an
/// attachment whose manifest was found damaged stays in the data dir's record (written through
/// the store, in order with everything else) until the manifest is stored again and synced, or
/// the attachment is removed; no start deletes unused chunks meanwhile.
extension NodeInstance {
    /// Writes the record when it changed, or when the last write failed (the next call tries
    /// again: `replicate` calls this).
    mutating func saveDamagedManifests() {
        guard library.damagedManifests != library.damagedManifestsSaved else { return }
        library.damagedManifestsSaved = library.damagedManifests
        store(.saveDamagedManifests(library.damagedManifests.sorted()), .saveDamagedManifests)
    }

    mutating func damagedManifestsSaved(_ result: Result<StorageOutcome, StorageFailure>) {
        guard case let .failure(failure) = result else { return }
        library.damagedManifestsSaved = nil
        log(.error, "cannot record the damaged manifests", ["error": "\(failure)"])
    }

    /// The attachment is gone: nothing of it is to be kept.
    mutating func clearDamagedManifest(_ id: SHA256Digest) {
        guard library.damagedManifests.remove(id) != nil else { return }
        saveDamagedManifests()
    }

    /// Fetches the damaged manifests not being fetched whose retry is due (a node that is not
    /// lazy not while replication is paused for a full disk). A lazy node fetches only the
    /// manifest: it held those attachments, whole or in part, and what it had is still here.
    mutating func refetchDamagedManifests(now: MeshInstant) {
        saveDamagedManifests()
        guard settings.lazy || !isReplicationPaused(now: now) else { return }
        for id in library.damagedManifests.sorted()
        where fetchTable.fetches[id] == nil && manifests[id] == nil
            && fetchTable.retries[id].map({ now >= $0.at }) != false
        {
            startFetch(id, forReplication: !settings.lazy, now: now)
            if settings.lazy { fetchTable.fetches[id]?.manifestOnly = true }
        }
    }

    /// The scrub found a manifest damaged and the store discarded it: recorded first, so that a
    /// crash before it is back deletes none of its chunks, then written again from memory (the
    /// same bytes: it is named by their hash).
    mutating func rewriteManifest(_ manifest: Manifest) {
        log(
            .warning, "attachment's manifest damaged on disk: writing it again",
            ["attachment": String(manifest.id.hex.prefix(16))])
        library.damagedManifests.insert(manifest.id)
        saveDamagedManifests()
        persistManifest(manifest)
    }

    /// A manifest recorded damaged is in hand (fetched again, or in memory): written (nothing is
    /// written if it is stored) and synced in two requests that follow each other, so that no
    /// failed sync of other chunks between them can drop it unnoticed; then the record lets go.
    mutating func persistManifest(_ manifest: Manifest) {
        guard library.damagedManifests.contains(manifest.id) else { return }
        library.manifestsBeingWritten.insert(manifest.id)
        store(.writeChunk(manifest.encoded, expected: manifest.id), .rewriteManifest(manifest.id, synced: false))
        store(.flush, .rewriteManifest(manifest.id, synced: true))
    }

    mutating func manifestRewritten(_ result: Result<StorageOutcome, StorageFailure>, id: SHA256Digest, synced: Bool) {
        let written = library.manifestsBeingWritten.contains(id)
        switch result {
        case .success(.written(stored: true)) where !synced: return
        case .success(.done) where synced && written:
            library.manifestsBeingWritten.remove(id)
            return clearDamagedManifest(id)
        case .success(.done) where synced:
            return  // the write failed: said then
        default: break
        }
        library.manifestsBeingWritten.remove(id)
        // Still recorded: the next start deletes none of its chunks and fetches it.
        guard written else { return }
        let error = result.failure.map { "\($0)" } ?? "the store did not keep it"
        log(
            .error, "attachment's manifest could not be written again",
            ["attachment": String(id.hex.prefix(16)), "error": error])
    }
}
