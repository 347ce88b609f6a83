import MeshCrypto

/// How much of one chunk one member is sent per window. A member that lost pieces asks again
/// for just those, so a chunk goes to it a little over once; a member that asks for the same
/// chunk over and over is answered busy once it had `copies` chunks' worth in the window.
/// Without this a served chunk kept in memory turns each 100-byte want into 256 KiB of
/// datagrams. Memory is bounded by `capacity` (member, chunk) entries.
package struct ServeBudget: Sendable {
    package struct Key: Hashable, Sendable {
        package var peer: NodeID
        package var digest: SHA256Digest
        package init(peer: NodeID, digest: SHA256Digest) { self.peer = peer; self.digest = digest }
    }

    struct Spent: Sendable {
        var since: MeshInstant
        var bytes: Int
        var chunkLength: Int
    }

    package let window: Duration
    package let copies: Int
    package let capacity: Int
    private var spent: [Key: Spent] = [:]

    package init(window: Duration = .seconds(1), copies: Int = 2, capacity: Int = 4096) {
        self.window = window
        self.copies = copies
        self.capacity = capacity
    }

    /// Whether a want for the chunk may be served now.
    package func allows(_ key: Key, now: MeshInstant) -> Bool {
        guard let entry = spent[key] else { return true }
        return now >= entry.since + window || entry.bytes < copies * entry.chunkLength
    }

    /// Counts what was sent of a chunk of `chunkLength` bytes. A full table forgets the members
    /// served before the window, or else some entry: filling it takes `capacity` chunks in one
    /// window, far more than a node sends.
    package mutating func charge(_ bytes: Int, of chunkLength: Int, to key: Key, now: MeshInstant) {
        if let entry = spent[key], now < entry.since + window {
            spent[key]?.bytes = entry.bytes + bytes
            return
        }
        if spent[key] == nil, spent.count >= capacity {
            spent = spent.filter { now < $0.value.since + window }
            if spent.count >= capacity, let any = spent.keys.first { spent[any] = nil }
        }
        spent[key] = Spent(since: now, bytes: bytes, chunkLength: chunkLength)
    }

    package var count: Int { spent.count }
}
