import Crypto

/// The checks a STUN message carries (RFC 8489 §14.5, §14.7): MESSAGE-INTEGRITY is HMAC-SHA1
/// under a key the two sides share, FINGERPRINT a CRC-32 that tells STUN apart from other
/// protocols on the same port. Not our session's cryptography: a TURN server knows the key, and
/// what it protects is only the allocation, never a member's datagram.
package enum StunIntegrity {
    /// The long-term credential's key (RFC 8489 §9.2.2): MD5 of `username:realm:password`.
    /// (The password is not SASLprep'd: ASCII passwords, which coturn users write, are unchanged by it.)
    package static func longTermKey(username: String, realm: String, password: String) -> [UInt8] {
        Array(Insecure.MD5.hash(data: Array("\(username):\(realm):\(password)".utf8)))
    }

    /// HMAC-SHA1 of `message` under `key` (20 bytes).
    package static func hmacSHA1(key: [UInt8], _ message: some Sequence<UInt8>) -> [UInt8] {
        var hmac = HMAC<Insecure.SHA1>(key: SymmetricKey(data: key))
        hmac.update(data: Array(message))
        return Array(hmac.finalize())
    }

    /// Constant-time comparison of two MACs.
    package static func equal(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }

    /// CRC-32 (IEEE 802.3, as zlib's `crc32`).
    package static func crc32(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc = crcTable[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8)
        }
        return crc ^ 0xFFFF_FFFF
    }

    private static let crcTable: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }
}
