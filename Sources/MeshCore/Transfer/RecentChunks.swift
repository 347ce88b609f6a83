import MeshCrypto
import NIOCore

/// The last chunks this node served, verified and ready to cut into pieces. A member that lost
/// pieces asks again for just those, moments after the burst: without this, each such re-ask
/// read and hashed the whole 256 KiB chunk again to send a dozen pieces (under 5% loss, about
/// 1.5 re-asks per chunk). Oldest out first; bounded by `capacity` chunks.
package struct RecentChunks: Sendable {
    package let capacity: Int
    private var chunks: [SHA256Digest: ByteBuffer] = [:]
    private var order: [SHA256Digest] = []

    package init(capacity: Int) { self.capacity = capacity }

    package subscript(digest: SHA256Digest) -> ByteBuffer? { chunks[digest] }

    package mutating func insert(_ chunk: ByteBuffer, for digest: SHA256Digest) {
        guard capacity > 0, chunks.updateValue(chunk, forKey: digest) == nil else { return }
        order.append(digest)
        if order.count > capacity { chunks[order.removeFirst()] = nil }
    }

    /// An attachment was removed: what it held must not be served from here either.
    package mutating func removeAll() {
        chunks.removeAll()
        order.removeAll()
    }
}
