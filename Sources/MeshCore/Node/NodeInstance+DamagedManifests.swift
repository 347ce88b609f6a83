import MeshCrypto

/// Manifests damaged on disk. A manifest names its attachment's chunks: without it a start would
/// take them for unused and delete them, and a lazy node would never fetch it again. So an
/// attachment whose manifest was found damaged stays in the data dir's record (written through
/// the store, in order with everything else) until the manifest is stored again and synced, or
/// the attachment is removed; no start deletes unused chunks meanwhile.
extension NodeInstance {
    /// Writes the record when it changed (an unknown one is written over once there is news).
    mutating func saveDamagedManifests() {
        guard library.damagedManifests != library.damagedManifestsSaved else { return }
        library.damagedManifestsSaved = library.damagedManifests
        store(.saveDamagedManifests(library.damagedManifests.sorted()), .saveDamagedManifests)
    }

    /// Its manifest is stored again (and synced), or the attachment is gone.
    mutating func clearDamagedManifest(_ id: SHA256Digest) {
        guard library.damagedManifests.remove(id) != nil else { return }
        saveDamagedManifests()
    }

    /// Fetches the damaged manifests not being fetched whose retry is due. A lazy node fetches
    /// only the manifest: it held those attachments, whole or in part, and what it had is
    /// still here; it need not fetch the rest.
    mutating func refetchDamagedManifests(now: MeshInstant) {
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
    /// same bytes: it is named by their hash) and synced.
    mutating func rewriteManifest(_ manifest: Manifest) {
        log(
            .warning, "attachment's manifest damaged on disk: writing it again",
            ["attachment": String(manifest.id.hex.prefix(16))])
        library.damagedManifests.insert(manifest.id)
        saveDamagedManifests()
        store(.writeChunk(manifest.encoded, expected: manifest.id), .rewriteManifest(manifest.id, synced: false))
    }

    mutating func manifestRewritten(_ result: Result<StorageOutcome, StorageFailure>, id: SHA256Digest, synced: Bool) {
        switch result {
        case .success(.written(stored: true)) where !synced:
            store(.flush, .rewriteManifest(id, synced: true))
        case .success(.done) where synced:
            clearDamagedManifest(id)
        case let .failure(failure):
            // Still recorded: the next start deletes none of its chunks and fetches it.
            log(
                .error, "attachment's manifest could not be written again",
                ["attachment": String(id.hex.prefix(16)), "error": "\(failure)"])
        case .success:
            log(.error, "attachment's manifest could not be written again", ["attachment": String(id.hex.prefix(16))])
        }
    }
}
