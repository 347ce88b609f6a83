/// Which chunks of an attachment a member holds: one bit per chunk, compact enough to announce
/// often (400 chunks of a 100 MiB attachment fit in 50 bytes).
package struct ChunkBitmap: Sendable, Equatable {
    package let count: Int
    private var words: [UInt64]

    package init(count: Int) {
        self.count = max(0, count)
        words = [UInt64](repeating: 0, count: (self.count + 63) / 64)
    }

    package static func full(_ count: Int) -> ChunkBitmap {
        var bitmap = ChunkBitmap(count: count)
        for index in 0..<bitmap.count { bitmap.insert(index) }
        return bitmap
    }

    package func contains(_ index: Int) -> Bool {
        guard index >= 0, index < count else { return false }
        return words[index / 64] & (1 << UInt64(index % 64)) != 0
    }

    package mutating func insert(_ index: Int) {
        guard index >= 0, index < count else { return }
        words[index / 64] |= 1 << UInt64(index % 64)
    }

    package var held: Int { words.reduce(0) { $0 + $1.nonzeroBitCount } }
    package var isComplete: Bool { held == count }

    /// Little-endian bit order, `⌈count / 8⌉` bytes.
    package var bytes: [UInt8] {
        (0..<((count + 7) / 8)).map { UInt8(truncatingIfNeeded: words[$0 / 8] >> UInt64(8 * ($0 % 8))) }
    }

    /// Nil when `bytes` has the wrong length for `count` or sets bits past `count`, so every
    /// bitmap has exactly one encoding.
    package init?(count: Int, bytes: [UInt8]) {
        guard count >= 0, bytes.count == (count + 7) / 8 else { return nil }
        if count % 8 != 0, let last = bytes.last, last >> UInt8(count % 8) != 0 { return nil }
        self.init(count: count)
        for (index, byte) in bytes.enumerated() {
            words[index / 8] |= UInt64(byte) << UInt64(8 * (index % 8))
        }
    }
}
