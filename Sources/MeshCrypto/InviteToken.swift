/// An invite: the session secret plus the addresses where the inviter can be reached.
///
/// Text form: `gm1` then base64url (no padding) of
/// `version(1) | secret(32) | count(1) | count × (family(1: 4|6) | address(4|16) | port(2)) | check(4)`,
/// where `check` is the first 4 bytes of SHA-256 of everything before it, so a token damaged
/// in copy and paste is told apart from one of another session.
package struct InviteToken: Sendable, Equatable {
    package static let prefix = "gm1"
    package static let formatVersion: UInt8 = 1
    package static let maxAddresses = 16
    /// The longest text any valid token can have; longer input is refused before decoding.
    package static let maxTextLength = 512

    package var secret: SessionSecret
    package var addresses: [PeerAddress]

    package init(secret: SessionSecret, addresses: [PeerAddress]) {
        self.secret = secret
        self.addresses = Array(addresses.prefix(Self.maxAddresses))
    }

    package var text: String {
        var payload: [UInt8] = [Self.formatVersion]
        payload += secret.bytes
        payload.append(UInt8(addresses.count))
        for address in addresses {
            let hostBytes = address.hostBytes
            payload.append(hostBytes.count == 4 ? 4 : 6)
            payload += hostBytes
            payload += [UInt8(address.port >> 8), UInt8(address.port & 0xff)]
        }
        payload += SHA256Digest.hashing(payload).bytes.prefix(4)
        return Self.prefix + Base64URL.encode(payload)
    }

    /// The label `groupmesh run` prints the token after: a line copied whole still parses.
    static let printedLabel = "invite:"

    package init(parsing raw: String) throws(MeshCryptoError) {
        var text = raw.trimmingWhitespace()
        if text.hasPrefix(Self.printedLabel) {
            text = String(text.dropFirst(Self.printedLabel.count)).trimmingWhitespace()
        }
        guard !text.isEmpty else { throw .invite(.empty) }
        guard text.utf8.count <= Self.maxTextLength else { throw .invite(.tooLong) }
        guard text.hasPrefix(Self.prefix) else { throw .invite(.notAnInvite) }
        let encoded = text.dropFirst(Self.prefix.count)
        guard let payload = Base64URL.decode(encoded) else {
            // Every character may be right and the length not: a token cut short when copied.
            throw .invite(Base64URL.isAlphabet(encoded) ? .badLength : .badEncoding)
        }
        guard payload.count >= 1 + 32 + 1 + 4 else { throw .invite(.truncated) }
        let body = payload.dropLast(4)
        guard Array(payload.suffix(4)) == Array(SHA256Digest.hashing(Array(body)).bytes.prefix(4)) else {
            throw .invite(.checksumMismatch)
        }
        var reader = ByteReader(Array(body))
        guard let version = reader.byte(), version == Self.formatVersion else { throw .invite(.unsupportedVersion) }
        guard let secretBytes = reader.bytes(32), let count = reader.byte() else { throw .invite(.truncated) }
        guard count > 0 else { throw .invite(.noAddresses) }
        guard count <= Self.maxAddresses else { throw .invite(.tooManyAddresses) }
        var addresses: [PeerAddress] = []
        for _ in 0..<count {
            guard let family = reader.byte() else { throw .invite(.truncated) }
            let length: Int
            switch family {
            case 4: length = 4
            case 6: length = 16
            default: throw .invite(.badAddress)
            }
            guard let host = reader.bytes(length), let high = reader.byte(), let low = reader.byte() else {
                throw .invite(.truncated)
            }
            let port = UInt16(high) << 8 | UInt16(low)
            guard port != 0 else { throw .invite(.badAddress) }
            addresses.append(length == 4 ? PeerAddress(ipv4: host, port: port) : PeerAddress(ipv6: host, port: port))
        }
        guard reader.isAtEnd else { throw .invite(.trailingBytes) }
        self.init(secret: try! SessionSecret(bytes: secretBytes), addresses: addresses)  // safe: 32 bytes read
    }
}

package enum InviteTokenError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty, tooLong, notAnInvite, badEncoding, badLength, truncated, checksumMismatch
    case unsupportedVersion, noAddresses, tooManyAddresses, badAddress, trailingBytes

    package var description: String {
        let reason: String
        switch self {
        case .empty: reason = "it is empty"
        case .tooLong: reason = "it is longer than any invite (\(InviteToken.maxTextLength) characters)"
        case .notAnInvite: reason = "it does not start with '\(InviteToken.prefix)'"
        case .badEncoding: reason = "it has characters outside base64url"
        case .badLength:
            reason = "its length fits no invite: it was cut short, or a character was added (copy the whole token)"
        case .truncated: reason = "it is cut short"
        case .checksumMismatch: reason = "its checksum does not match (was it copied whole?)"
        case .unsupportedVersion: reason = "it was made by a newer or unknown version of groupmesh"
        case .noAddresses: reason = "it names no address to join"
        case .tooManyAddresses: reason = "it names more than \(InviteToken.maxAddresses) addresses"
        case .badAddress: reason = "it holds a malformed address"
        case .trailingBytes: reason = "it has extra bytes after the addresses"
        }
        return "bad invite: \(reason)"
    }
}

/// Base64url without padding (RFC 4648 §5): survives shells, URLs and chat clients.
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let reverse: [Int8] = {
        var table = [Int8](repeating: -1, count: 256)
        for (index, c) in alphabet.enumerated() { table[Int(c)] = Int8(index) }
        return table
    }()

    static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let remaining = bytes.count - index
            let b0 = UInt32(bytes[index])
            let b1 = remaining > 1 ? UInt32(bytes[index + 1]) : 0
            let b2 = remaining > 2 ? UInt32(bytes[index + 2]) : 0
            let triple = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(triple >> 18 & 63)])
            out.append(alphabet[Int(triple >> 12 & 63)])
            if remaining > 1 { out.append(alphabet[Int(triple >> 6 & 63)]) }
            if remaining > 2 { out.append(alphabet[Int(triple & 63)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether every character of `text` is one of base64url's.
    static func isAlphabet(_ text: some StringProtocol) -> Bool {
        text.utf8.allSatisfy { reverse[Int($0)] >= 0 }
    }

    static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 4 != 1 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(chars.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for c in chars {
            let value = reverse[Int(c)]
            guard value >= 0 else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero, so each byte string has exactly one text form.
        guard accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}

/// Bounds-checked reading of a byte array: every read returns nil past the end.
struct ByteReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset == bytes.count }

    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func bytes(_ count: Int) -> [UInt8]? {
        guard count >= 0, bytes.count - offset >= count else { return nil }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }
}

extension String {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        return String(scalars[first...last])
    }
}
