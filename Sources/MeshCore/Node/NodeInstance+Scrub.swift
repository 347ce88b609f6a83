import MeshCrypto

/// The scrub of the chunks held whole (`ChunkScrub`): its timer, and what a damaged chunk or
/// manifest does.
extension NodeInstance {
    var scrubDeadline: MeshInstant? {
        settings.scrub.every == nil || !phase.isActive ? nil : library.scrub.nextDeadline
    }

    mutating func scrubTick(now: MeshInstant) {
        guard phase.isActive, let deadline = scrubDeadline, now >= deadline else { return }
        let busy = !fetchTable.fetches.isEmpty || !serving.reads.isEmpty
        let complete = library.complete
        let table = library.manifestTable
        let next = library.scrub.due(
            now: now, settings: settings.scrub, busy: busy,
            // Each attachment's manifest (a chunk named by its id) first, then its chunks: a
            // damaged manifest costs the attachment at the next start, whole chunks and all.
            held: {
                var seen = Set<SHA256Digest>()
                return complete.sorted().flatMap { id in
                    ([id] + (table.byID[id]?.chunks ?? [])).filter { seen.insert($0).inserted }
                }
            },
            // By the table's own place for the chunk: a chunk that two attachments share and
            // whose first is no longer held whole is passed over this time.
            stillHeld: { digest in
                complete.contains(digest) || table.locations[digest].map { complete.contains($0.attachment) } ?? false
            })
        if let next { store(.verifyChunk(next), .scrubChunk(next)) }
    }

    /// A scrub's read came back: a chunk that did not verify was discarded by the store, and
    /// every attachment held whole that has it is fetched again (as when a member's want finds it).
    mutating func chunkScrubbed(
        _ result: Result<StorageOutcome, StorageFailure>, digest: SHA256Digest, now: MeshInstant
    ) {
        let intact: Bool
        switch result {
        case .success(.read(.some)): intact = true
        case .success(.read(nil)): intact = false
        default: intact = true  // the disk failed the read: it says nothing of the chunk
        }
        library.scrub.read(intact: intact, now: now, settings: settings.scrub)
        guard !intact, phase.isActive else { return }
        if library.complete.contains(digest), let manifest = manifests[digest] { rewriteManifest(manifest) }
        for id in library.complete.sorted() where manifests[id]?.chunks.contains(digest) == true {
            attachmentDamaged(id, detail: "chunk \(digest.hex.prefix(16)) did not verify (scrub)", now: now)
        }
    }
}
