import MeshCrypto

/// The manifests of the attachments this node knows, with an index of where each chunk sits in
/// them. One value owns both so that the index follows every insert and removal, also when the
/// node starts from its data dir: the seeding rule looks a wanted chunk up by its digest alone.
package struct ManifestTable: Sendable {
    package private(set) var byID: [SHA256Digest: Manifest] = [:]
    /// One place per chunk (one is enough): the first manifest that held it.
    private(set) var locations: [SHA256Digest: ChunkRef] = [:]

    init() {}

    /// The table of `manifests` (the first of two with one id counts).
    init(_ manifests: some Sequence<Manifest>) {
        for manifest in manifests { insert(manifest) }
    }

    package subscript(id: SHA256Digest) -> Manifest? { byID[id] }

    mutating func insert(_ manifest: Manifest) {
        // An id names the manifest's bytes: one already here is this one.
        let id = manifest.id
        guard byID[id] == nil else { return }
        byID[id] = manifest
        index(manifest, id: id)
    }

    mutating func remove(_ id: SHA256Digest) {
        // Another manifest may hold some of its chunks too: the index is built again.
        guard byID.removeValue(forKey: id) != nil else { return }
        reindex()
    }

    func location(of chunk: SHA256Digest) -> ChunkRef? { locations[chunk] }

    /// `id` is the manifest's, hashed once by the caller: `Manifest.id` hashes the whole
    /// manifest on every read.
    private mutating func index(_ manifest: Manifest, id: SHA256Digest) {
        for (index, digest) in manifest.chunks.enumerated() where locations[digest] == nil {
            locations[digest] = ChunkRef(attachment: id, index: index)
        }
    }

    private mutating func reindex() {
        locations = [:]
        for id in byID.keys.sorted() {
            if let manifest = byID[id] { index(manifest, id: id) }
        }
    }
}
