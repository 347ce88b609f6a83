import MeshCrypto
import NIOCore

/// One chunk being put together from its pieces, in any order, from any holder. It only knows
/// where bytes go; whether they are the right bytes is for the SHA-256 check once it is whole.
package struct ChunkAssembly: Sendable {
    package let digest: SHA256Digest
    package let length: Int
    package let pieceSize: Int
    package private(set) var received: ChunkBitmap
    private var bytes: [UInt8]

    package init(digest: SHA256Digest, length: Int, pieceSize: Int) {
        self.digest = digest
        self.length = length
        self.pieceSize = pieceSize
        received = ChunkBitmap(count: ChunkPiece.pieceCount(chunkLength: length, pieceSize: pieceSize))
        // Not zeroed first: every byte is a piece's before `contents` is read (once complete), and
        // zeroing a fresh chunk-sized buffer per chunk was a pass over every byte fetched.
        bytes = [UInt8](unsafeUninitializedCapacity: length) { _, initialized in initialized = length }
    }

    package var isComplete: Bool { received.isComplete }

    /// The pieces not yet here.
    package var missing: ChunkBitmap {
        var missing = ChunkBitmap(count: received.count)
        for index in 0..<received.count where !received.contains(index) { missing.insert(index) }
        return missing
    }

    /// Places a piece. False for a duplicate, or a piece of another shape than this chunk's
    /// (the piece codec already checked that its payload fits its index).
    @discardableResult
    package mutating func add(_ piece: ChunkPiece) -> Bool {
        guard piece.digest == digest, piece.chunkLength == length, piece.pieceSize == pieceSize,
            !received.contains(piece.index), piece.index < received.count
        else { return false }
        let range = ChunkPiece.range(of: piece.index, chunkLength: length, pieceSize: pieceSize)
        guard piece.payload.readableBytes == range.count else { return false }
        bytes.withUnsafeMutableBytes { destination in
            piece.payload.withUnsafeReadableBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: destination[range]).copyMemory(from: source)
            }
        }
        received.insert(piece.index)
        return true
    }

    /// The whole chunk (call once complete: until then, bytes no piece filled are undefined).
    package var contents: [UInt8] { bytes }

    /// Cuts `chunk` into the pieces whose bits are set in `only` (every piece when nil).
    package static func pieces(
        of chunk: ByteBuffer, digest: SHA256Digest, pieceSize: Int,
        only: ChunkBitmap? = nil
    ) -> [ChunkPiece] {
        let length = chunk.readableBytes
        let count = ChunkPiece.pieceCount(chunkLength: length, pieceSize: pieceSize)
        var pieces: [ChunkPiece] = []
        pieces.reserveCapacity(only?.held ?? count)
        for index in 0..<count where only.map({ $0.count == count && $0.contains(index) }) ?? true {
            let range = ChunkPiece.range(of: index, chunkLength: length, pieceSize: pieceSize)
            guard let slice = chunk.getSlice(at: chunk.readerIndex + range.lowerBound, length: range.count) else {
                continue
            }
            pieces.append(
                ChunkPiece(digest: digest, chunkLength: length, pieceSize: pieceSize, index: index, payload: slice))
        }
        return pieces
    }
}
