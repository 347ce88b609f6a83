import CSodium

/// A node's long-term Ed25519 key pair. Its node id is derived from the public key, so a
/// record signed by the key proves which node made it.
package struct NodeIdentity: Sendable {
    package static let seedByteCount = 32
    package static let signatureByteCount = 64

    package let publicKey: PublicSigningKey
    private let secretKey: [UInt8]  // libsodium's 64-byte form (seed || public key)
    private let seed: [UInt8]

    package init(seed: [UInt8]) throws(MeshCryptoError) {
        guard seed.count == Self.seedByteCount else {
            throw .invalidKeyLength(what: "identity seed", expected: Self.seedByteCount, actual: seed.count)
        }
        Sodium.ensureInitialized()
        var publicBytes = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        var secretBytes = [UInt8](repeating: 0, count: Int(crypto_sign_SECRETKEYBYTES))
        crypto_sign_seed_keypair(&publicBytes, &secretBytes, seed)
        self.seed = seed
        self.secretKey = secretBytes
        self.publicKey = try! PublicSigningKey(bytes: publicBytes)  // safe: libsodium wrote exactly 32 bytes
    }

    package static func generate() -> NodeIdentity {
        try! NodeIdentity(seed: SecureRandom.bytes(seedByteCount))  // safe: exact count
    }

    package var nodeID: NodeID { publicKey.nodeID }

    package func sign(_ message: [UInt8]) -> [UInt8] {
        var signature = [UInt8](repeating: 0, count: Self.signatureByteCount)
        message.withUnsafeBytes { bytes in
            _ = crypto_sign_detached(
                &signature, nil, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self),
                UInt64(bytes.count), secretKey)
        }
        return signature
    }

    package static func load(from path: String) throws(MeshCryptoError) -> NodeIdentity {
        try NodeIdentity(seed: KeyFile.load(path, expectedCount: seedByteCount, what: "identity"))
    }

    package func write(to path: String) throws(MeshCryptoError) {
        try KeyFile.store(seed, to: path)
    }
}

/// An Ed25519 public key, as carried in membership records.
package struct PublicSigningKey: Hashable, Sendable {
    package static let byteCount = 32
    package let bytes: [UInt8]
    /// The node id: the first 16 bytes of SHA-256 of the public key. Computed once: member ids
    /// are read on every datagram and in every sort of the member list (hashing there each time
    /// would dominate a whole-node simulation's time).
    package let nodeID: NodeID

    package init(bytes: [UInt8]) throws(MeshCryptoError) {
        guard bytes.count == Self.byteCount else {
            throw .invalidKeyLength(what: "signing public key", expected: Self.byteCount, actual: bytes.count)
        }
        self.bytes = bytes
        self.nodeID = NodeID(bytes: SHA256Digest.hashing(bytes).bytes.prefix(NodeID.byteCount))
    }

    package func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        Sodium.ensureInitialized()
        return signature.withUnsafeBytes { sig in
            guard sig.count == NodeIdentity.signatureByteCount else { return false }
            return message.withUnsafeBytes { msg in
                crypto_sign_verify_detached(
                    sig.baseAddress!.assumingMemoryBound(to: UInt8.self),  // safe: count checked
                    msg.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    UInt64(msg.count), bytes) == 0
            }
        }
    }
}

/// 16 bytes that name a node, derived from its identity key.
package struct NodeID: Hashable, Sendable, Comparable, CustomStringConvertible {
    package static let byteCount = 16
    package let high: UInt64
    package let low: UInt64

    package init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Takes the first 16 bytes; shorter input is zero-padded (callers check lengths first).
    package init(bytes: some Collection<UInt8>) {
        var padded = Array(bytes.prefix(16))
        padded += [UInt8](repeating: 0, count: 16 - padded.count)
        var high: UInt64 = 0, low: UInt64 = 0
        for (index, byte) in padded.enumerated() {
            if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
        }
        self.init(high: high, low: low)
    }

    package init?(hex: some StringProtocol) {
        guard hex.utf8.count == Self.byteCount * 2, let bytes = Hex.decode(hex) else { return nil }
        self.init(bytes: bytes)
    }

    package var bytes: [UInt8] {
        (0..<16).map { index in
            let word = index < 8 ? high : low
            return UInt8(truncatingIfNeeded: word >> UInt64(56 - 8 * (index % 8)))
        }
    }

    package var hex: String { Hex.encode(bytes) }
    package var description: String { hex }

    package static func < (lhs: NodeID, rhs: NodeID) -> Bool { (lhs.high, lhs.low) < (rhs.high, rhs.low) }
}
