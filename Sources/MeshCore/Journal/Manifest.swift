import MeshCrypto
import NIOCore

/// What an attachment is made of: its size, its chunk size and the SHA-256 of each chunk, in
/// order. The attachment's id is the SHA-256 of this canonical encoding, so the same bytes are
/// the same attachment whoever adds them (metadata is not part of it).
///
/// `"groupmesh manifest v1" | size (8) | chunk size (4) | count (4) | count × SHA-256 (32)`
package struct Manifest: Sendable, Equatable {
    static let domain = Array("groupmesh manifest v1".utf8)
    package static let defaultChunkSize = 256 * 1024
    package static let maxChunkSize = 4 * 1024 * 1024
    /// More chunks than any attachment within the size limits needs (1 TiB of 256 KiB chunks).
    package static let maxChunks: UInt64 = 1 << 22

    package var size: UInt64
    package var chunkSize: Int
    package var chunks: [SHA256Digest]

    package init(size: UInt64, chunkSize: Int, chunks: [SHA256Digest]) {
        self.size = size
        self.chunkSize = chunkSize
        self.chunks = chunks
    }

    package var encoded: [UInt8] {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(Self.domain.count + 16 + 32 * chunks.count)
        buffer.writeBytes(Self.domain)
        buffer.writeInteger(size)
        buffer.writeInteger(UInt32(chunkSize))
        buffer.writeInteger(UInt32(chunks.count))
        for chunk in chunks { buffer.writeBytes(chunk.bytes) }
        return Array(buffer.readableBytesView)
    }

    /// The attachment id.
    package var id: SHA256Digest { SHA256Digest.hashing(encoded) }

    /// Decodes and checks a manifest: the count must match the size and chunk size.
    package init(decoding bytes: [UInt8]) throws(WireError) {
        var buffer = ByteBuffer(bytes: bytes)
        guard try buffer.readWireBytes(Self.domain.count, "manifest domain") == Self.domain else {
            throw .invalidField(what: "manifest domain")
        }
        size = try buffer.readWire(UInt64.self, "manifest size")
        chunkSize = Int(try buffer.readWire(UInt32.self, "manifest chunk size"))
        let count = Int(try buffer.readWire(UInt32.self, "manifest chunk count"))
        guard chunkSize > 0, chunkSize <= Self.maxChunkSize else { throw .invalidField(what: "manifest chunk size") }
        guard UInt64(count) == Self.chunkCount(size: size, chunkSize: chunkSize) else {
            throw .invalidField(what: "manifest chunk count")
        }
        guard buffer.readableBytes >= count * 32 else { throw .truncated(what: "chunk hashes") }
        guard buffer.readableBytes == count * 32 else { throw .trailingBytes(buffer.readableBytes - count * 32) }
        var chunks: [SHA256Digest] = []
        chunks.reserveCapacity(count)
        for _ in 0..<count {
            chunks.append(try buffer.readDigest("chunk hash"))
        }
        self.chunks = chunks
    }

    package static func chunkCount(size: UInt64, chunkSize: Int) -> UInt64 {
        // Not (size + chunkSize - 1) / chunkSize: that overflows for a size near 2^64 (from a peer).
        size == 0 ? 0 : (size - 1) / UInt64(chunkSize) + 1
    }

    /// The length of chunk `index`.
    package func length(ofChunk index: Int) -> Int {
        let start = UInt64(index) * UInt64(chunkSize)
        return Int(min(UInt64(chunkSize), size - start))
    }
}
