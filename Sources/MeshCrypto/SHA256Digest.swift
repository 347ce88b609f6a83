import Crypto

/// A SHA-256 digest. Hashing goes through swift-crypto, which uses the CPU's SHA extensions
/// (several times faster here than libsodium's portable implementation; see Docs/BENCHMARKS.md).
public struct SHA256Digest: Hashable, Sendable, Comparable, CustomStringConvertible {
    public static let byteCount = 32

    // Four words rather than an array: digests are map keys by the million in the chunk store.
    public let w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

    /// The digest whose big-endian 64-bit words are these (how the wire decoders read it).
    public init(words w0: UInt64, _ w1: UInt64, _ w2: UInt64, _ w3: UInt64) {
        (self.w0, self.w1, self.w2, self.w3) = (w0, w1, w2, w3)
    }

    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == Self.byteCount else { return nil }
        var words = [UInt64](repeating: 0, count: 4)
        for (index, byte) in bytes.enumerated() {
            words[index / 8] = words[index / 8] << 8 | UInt64(byte)
        }
        (w0, w1, w2, w3) = (words[0], words[1], words[2], words[3])
    }

    public init?(hex: some StringProtocol) {
        guard hex.utf8.count == Self.byteCount * 2, let bytes = Hex.decode(hex) else { return nil }
        self.init(bytes: bytes)
    }

    public static func hashing(_ bytes: UnsafeRawBufferPointer) -> SHA256Digest {
        SHA256Digest(SHA256.hash(data: bytes))
    }

    public static func hashing(_ bytes: [UInt8]) -> SHA256Digest {
        bytes.withUnsafeBytes { hashing($0) }
    }

    init(_ digest: SHA256.Digest) {
        // safe: SHA256.Digest is always 32 bytes
        self = digest.withUnsafeBytes { SHA256Digest(bytes: $0)! }
    }

    public var bytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(32)
        for word in [w0, w1, w2, w3] {
            for shift in stride(from: 56, through: 0, by: -8) {
                out.append(UInt8(truncatingIfNeeded: word >> UInt64(shift)))
            }
        }
        return out
    }

    public var hex: String { Hex.encode(bytes) }
    public var description: String { hex }

    public static func < (lhs: SHA256Digest, rhs: SHA256Digest) -> Bool {
        (lhs.w0, lhs.w1, lhs.w2, lhs.w3) < (rhs.w0, rhs.w1, rhs.w2, rhs.w3)
    }
}

/// Incremental SHA-256 for streams (files are hashed chunk by chunk, never loaded whole).
package struct SHA256Hasher: Sendable {
    private var state = SHA256()
    package init() {}
    package mutating func update(_ bytes: UnsafeRawBufferPointer) { state.update(bufferPointer: bytes) }
    package mutating func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { state.update(bufferPointer: $0) } }
    package func finalize() -> SHA256Digest { SHA256Digest(state.finalize()) }
}
