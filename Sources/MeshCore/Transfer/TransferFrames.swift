import MeshCrypto
import NIOCore

/// "Send me these pieces of this chunk": the whole chunk when `missing` is nil, else only the
/// pieces whose bits are set. The requester picks the piece size (it reassembles with it) and
/// the rate to send them at (its downlink's congestion controller sets it; 0: no pacing).
package struct ChunkWant: WireBody {
    /// The smallest piece size a holder serves: a want for 1-byte pieces would make it send a
    /// datagram per byte of the chunk (262,144 for one want). 256 bytes still fits datagrams
    /// far smaller than any path's.
    package static let minPieceSize = 256

    package var digest: SHA256Digest
    package var pieceSize: Int
    package var missing: ChunkBitmap?
    /// Bytes per second to pace this member's pieces at, in KiB/s on the wire; 0: as fast as
    /// the holder can.
    package var rate: Int

    package init(digest: SHA256Digest, pieceSize: Int, missing: ChunkBitmap? = nil, rate: Int = 0) {
        self.digest = digest
        self.pieceSize = pieceSize
        self.missing = missing
        self.rate = ChunkPace.representable(rate)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        digest = try buffer.readDigest("want digest")
        pieceSize = Int(try buffer.readWire(UInt16.self, "want piece size"))
        guard pieceSize > 0 else { throw .invalidField(what: "want piece size") }
        let count = Int(try buffer.readWire(UInt16.self, "want bitmap count"))
        if count == 0 {
            missing = nil
        } else {
            let bytes = try buffer.readWireBytes((count + 7) / 8, "want bitmap")
            guard let bitmap = ChunkBitmap(count: count, bytes: bytes) else { throw .invalidField(what: "want bitmap") }
            missing = bitmap
        }
        rate = Int(try buffer.readWire(UInt32.self, "want rate")) * 1024
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeBytes(digest.bytes)
        buffer.writeInteger(UInt16(pieceSize))
        buffer.writeInteger(UInt16(missing?.count ?? 0))
        if let missing { buffer.writeBytes(missing.bytes) }
        buffer.writeInteger(UInt32(rate / 1024))
    }
}

/// "From now on, send my pieces at this rate": the requester's controller changed its mind
/// while chunks are on their way (a want says it only once per chunk).
package struct ChunkPace: WireBody {
    /// Bytes per second (KiB/s on the wire); 0: as fast as the holder can.
    package var rate: Int

    package init(rate: Int) { self.rate = Self.representable(rate) }

    /// `rate` as the wire carries it: whole KiB/s, at least 1 KiB/s unless 0, at most 4 TiB/s.
    static func representable(_ rate: Int) -> Int {
        guard rate > 0 else { return 0 }
        return min(Int(UInt32.max), max(1, rate / 1024)) * 1024
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        rate = Int(try buffer.readWire(UInt32.self, "pace rate")) * 1024
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(rate / 1024))
    }
}

/// One piece of a chunk: `pieceSize` bytes at `index × pieceSize` (the last piece may be
/// shorter). The digest names the content, so pieces from different holders fill one chunk.
/// `sentAt` is the holder's clock in microseconds (wrapping): the requester compares it with
/// its own to see how long pieces wait in queues on the way (one-way delay, as LEDBAT does).
package struct ChunkPiece: WireBody {
    /// Chunks larger than this are never sent in pieces (the manifest allows up to 4 MiB).
    package static let maxChunkLength = Manifest.maxChunkSize
    /// The frame bytes around the payload: frame header 3, digest 32, length 4, size 2, index 2,
    /// timestamp 4.
    package static let overhead = FrameCodec.headerLength + 32 + 4 + 2 + 2 + 4

    package var digest: SHA256Digest
    package var chunkLength: Int
    package var pieceSize: Int
    package var index: Int
    package var sentAt: UInt32
    package var payload: ByteBuffer

    package init(
        digest: SHA256Digest, chunkLength: Int, pieceSize: Int, index: Int, sentAt: UInt32 = 0,
        payload: ByteBuffer
    ) {
        self.digest = digest
        self.chunkLength = chunkLength
        self.pieceSize = pieceSize
        self.index = index
        self.sentAt = sentAt
        self.payload = payload
    }

    package static func pieceCount(chunkLength: Int, pieceSize: Int) -> Int {
        pieceSize > 0 ? (chunkLength + pieceSize - 1) / pieceSize : 0
    }

    /// The byte range of piece `index` within the chunk.
    package static func range(of index: Int, chunkLength: Int, pieceSize: Int) -> Range<Int> {
        let start = index * pieceSize
        return start..<min(chunkLength, start + pieceSize)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        digest = try buffer.readDigest("piece digest")
        chunkLength = Int(try buffer.readWire(UInt32.self, "piece chunk length"))
        pieceSize = Int(try buffer.readWire(UInt16.self, "piece size"))
        index = Int(try buffer.readWire(UInt16.self, "piece index"))
        sentAt = try buffer.readWire(UInt32.self, "piece timestamp")
        guard chunkLength > 0, chunkLength <= Self.maxChunkLength, pieceSize > 0,
            Self.pieceCount(chunkLength: chunkLength, pieceSize: pieceSize) <= Int(UInt16.max),
            index < Self.pieceCount(chunkLength: chunkLength, pieceSize: pieceSize)
        else { throw .invalidField(what: "piece") }
        let expected = Self.range(of: index, chunkLength: chunkLength, pieceSize: pieceSize).count
        guard buffer.readableBytes == expected, let payload = buffer.readSlice(length: expected) else {
            throw .invalidField(what: "piece length")
        }
        self.payload = payload
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeBytes(digest.bytes)
        buffer.writeInteger(UInt32(chunkLength))
        buffer.writeInteger(UInt16(pieceSize))
        buffer.writeInteger(UInt16(index))
        buffer.writeInteger(sentAt)
        var payload = payload
        buffer.writeBuffer(&payload)
    }
}

/// "I will not send this chunk": not held (any more), busy now (ask again later or elsewhere), or
/// left to the members that hold it (a seed's answer: ask them).
package struct ChunkAbsent: WireBody {
    package enum Reason: UInt8, Sendable { case notHeld = 0, busy = 1, leftToOthers = 2 }
    package var digest: SHA256Digest
    package var reason: Reason

    package init(digest: SHA256Digest, reason: Reason) {
        self.digest = digest
        self.reason = reason
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        digest = try buffer.readDigest("absent digest")
        guard let reason = Reason(rawValue: try buffer.readWire(UInt8.self, "absent reason")) else {
            throw .invalidField(what: "absent reason")
        }
        self.reason = reason
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeBytes(digest.bytes)
        buffer.writeInteger(reason.rawValue)
    }
}

/// "Send no more of this chunk": the asker has it whole, or has given it up. The holder drops the
/// pieces it still has queued for the asker; those already sent are beyond recall.
package struct ChunkCancel: WireBody {
    package var digest: SHA256Digest

    package init(digest: SHA256Digest) { self.digest = digest }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        digest = try buffer.readDigest("cancel digest")
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeBytes(digest.bytes)
    }
}
