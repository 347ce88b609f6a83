import MeshCore
import MeshCrypto

/// A stand-in for Ed25519 in large simulations: the "signature" is a keyed hash that anyone
/// could compute, so it proves nothing, but it is cheap, and records still have to carry one
/// that matches. Tests about forged records use `Ed25519Authority`.
package struct SimulationAuthority: RecordAuthority {
    package let signingKey: PublicSigningKey

    package init(index: Int) {
        var bytes = [UInt8](repeating: 0, count: 32)
        var value = UInt64(index) &* 0x9E37_79B9_7F4A_7C15 | 1
        for i in 0..<32 {
            bytes[i] = UInt8(truncatingIfNeeded: value >> UInt64(8 * (i % 8)))
            if i % 8 == 7 { value = value &* 0xBF58_476D_1CE4_E5B9 &+ UInt64(i) }
        }
        signingKey = try! PublicSigningKey(bytes: bytes)  // safe: 32 bytes
    }

    package func sign(_ message: [UInt8]) -> [UInt8] {
        Self.tag(signingKey, message)
    }

    package func isValid(signature: [UInt8], message: [UInt8], signingKey: PublicSigningKey) -> Bool {
        signature == Self.tag(signingKey, message)
    }

    private static func tag(_ key: PublicSigningKey, _ message: [UInt8]) -> [UInt8] {
        var hasher = SHA256Hasher()
        hasher.update(key.bytes)
        hasher.update(message)
        let digest = hasher.finalize().bytes
        return digest + digest
    }
}
