/// The 32-byte secret whose possession is membership of a session (Docs/SECURITY.md).
package struct SessionSecret: Sendable, Equatable {
    package static let byteCount = 32
    package let bytes: [UInt8]

    package init(bytes: [UInt8]) throws(MeshCryptoError) {
        guard bytes.count == Self.byteCount else {
            throw .invalidKeyLength(what: "session secret", expected: Self.byteCount, actual: bytes.count)
        }
        self.bytes = bytes
    }

    package static func generate() -> SessionSecret {
        try! SessionSecret(bytes: SecureRandom.bytes(byteCount))  // safe: exact count
    }

    package func key(for purpose: KeyPurpose, length: Int = 32) -> [UInt8] {
        KeyDerivation.derive(from: bytes, subkeyID: purpose.rawValue, context: "GMesh-v1", length: length)
    }

    /// The public name of the session: 8 bytes in every datagram header.
    package var sessionID: SessionID {
        SessionID(bytes: key(for: .sessionID, length: 16).prefix(8))
    }

    // MARK: persistence

    package static func load(from path: String) throws(MeshCryptoError) -> SessionSecret {
        try SessionSecret(bytes: KeyFile.load(path, expectedCount: byteCount, what: "session secret"))
    }

    package func write(to path: String) throws(MeshCryptoError) {
        try KeyFile.store(bytes, to: path)
    }
}

/// The first 8 bytes of a purpose key: names a session without revealing its secret.
package struct SessionID: Hashable, Sendable, CustomStringConvertible {
    package let value: UInt64

    package init(value: UInt64) { self.value = value }

    package init(bytes: some Collection<UInt8>) {
        var value: UInt64 = 0
        for byte in bytes.prefix(8) { value = value << 8 | UInt64(byte) }
        self.value = value
    }

    package var description: String {
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
