import MeshCrypto

/// The scrub of the chunks held whole (`ChunkScrub`): its timer, and what a damaged chunk does.
extension NodeInstance {
    var scrubDeadline: MeshInstant? {
        settings.scrub.every == nil || !phase.isActive ? nil : library.scrub.nextDeadline
    }

    mutating func scrubTick(now: MeshInstant) {
        guard phase.isActive else { return }
        let busy = !fetchTable.fetches.isEmpty || !serving.reads.isEmpty
        let library = self.library
        let next = self.library.scrub.due(
            now: now, settings: settings.scrub, busy: busy,
            held: {
                var seen = Set<SHA256Digest>()
                return library.complete.sorted().flatMap { id in
                    (library.manifestTable.byID[id]?.chunks ?? []).filter { seen.insert($0).inserted }
                }
            },
            stillHeld: { digest in
                // Where the table found it first, else (shared by attachments) any held whole.
                if let ref = library.manifestTable.locations[digest], library.complete.contains(ref.attachment) {
                    return true
                }
                return library.complete.contains { library.manifestTable.byID[$0]?.chunks.contains(digest) == true }
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
        default: intact = true  // a read that failed outright (the disk) says nothing of the chunk
        }
        library.scrub.read(intact: intact, now: now, settings: settings.scrub)
        guard !intact else { return }
        for id in library.complete.sorted() where manifests[id]?.chunks.contains(digest) == true {
            attachmentDamaged(id, detail: "chunk \(digest.hex.prefix(16)) did not verify (scrub)", now: now)
        }
    }
}
