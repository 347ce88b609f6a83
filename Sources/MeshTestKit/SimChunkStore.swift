import MeshCore
import MeshCrypto

/// A simulated node's chunk store: chunks (and manifests, stored as chunks named by the
/// attachment id) in memory, by SHA-256, as `ChunkStore` keeps them on disk. Like the real one it
/// verifies every chunk when it is written and again when it is read, so a bad chunk is never
/// kept nor served; `corruptedChunks` is the invariant check that nothing slipped through.
package struct SimChunkStore: Sendable {
    package private(set) var chunks: [SHA256Digest: [UInt8]] = [:]
    /// Writes refused because the bytes did not hash to the name they came under.
    package private(set) var rejectedWrites = 0

    package init() {}

    package func contains(_ digest: SHA256Digest) -> Bool { chunks[digest] != nil }

    /// Forgets a chunk, as the real store does with one it finds damaged when it reads it.
    package mutating func discard(_ digest: SHA256Digest) { chunks[digest] = nil }

    /// Stores `bytes` under its SHA-256; with `expected`, only if that is its hash. True when stored.
    @discardableResult
    package mutating func write(_ bytes: [UInt8], expected: SHA256Digest? = nil) -> Bool {
        let digest = SHA256Digest.hashing(bytes)
        guard expected == nil || expected == digest else {
            rejectedWrites += 1
            return false
        }
        chunks[digest] = bytes
        return true
    }

    /// The chunk's bytes, verified again (nil when absent or no longer matching its name).
    package func read(_ digest: SHA256Digest) -> [UInt8]? {
        guard let bytes = chunks[digest], SHA256Digest.hashing(bytes) == digest else { return nil }
        return bytes
    }

    /// The chunk's bytes, verified again; one that no longer matches its name is discarded, as
    /// `ChunkStore` discards a chunk it finds damaged: it is no longer claimed, and is fetched again.
    package mutating func readDiscardingDamage(_ digest: SHA256Digest) -> [UInt8]? {
        guard let bytes = read(digest) else {
            chunks[digest] = nil
            return nil
        }
        return bytes
    }

    /// A byte of a stored chunk changes on the simulated disk (found when the chunk is next read).
    /// For tests of the store itself: `corruptedChunks` lists the chunk until then.
    package mutating func damage(_ digest: SHA256Digest) {
        guard var bytes = chunks[digest], !bytes.isEmpty else { return }
        bytes[bytes.count / 2] ^= 0x55
        chunks[digest] = bytes
    }

    /// The manifest of an attachment, if stored.
    package func manifest(_ id: SHA256Digest) -> Manifest? {
        guard let bytes = read(id), let manifest = try? Manifest(decoding: bytes), manifest.id == id else { return nil }
        return manifest
    }

    /// Chunks of `manifest` not held, each once.
    package func missing(_ manifest: Manifest) -> [SHA256Digest] {
        var seen: Set<SHA256Digest> = []
        return manifest.chunks.filter { chunks[$0] == nil && seen.insert($0).inserted }
    }

    /// Deletes the chunks of `removed` (and its manifest) that none of `kept` uses and no
    /// ingest holds.
    package mutating func collect(_ removed: Manifest, keeping kept: [Manifest]) {
        let used = Set(kept.flatMap(\.chunks) + kept.map(\.id))
        for digest in Set(removed.chunks + [removed.id]) where !used.contains(digest) && pinned[digest] == nil {
            chunks[digest] = nil
        }
    }

    /// Deletes every chunk and manifest none of `kept` uses and no ingest holds; how many, and
    /// their bytes.
    package mutating func collectUnreferenced(keeping kept: [Manifest]) -> (chunks: Int, bytes: UInt64) {
        let used = Set(kept.flatMap(\.chunks) + kept.map(\.id))
        var count = 0, bytes: UInt64 = 0
        for (digest, chunk) in chunks where !used.contains(digest) && pinned[digest] == nil {
            chunks[digest] = nil
            count += 1
            bytes += UInt64(chunk.count)
        }
        return (count, bytes)
    }

    /// Ingests held until their add is in the journal log (or failed), by chunk.
    private var pinned: [SHA256Digest: Int] = [:]

    /// Cuts `bytes` into chunks, stores them and the manifest, and holds them until `unpin`.
    package mutating func ingest(_ bytes: [UInt8], chunkSize: Int) -> Manifest {
        var digests: [SHA256Digest] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + chunkSize)
            let chunk = Array(bytes[offset..<end])
            write(chunk)
            digests.append(SHA256Digest.hashing(chunk))
            offset = end
        }
        let manifest = Manifest(size: UInt64(bytes.count), chunkSize: chunkSize, chunks: digests)
        write(manifest.encoded)
        for digest in manifest.chunks + [manifest.id] { pinned[digest, default: 0] += 1 }
        return manifest
    }

    /// A crash ends every hold.
    package mutating func releasePins() { pinned = [:] }

    /// Ends an ingest's hold; when its add failed, collects it in the same step.
    package mutating func unpin(_ manifest: Manifest, collectKeeping kept: [Manifest]?) {
        for digest in manifest.chunks + [manifest.id] {
            if let count = pinned[digest], count > 1 { pinned[digest] = count - 1 } else { pinned[digest] = nil }
        }
        if let kept { collect(manifest, keeping: kept) }
    }

    /// The attachment's bytes, every chunk verified; nil when one is missing.
    package func bytes(of manifest: Manifest) -> [UInt8]? {
        var out: [UInt8] = []
        for digest in manifest.chunks {
            guard let chunk = read(digest) else { return nil }
            out += chunk
        }
        return out
    }

    /// Chunks whose bytes do not hash to their name (must be none).
    package var corruptedChunks: [SHA256Digest] {
        chunks.filter { SHA256Digest.hashing($0.value) != $0.key }.map(\.key).sorted()
    }
}
