import MeshCrypto
import NIOCore

/// What members say to each other about the journal and its chunks. These travel in the journal's
/// own stream of each member's reliable channel (`DeliveryStream.journal`, frame type
/// `journalData`), so they may be large and arrive once, in order, from an authenticated member,
/// and no application message can pass for one.
package enum JournalMessage: Sendable, Equatable {
    /// Operations the receiver may lack.
    case operations([JournalOperation])
    /// Every operation id the sender has: the receiver answers with what the sender lacks
    /// (`operations`) and asks for what it lacks itself (`want`).
    case have([OperationID])
    case want([OperationID])
    /// The attachments the sender holds whole.
    case holding([SHA256Digest])
    /// "Send me this manifest" (chunks travel in pieces: `ChunkWant`).
    case chunkRequest(SHA256Digest)
    case chunk(SHA256Digest, [UInt8])
    /// "I do not have it."
    case noChunk(SHA256Digest)
    /// Which chunks of an attachment the sender holds (sent as they arrive, for the swarm).
    case chunks(SHA256Digest, ChunkBitmap)
    /// "I am leaving and I alone hold these whole: fetch them" (a lazy member too).
    case replicate([SHA256Digest])
    /// The session is over (passed on by every member that takes it).
    case end(SessionEnd)

    /// Operations per message, so one message stays well under the messenger's size limit.
    package static let operationBudget = 192 * 1024

    private enum Kind: UInt8 {
        // 9 was `busy`, now `ChunkAbsent` of the transfer frames.
        case operations = 1, have, want, holding, chunkRequest, chunk, noChunk, chunks
        case replicate = 10, end
    }

    package var encoded: [UInt8] {
        var buffer = ByteBuffer()
        switch self {
        case let .operations(operations):
            buffer.writeInteger(Kind.operations.rawValue)
            buffer.writeInteger(UInt32(operations.count))
            for operation in operations {
                var body = ByteBuffer()
                operation.encode(into: &body)
                buffer.writeInteger(UInt32(body.readableBytes))
                buffer.writeBuffer(&body)
            }
        case let .have(ids), let .want(ids):
            if case .have = self {
                buffer.writeInteger(Kind.have.rawValue)
            } else {
                buffer.writeInteger(Kind.want.rawValue)
            }
            buffer.writeInteger(UInt32(ids.count))
            for id in ids { id.encode(into: &buffer) }
        case let .holding(digests), let .replicate(digests):
            if case .holding = self {
                buffer.writeInteger(Kind.holding.rawValue)
            } else {
                buffer.writeInteger(Kind.replicate.rawValue)
            }
            buffer.writeInteger(UInt32(digests.count))
            for digest in digests { buffer.writeBytes(digest.bytes) }
        case let .chunkRequest(digest):
            buffer.writeInteger(Kind.chunkRequest.rawValue)
            buffer.writeBytes(digest.bytes)
        case let .noChunk(digest):
            buffer.writeInteger(Kind.noChunk.rawValue)
            buffer.writeBytes(digest.bytes)
        case let .chunk(digest, bytes):
            buffer.writeInteger(Kind.chunk.rawValue)
            buffer.writeBytes(digest.bytes)
            buffer.writeBytes(bytes)
        case let .end(statement):
            buffer.writeInteger(Kind.end.rawValue)
            statement.encode(into: &buffer)
        case let .chunks(digest, bitmap):
            buffer.writeInteger(Kind.chunks.rawValue)
            buffer.writeBytes(digest.bytes)
            buffer.writeInteger(UInt32(bitmap.count))
            buffer.writeBytes(bitmap.bytes)
        }
        return Array(buffer.readableBytesView)
    }

    package init(decoding bytes: [UInt8]) throws(WireError) {
        var buffer = ByteBuffer(bytes: bytes)
        let byte = try buffer.readWire(UInt8.self, "journal message kind")
        guard let kind = Kind(rawValue: byte) else { throw .invalidField(what: "journal message kind") }
        func digest() throws(WireError) -> SHA256Digest { try buffer.readDigest("digest") }
        func count(_ unit: Int) throws(WireError) -> Int {
            let count = Int(try buffer.readWire(UInt32.self, "count"))
            guard count * unit <= buffer.readableBytes else { throw .truncated(what: "list") }
            return count
        }
        switch kind {
        case .operations:
            let n = try count(4)
            var operations: [JournalOperation] = []
            for _ in 0..<n {
                let length = Int(try buffer.readWire(UInt32.self, "operation length"))
                guard var body = buffer.readSlice(length: length) else { throw .truncated(what: "operation") }
                operations.append(try JournalOperation(decoding: &body))
                guard body.readableBytes == 0 else { throw .trailingBytes(body.readableBytes) }
            }
            self = .operations(operations)
        case .have, .want:
            let n = try count(16)
            var ids: [OperationID] = []
            for _ in 0..<n { ids.append(try OperationID(decoding: &buffer)) }
            self = kind == .have ? .have(ids) : .want(ids)
        case .holding, .replicate:
            let n = try count(32)
            var digests: [SHA256Digest] = []
            for _ in 0..<n { digests.append(try digest()) }
            self = kind == .holding ? .holding(digests) : .replicate(digests)
        case .end:
            self = .end(try SessionEnd(decoding: &buffer))
        case .chunkRequest:
            self = .chunkRequest(try digest())
        case .noChunk:
            self = .noChunk(try digest())
        case .chunk:
            let id = try digest()
            self = .chunk(id, Array(buffer.readableBytesView))
            buffer.moveReaderIndex(to: buffer.writerIndex)
        case .chunks:
            let id = try digest()
            let count = Int(try buffer.readWire(UInt32.self, "bitmap count"))
            guard count <= Int(Manifest.maxChunks) else { throw .invalidField(what: "bitmap count") }
            guard let bitmap = ChunkBitmap(count: count, bytes: try buffer.readWireBytes((count + 7) / 8, "bitmap"))
            else {
                throw .invalidField(what: "bitmap")
            }
            self = .chunks(id, bitmap)
        }
        guard buffer.readableBytes == 0 else { throw .trailingBytes(buffer.readableBytes) }
    }
}
