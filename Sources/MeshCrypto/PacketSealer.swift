import CSodium

/// XChaCha20-Poly1305-IETF under one key. The clear datagram header is the associated data,
/// so a flipped header bit fails authentication just like a flipped payload bit.
package struct PacketSealer: Sendable {
    package static let keyByteCount = 32
    package static let tagByteCount = 16
    package static let nonceByteCount = 24

    private let key: [UInt8]

    package init(key: [UInt8]) throws(MeshCryptoError) {
        guard key.count == Self.keyByteCount else {
            throw .invalidKeyLength(what: "packet key", expected: Self.keyByteCount, actual: key.count)
        }
        Sodium.ensureInitialized()
        self.key = key
    }

    init(unchecked key: [UInt8]) {
        Sodium.ensureInitialized()
        self.key = key
    }

    /// Seals `plaintext` into `output` (which may alias it: libsodium encrypts in place) and
    /// returns the sealed length, `plaintext.count + tagByteCount`.
    @discardableResult
    package func seal(
        _ plaintext: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer,
        nonce: PacketNonce, into output: UnsafeMutableRawBufferPointer
    ) -> Int {
        precondition(output.count >= plaintext.count + Self.tagByteCount, "seal output too small")
        var sealedLength: UInt64 = 0
        withUnsafeBytes(of: nonce.bytes) { noncePtr in
            _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                output.baseAddress!.assumingMemoryBound(to: UInt8.self), &sealedLength,  // safe: count checked
                plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                associatedData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(associatedData.count),
                nil, noncePtr.baseAddress!.assumingMemoryBound(to: UInt8.self), key)  // safe: 24-byte tuple
        }
        return Int(sealedLength)
    }

    /// Opens `sealed` into `output` (may alias); returns the plaintext length, or nil when the
    /// datagram was not sealed by this key with this nonce and associated data.
    package func open(
        _ sealed: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer,
        nonce: PacketNonce, into output: UnsafeMutableRawBufferPointer
    ) -> Int? {
        guard sealed.count >= Self.tagByteCount, output.count >= sealed.count - Self.tagByteCount else { return nil }
        var openedLength: UInt64 = 0
        let status = withUnsafeBytes(of: nonce.bytes) { noncePtr in
            crypto_aead_xchacha20poly1305_ietf_decrypt(
                output.baseAddress?.assumingMemoryBound(to: UInt8.self), &openedLength, nil,
                sealed.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(sealed.count),  // safe: count checked
                associatedData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(associatedData.count),
                noncePtr.baseAddress!.assumingMemoryBound(to: UInt8.self), key)  // safe: 24-byte tuple
        }
        return status == 0 ? Int(openedLength) : nil
    }

    package func seal(_ plaintext: [UInt8], associatedData: [UInt8] = [], nonce: PacketNonce) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: plaintext.count + Self.tagByteCount)
        plaintext.withUnsafeBytes { pt in
            associatedData.withUnsafeBytes { ad in
                output.withUnsafeMutableBytes { out in _ = seal(pt, associatedData: ad, nonce: nonce, into: out) }
            }
        }
        return output
    }

    package func open(_ sealed: [UInt8], associatedData: [UInt8] = [], nonce: PacketNonce) -> [UInt8]? {
        guard sealed.count >= Self.tagByteCount else { return nil }
        var output = [UInt8](repeating: 0, count: sealed.count - Self.tagByteCount)
        let length = sealed.withUnsafeBytes { ct in
            associatedData.withUnsafeBytes { ad in
                output.withUnsafeMutableBytes { out in open(ct, associatedData: ad, nonce: nonce, into: out) }
            }
        }
        return length == nil ? nil : output
    }
}

/// A 24-byte XChaCha20 nonce. Under a pairwise key it is the packet number (16 zero bytes, then
/// the number big-endian): numbers never repeat within a boot and keys never outlive one, so no
/// random call is needed per packet. Keys shared by many senders use random nonces instead.
package struct PacketNonce: Sendable, Equatable {
    package typealias Bytes = (UInt64, UInt64, UInt64)
    fileprivate var bytes: Bytes

    package static func packetNumber(_ number: UInt64) -> PacketNonce {
        PacketNonce(bytes: (0, 0, number.bigEndian))
    }

    package static func random() -> PacketNonce {
        PacketNonce(raw: SecureRandom.bytes(PacketSealer.nonceByteCount))!  // safe: exactly 24 bytes
    }

    package init?(raw: some Collection<UInt8>) {
        guard raw.count == PacketSealer.nonceByteCount else { return nil }
        var bytes: Bytes = (0, 0, 0)
        withUnsafeMutableBytes(of: &bytes) { target in
            for (index, byte) in raw.enumerated() { target[index] = byte }
        }
        self.bytes = bytes
    }

    private init(bytes: Bytes) { self.bytes = bytes }

    package var raw: [UInt8] { withUnsafeBytes(of: bytes) { Array($0) } }

    package static func == (lhs: PacketNonce, rhs: PacketNonce) -> Bool { lhs.bytes == rhs.bytes }
}
