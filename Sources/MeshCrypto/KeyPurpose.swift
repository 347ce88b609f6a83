import CSodium

/// The purposes for which keys are derived from the session secret. Each has a fixed
/// libsodium KDF subkey id; changing one is a wire-format change (Docs/PROTOCOL.md).
package enum KeyPurpose: UInt64, Sendable, CaseIterable {
    /// 8 bytes in every datagram header: lets a node drop foreign traffic before any crypto.
    case sessionID = 1
    /// XChaCha20-Poly1305 key for join/hello datagrams sent before pairwise keys exist.
    case hello = 2
    /// BLAKE2b key that binds pairwise keys (from crypto_kx) to this session.
    case pairwiseBinding = 3
    /// BLAKE2b key that binds the keys sealing a new epoch's secret to one member (key epochs).
    case epochHandover = 4
    /// BLAKE2b key of LAN announcements: a session tag that names no secret, and their MAC.
    case lanDiscovery = 5

    /// libsodium's KDF context: exactly 8 bytes.
    static let context: [CChar] = Array("GMesh-v1".utf8CString.prefix(8))
}

/// libsodium's `crypto_kdf_derive_from_key` (keyed BLAKE2b with the subkey id and context as
/// salt and personal), kept in one place so known-answer tests cover it.
package enum KeyDerivation {
    package static func derive(from masterKey: [UInt8], subkeyID: UInt64, context: String, length: Int) -> [UInt8] {
        Sodium.ensureInitialized()
        precondition(masterKey.count == Int(crypto_kdf_KEYBYTES), "master key must be 32 bytes")
        precondition((16...64).contains(length), "KDF subkeys are 16 to 64 bytes")
        let ctx = Array(context.utf8CString.prefix(8)) + [CChar](repeating: 0, count: max(0, 8 - context.utf8.count))
        var out = [UInt8](repeating: 0, count: length)
        _ = ctx.withUnsafeBufferPointer { ctxPtr in
            crypto_kdf_derive_from_key(&out, length, subkeyID, ctxPtr.baseAddress!, masterKey)  // safe: non-empty array
        }
        return out
    }
}
