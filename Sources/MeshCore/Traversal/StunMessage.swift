import MeshCrypto

/// A STUN message (RFC 8489 §5): what a node says to a STUN or TURN server and what the server
/// answers. Decoding takes outside bytes and never traps (`WireError`); every length is checked
/// before it is used.
package struct StunMessage: Sendable, Equatable {
    package static let magicCookie: UInt32 = 0x2112_A442
    package static let headerSize = 20
    /// The largest message decoded: a server's answer fits one datagram of any path we use.
    package static let maxSize = 8972
    package static let maxAttributes = 64
    /// XORed into FINGERPRINT's CRC-32 ("STUN").
    package static let fingerprintXor: UInt32 = 0x5354_554E

    package enum Class: UInt16, Sendable {
        case request = 0, indication = 1, success = 2, error = 3
    }

    package struct Method: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        package let rawValue: UInt16
        package init(rawValue: UInt16) { self.rawValue = rawValue & 0x0FFF }

        package static let binding = Method(rawValue: 0x001)
        package static let allocate = Method(rawValue: 0x003)
        package static let refresh = Method(rawValue: 0x004)
        package static let send = Method(rawValue: 0x006)
        package static let data = Method(rawValue: 0x007)
        package static let createPermission = Method(rawValue: 0x008)
        package static let channelBind = Method(rawValue: 0x009)

        package var description: String {
            switch self {
            case .binding: "Binding"
            case .allocate: "Allocate"
            case .refresh: "Refresh"
            case .send: "Send"
            case .data: "Data"
            case .createPermission: "CreatePermission"
            case .channelBind: "ChannelBind"
            default: "method 0x\(String(rawValue, radix: 16))"
            }
        }
    }

    /// The 96-bit transaction id.
    package struct TransactionID: Hashable, Sendable, CustomStringConvertible {
        package let bytes: [UInt8]

        package init?(bytes: [UInt8]) {
            guard bytes.count == 12 else { return nil }
            self.bytes = bytes
        }

        package init(random: inout some RandomNumberGenerator) {
            bytes = (0..<12).map { _ in UInt8.random(in: 0...255, using: &random) }
        }

        package var description: String { Hex.encode(bytes) }
    }

    package var method: Method
    package var messageClass: Class
    package var transactionID: TransactionID
    package var attributes: [StunAttribute]

    package init(method: Method, messageClass: Class, transactionID: TransactionID, attributes: [StunAttribute] = []) {
        self.method = method
        self.messageClass = messageClass
        self.transactionID = transactionID
        self.attributes = attributes
    }

    // MARK: attributes read

    package var xorMappedAddress: PeerAddress? {
        for case let .xorMappedAddress(address) in attributes { return address }
        // RFC 3489 servers answer with the plain MAPPED-ADDRESS only.
        for case let .mappedAddress(address) in attributes { return address }
        return nil
    }

    package var xorRelayedAddress: PeerAddress? {
        for case let .xorRelayedAddress(address) in attributes { return address }
        return nil
    }

    package var xorPeerAddress: PeerAddress? {
        for case let .xorPeerAddress(address) in attributes { return address }
        return nil
    }

    package var errorCode: (code: Int, reason: String)? {
        for case let .errorCode(code, reason) in attributes { return (code, reason) }
        return nil
    }

    package var realm: String? {
        for case let .realm(text) in attributes { return text }
        return nil
    }

    package var nonce: String? {
        for case let .nonce(text) in attributes { return text }
        return nil
    }

    package var lifetime: UInt32? {
        for case let .lifetime(seconds) in attributes { return seconds }
        return nil
    }

    package var data: [UInt8]? {
        for case let .data(bytes) in attributes { return bytes }
        return nil
    }

    // MARK: type field

    /// The 14-bit message type: method bits interleaved with the two class bits (§5).
    static func messageType(_ method: Method, _ messageClass: Class) -> UInt16 {
        let m = method.rawValue, c = messageClass.rawValue
        return (m & 0x000F) | ((m & 0x0070) << 1) | ((m & 0x0F80) << 2) | ((c & 1) << 4) | ((c & 2) << 7)
    }

    static func split(_ type: UInt16) -> (Method, Class) {
        let method = (type & 0x000F) | ((type & 0x00E0) >> 1) | ((type & 0x3E00) >> 2)
        let rawClass = ((type >> 4) & 1) | ((type >> 7) & 2)
        // safe: two bits always name one of the four classes.
        return (Method(rawValue: method), Class(rawValue: rawClass) ?? .request)
    }

    /// Whether `bytes` look like a STUN message at all: two zero bits, the magic cookie, and a
    /// length that fills the datagram. What the shell demultiplexes datagrams by. (A GroupMesh
    /// datagram has its session id where STUN has length and cookie: a session whose id holds
    /// the cookie would still have only the datagrams of one exact length taken for STUN.)
    package static func looksLikeStun(_ bytes: some Collection<UInt8>) -> Bool {
        guard bytes.count >= headerSize else { return false }
        var iterator = bytes.makeIterator()
        var header = [UInt8]()
        header.reserveCapacity(8)
        for _ in 0..<8 { if let byte = iterator.next() { header.append(byte) } }
        let cookie = UInt32(header[4]) << 24 | UInt32(header[5]) << 16 | UInt32(header[6]) << 8 | UInt32(header[7])
        let length = Int(header[2]) << 8 | Int(header[3])
        return header[0] & 0xC0 == 0 && cookie == magicCookie && headerSize + length == bytes.count
    }

    // MARK: encoding

    /// The message's bytes; with `integrityKey`, MESSAGE-INTEGRITY after the attributes; with
    /// `fingerprint`, FINGERPRINT last (§14.5, §14.7). Attributes are padded to 4 bytes with
    /// `padding` (zeros; RFC 5769's samples pad with spaces).
    package func encoded(integrityKey: [UInt8]? = nil, fingerprint: Bool = false, padding: UInt8 = 0) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(128)
        bytes.append16(Self.messageType(method, messageClass))
        bytes.append16(0)  // length, set below
        bytes.append32(Self.magicCookie)
        bytes += transactionID.bytes
        for attribute in attributes {
            attribute.encode(into: &bytes, transactionID: transactionID, padding: padding)
        }
        if let integrityKey {
            Self.setLength(&bytes, bytes.count - Self.headerSize + 24)
            let mac = StunIntegrity.hmacSHA1(key: integrityKey, bytes)
            StunAttribute.messageIntegrity(mac).encode(into: &bytes, transactionID: transactionID)
        }
        if fingerprint {
            Self.setLength(&bytes, bytes.count - Self.headerSize + 8)
            let crc = StunIntegrity.crc32(bytes) ^ Self.fingerprintXor
            StunAttribute.fingerprint(crc).encode(into: &bytes, transactionID: transactionID)
        }
        Self.setLength(&bytes, bytes.count - Self.headerSize)
        return bytes
    }

    static func setLength(_ bytes: inout [UInt8], _ length: Int) {
        bytes[2] = UInt8(truncatingIfNeeded: length >> 8)
        bytes[3] = UInt8(truncatingIfNeeded: length)
    }

    // MARK: decoding

    /// A decoded message with what its checks need: where MESSAGE-INTEGRITY and FINGERPRINT sat.
    package struct Received: Sendable {
        package let message: StunMessage
        package let bytes: [UInt8]
        /// Offset of the MESSAGE-INTEGRITY attribute's header, when the message had one.
        package let integrityOffset: Int?
        package let fingerprintOffset: Int?
        /// Comprehension-required attributes (type below 0x8000) this decoder does not know.
        package let unknownRequired: [UInt16]

        /// Whether MESSAGE-INTEGRITY is present and right under `key`.
        package func hasValidIntegrity(key: [UInt8]) -> Bool {
            guard let offset = integrityOffset, offset + 24 <= bytes.count else { return false }
            var covered = Array(bytes[0..<offset])
            StunMessage.setLength(&covered, offset - StunMessage.headerSize + 24)
            let mac = StunIntegrity.hmacSHA1(key: key, covered)
            return StunIntegrity.equal(mac, Array(bytes[(offset + 4)..<(offset + 24)]))
        }

        /// Whether FINGERPRINT is absent, or present and right.
        package var fingerprintIsValid: Bool {
            guard let offset = fingerprintOffset else { return true }
            guard offset + 8 <= bytes.count else { return false }
            var covered = Array(bytes[0..<offset])
            StunMessage.setLength(&covered, offset - StunMessage.headerSize + 8)
            let expected = StunIntegrity.crc32(covered) ^ StunMessage.fingerprintXor
            return bytes.readUInt32(at: offset + 4) == expected
        }
    }

    /// Decodes one message that fills `bytes` exactly.
    package static func decode(_ bytes: [UInt8]) throws(WireError) -> Received {
        guard bytes.count <= maxSize else { throw .oversized(length: bytes.count, limit: maxSize) }
        guard bytes.count >= headerSize else { throw .truncated(what: "STUN header") }
        let type = bytes.readUInt16(at: 0)
        guard type & 0xC000 == 0 else { throw .invalidField(what: "STUN message type") }
        guard bytes.readUInt32(at: 4) == magicCookie else { throw .invalidField(what: "STUN magic cookie") }
        let length = Int(bytes.readUInt16(at: 2))
        guard length % 4 == 0 else { throw .invalidField(what: "STUN length") }
        guard headerSize + length <= bytes.count else { throw .truncated(what: "STUN message") }
        guard headerSize + length == bytes.count else { throw .trailingBytes(bytes.count - headerSize - length) }
        // safe: 12 bytes are there (the header was checked).
        guard let transaction = TransactionID(bytes: Array(bytes[8..<20])) else {
            throw .truncated(what: "STUN transaction id")
        }
        let (method, messageClass) = split(type)
        var attributes: [StunAttribute] = []
        var unknownRequired: [UInt16] = []
        var integrityOffset: Int?, fingerprintOffset: Int?
        var offset = headerSize
        var count = 0
        while offset < bytes.count {
            count += 1
            guard count <= maxAttributes else { throw .invalidField(what: "STUN attribute count") }
            guard offset + 4 <= bytes.count else { throw .truncated(what: "STUN attribute header") }
            let attributeType = bytes.readUInt16(at: offset)
            let valueLength = Int(bytes.readUInt16(at: offset + 2))
            let valueStart = offset + 4
            guard valueStart + valueLength <= bytes.count else { throw .truncated(what: "STUN attribute") }
            let padded = (valueLength + 3) & ~3
            guard valueStart + padded <= bytes.count else { throw .truncated(what: "STUN attribute padding") }
            // Only FINGERPRINT may follow MESSAGE-INTEGRITY, and nothing FINGERPRINT (§14.5, §14.7).
            if fingerprintOffset != nil { throw .invalidField(what: "STUN attribute after FINGERPRINT") }
            let value = bytes[valueStart..<(valueStart + valueLength)]
            if integrityOffset == nil || attributeType == StunAttribute.fingerprintType {
                switch try StunAttribute.decode(type: attributeType, value: value, transactionID: transaction) {
                case let .some(attribute):
                    if case .messageIntegrity = attribute { integrityOffset = offset }
                    if case .fingerprint = attribute { fingerprintOffset = offset }
                    attributes.append(attribute)
                case .none:
                    if attributeType < 0x8000, unknownRequired.count < 16 { unknownRequired.append(attributeType) }
                }
            }
            offset = valueStart + padded
        }
        return Received(
            message: StunMessage(
                method: method, messageClass: messageClass, transactionID: transaction,
                attributes: attributes),
            bytes: bytes, integrityOffset: integrityOffset, fingerprintOffset: fingerprintOffset,
            unknownRequired: unknownRequired)
    }
}

/// One STUN attribute this client reads or writes; the others are skipped when decoding.
package enum StunAttribute: Sendable, Equatable {
    case mappedAddress(PeerAddress)
    case xorMappedAddress(PeerAddress)
    case xorPeerAddress(PeerAddress)
    case xorRelayedAddress(PeerAddress)
    case errorCode(code: Int, reason: String)
    case realm(String)
    case nonce(String)
    case username(String)
    case messageIntegrity([UInt8])
    case fingerprint(UInt32)
    case lifetime(UInt32)
    case data([UInt8])
    case channelNumber(UInt16)
    /// The IP protocol number of the relay's transport: 17, UDP.
    case requestedTransport(UInt8)
    case software(String)

    static let fingerprintType: UInt16 = 0x8028
    /// The longest text attribute accepted (REALM, NONCE and SOFTWARE: under 128 characters of
    /// up to 6 bytes, §14.3).
    static let maxTextBytes = 763

    var type: UInt16 {
        switch self {
        case .mappedAddress: 0x0001
        case .username: 0x0006
        case .messageIntegrity: 0x0008
        case .errorCode: 0x0009
        case .channelNumber: 0x000C
        case .lifetime: 0x000D
        case .xorPeerAddress: 0x0012
        case .data: 0x0013
        case .realm: 0x0014
        case .nonce: 0x0015
        case .xorRelayedAddress: 0x0016
        case .requestedTransport: 0x0019
        case .xorMappedAddress: 0x0020
        case .software: 0x8022
        case .fingerprint: Self.fingerprintType
        }
    }

    func encode(into bytes: inout [UInt8], transactionID: StunMessage.TransactionID, padding: UInt8 = 0) {
        var value: [UInt8] = []
        switch self {
        case let .mappedAddress(address):
            value = Self.addressValue(address, xor: nil)
        case let .xorMappedAddress(address), let .xorPeerAddress(address), let .xorRelayedAddress(address):
            value = Self.addressValue(address, xor: transactionID)
        case let .errorCode(code, reason):
            value =
                [0, 0, UInt8(truncatingIfNeeded: code / 100), UInt8(truncatingIfNeeded: code % 100)]
                + Array(reason.utf8)
        case let .realm(text), let .nonce(text), let .username(text), let .software(text):
            value = Array(text.utf8)
        case let .messageIntegrity(mac):
            value = mac
        case let .fingerprint(crc):
            value.append32(crc)
        case let .lifetime(seconds):
            value.append32(seconds)
        case let .data(payload):
            value = payload
        case let .channelNumber(number):
            value.append16(number)
            value.append16(0)
        case let .requestedTransport(proto):
            value = [proto, 0, 0, 0]
        }
        bytes.append16(type)
        bytes.append16(UInt16(truncatingIfNeeded: value.count))
        bytes += value
        bytes += [UInt8](repeating: padding, count: (4 - value.count % 4) % 4)
    }

    /// Family, port and address, XORed with the cookie (and the transaction id for IPv6) when
    /// `xor` is given (§14.2).
    static func addressValue(_ address: PeerAddress, xor transactionID: StunMessage.TransactionID?) -> [UInt8] {
        var value: [UInt8] = [0, address.isIPv6 ? 0x02 : 0x01]
        var host = address.hostBytes
        var port = address.port
        if let transactionID {
            port ^= UInt16(StunMessage.magicCookie >> 16)
            let mask = cookieBytes + transactionID.bytes
            for index in host.indices { host[index] ^= mask[index] }
        }
        value.append16(port)
        return value + host
    }

    static let cookieBytes: [UInt8] = [0x21, 0x12, 0xA4, 0x42]

    /// The attribute, or nil for a type this decoder skips.
    static func decode(
        type: UInt16, value: ArraySlice<UInt8>, transactionID: StunMessage.TransactionID
    ) throws(WireError) -> StunAttribute? {
        let bytes = Array(value)
        switch type {
        case 0x0001: return .mappedAddress(try address(bytes, xor: nil))
        case 0x0020: return .xorMappedAddress(try address(bytes, xor: transactionID))
        case 0x0012: return .xorPeerAddress(try address(bytes, xor: transactionID))
        case 0x0016: return .xorRelayedAddress(try address(bytes, xor: transactionID))
        case 0x0009:
            guard bytes.count >= 4 else { throw .truncated(what: "ERROR-CODE") }
            let code = Int(bytes[2] & 0x07) * 100 + Int(bytes[3])
            // Some servers (coturn) count the C string's terminating NUL in the reason.
            let reason = Array(bytes[4...].reversed().drop(while: { $0 == 0 }).reversed())
            return .errorCode(code: code, reason: try text(reason, what: "ERROR-CODE reason"))
        case 0x0014: return .realm(try text(bytes, what: "REALM"))
        case 0x0015: return .nonce(try text(bytes, what: "NONCE"))
        case 0x0006: return .username(try text(bytes, what: "USERNAME"))
        case 0x8022: return .software(try text(bytes, what: "SOFTWARE"))
        case 0x0008:
            guard bytes.count == 20 else { throw .invalidField(what: "MESSAGE-INTEGRITY length") }
            return .messageIntegrity(bytes)
        case fingerprintType:
            guard bytes.count == 4 else { throw .invalidField(what: "FINGERPRINT length") }
            return .fingerprint(bytes.readUInt32(at: 0))
        case 0x000D:
            guard bytes.count == 4 else { throw .invalidField(what: "LIFETIME length") }
            return .lifetime(bytes.readUInt32(at: 0))
        case 0x0013: return .data(bytes)
        case 0x000C:
            guard bytes.count == 4 else { throw .invalidField(what: "CHANNEL-NUMBER length") }
            return .channelNumber(bytes.readUInt16(at: 0))
        case 0x0019:
            guard bytes.count == 4 else { throw .invalidField(what: "REQUESTED-TRANSPORT length") }
            return .requestedTransport(bytes[0])
        default: return nil
        }
    }

    static func address(
        _ bytes: [UInt8], xor transactionID: StunMessage.TransactionID?
    ) throws(WireError) -> PeerAddress {
        guard bytes.count >= 4 else { throw .truncated(what: "STUN address") }
        let size: Int
        switch bytes[1] {
        case 0x01: size = 4
        case 0x02: size = 16
        default: throw .invalidField(what: "STUN address family")
        }
        guard bytes.count == 4 + size else { throw .invalidField(what: "STUN address length") }
        var port = bytes.readUInt16(at: 2)
        var host = Array(bytes[4...])
        if let transactionID {
            port ^= UInt16(StunMessage.magicCookie >> 16)
            let mask = cookieBytes + transactionID.bytes
            for index in host.indices { host[index] ^= mask[index] }
        }
        return size == 4 ? PeerAddress(ipv4: host, port: port) : PeerAddress(ipv6: host, port: port)
    }

    static func text(_ bytes: [UInt8], what: String) throws(WireError) -> String {
        guard bytes.count <= maxTextBytes else { throw .oversized(length: bytes.count, limit: maxTextBytes) }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .invalidField(what: "\(what) (not UTF-8)")
        }
        return text
    }
}

extension Array where Element == UInt8 {
    mutating func append16(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    mutating func append32(_ value: UInt32) {
        append16(UInt16(truncatingIfNeeded: value >> 16))
        append16(UInt16(truncatingIfNeeded: value))
    }

    /// Callers check `offset + 2 <= count` first.
    func readUInt16(at offset: Int) -> UInt16 {
        UInt16(self[offset]) << 8 | UInt16(self[offset + 1])
    }

    func readUInt32(at offset: Int) -> UInt32 {
        UInt32(readUInt16(at: offset)) << 16 | UInt32(readUInt16(at: offset + 2))
    }
}
