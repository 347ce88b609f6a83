import CSodium

/// Keyed BLAKE2b (libsodium's `crypto_generichash`): a MAC over bytes that only holders of the
/// key can make, and a tag that names what the key belongs to without telling the key.
package enum KeyedHash {
    /// `length` bytes (16 to 64) of BLAKE2b of `message` keyed with `key` (16 to 64 bytes).
    package static func hash(_ message: [UInt8], key: [UInt8], length: Int) -> [UInt8] {
        Sodium.ensureInitialized()
        precondition((16...64).contains(length) && (16...64).contains(key.count), "BLAKE2b sizes are 16 to 64 bytes")
        var out = [UInt8](repeating: 0, count: length)
        crypto_generichash(&out, length, message, UInt64(message.count), key, key.count)
        return out
    }

    /// Compares in time that does not depend on where the bytes differ.
    package static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        return a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in
                guard let x = x.baseAddress, let y = y.baseAddress else { return false }
                return sodium_memcmp(x, y, a.count) == 0
            }
        }
    }
}
