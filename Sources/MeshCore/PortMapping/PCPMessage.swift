import MeshCrypto

/// PCP (RFC 6887) as a client speaks it: a MAP request for one UDP port, and the gateway's
/// answer. Only what a client needs; every answer is checked before it is believed.
package enum PCPMessage {
    package static let version: UInt8 = 2
    package static let serverPort: UInt16 = 5351
    static let mapOpcode: UInt8 = 1
    static let udp: UInt8 = 17
    /// Common header (24) plus the MAP opcode's fields (36).
    package static let mapSize = 60

    /// The result codes of RFC 6887 §7.4 a client tells apart.
    package enum ResultCode: UInt8, Sendable {
        case success = 0, unsupportedVersion, notAuthorized, malformedRequest, unsupportedOpcode, unsupportedOption,
            malformedOption, networkFailure, noResources, unsupportedProtocol, userExceededQuota,
            cannotProvideExternal, addressMismatch, excessiveRemotePeers

        package var reason: String {
            switch self {
            case .success: "success"
            case .unsupportedVersion: "unsupported version"
            case .notAuthorized: "not authorized"
            case .malformedRequest: "malformed request"
            case .unsupportedOpcode: "unsupported opcode"
            case .unsupportedOption: "unsupported option"
            case .malformedOption: "malformed option"
            case .networkFailure: "network failure"
            case .noResources: "no resources"
            case .unsupportedProtocol: "unsupported protocol"
            case .userExceededQuota: "user exceeded quota"
            case .cannotProvideExternal: "cannot provide external"
            case .addressMismatch: "address mismatch"
            case .excessiveRemotePeers: "excessive remote peers"
            }
        }
    }

    /// A MAP request: `internalPort` of `client` (our address towards the gateway) mapped for
    /// `lifetime` seconds (0 deletes it). `suggested` asks for an external port (0: any).
    package static func mapRequest(
        nonce: [UInt8], client: UInt32, internalPort: UInt16, suggestedPort: UInt16,
        lifetime: UInt32
    ) -> [UInt8] {
        var bytes: [UInt8] = [version, mapOpcode, 0, 0]
        bytes.appendBigEndian(lifetime)
        bytes += ipv4Mapped(client)
        bytes += nonce.prefix(12) + [UInt8](repeating: 0, count: max(0, 12 - nonce.count))
        bytes += [udp, 0, 0, 0]
        bytes.appendBigEndian(internalPort)
        bytes.appendBigEndian(suggestedPort)
        // No suggested external address: ::ffff:0.0.0.0 (RFC 6887 §11.1).
        bytes += ipv4Mapped(0)
        return bytes
    }

    /// What a datagram from the gateway's PCP port says.
    package enum Answer: Equatable, Sendable {
        /// A MAP answer (any result code; `external` is meaningful on success only).
        case map(
            result: UInt8, lifetime: UInt32, epoch: UInt32, nonce: [UInt8], internalPort: UInt16,
            externalPort: UInt16, external: PeerAddress.Host)
        /// The server speaks an older version only (a NAT-PMP server answers version 0): fall back.
        case unsupportedVersion(UInt8)
        /// A PCP answer to something else (another opcode, not a response).
        case other(opcode: UInt8)
    }

    /// Decodes an answer; nil for what is no PCP answer at all (too short, a request).
    package static func decode(_ bytes: [UInt8]) -> Answer? {
        guard bytes.count >= 4, bytes.count <= 1100 else { return nil }
        let answerVersion = bytes[0]
        // A NAT-PMP server answers any version it does not speak with version 0, result 1.
        if answerVersion != version {
            if answerVersion < version { return .unsupportedVersion(answerVersion) }
            return nil
        }
        let opcode = bytes[1]
        guard opcode & 0x80 != 0 else { return nil }
        let result = bytes[3]
        if result == ResultCode.unsupportedVersion.rawValue { return .unsupportedVersion(answerVersion) }
        guard opcode & 0x7F == mapOpcode else { return .other(opcode: opcode & 0x7F) }
        guard bytes.count >= mapSize else { return nil }
        let lifetime = bytes.readUInt32(4), epoch = bytes.readUInt32(8)
        let nonce = Array(bytes[24..<36])
        guard bytes[36] == udp else { return .other(opcode: opcode & 0x7F) }
        let internalPort = bytes.readUInt16(40), externalPort = bytes.readUInt16(42)
        let address = Array(bytes[44..<60])
        let host: PeerAddress.Host
        if address[0..<10].allSatisfy({ $0 == 0 }), address[10] == 0xFF, address[11] == 0xFF {
            host = .ipv4(bytes.readUInt32(56))
        } else {
            host = PeerAddress(ipv6: address, port: 0).host
        }
        return .map(
            result: result, lifetime: lifetime, epoch: epoch, nonce: nonce, internalPort: internalPort,
            externalPort: externalPort, external: host)
    }

    static func ipv4Mapped(_ address: UInt32) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 10) + [0xFF, 0xFF]
        bytes.appendBigEndian(address)
        return bytes
    }
}

extension Array where Element == UInt8 {
    mutating func appendBigEndian(_ value: UInt32) {
        append(contentsOf: [
            UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF),
        ])
    }

    mutating func appendBigEndian(_ value: UInt16) {
        append(contentsOf: [UInt8(value >> 8), UInt8(value & 0xFF)])
    }

    /// The big-endian value at `offset` (the caller checked the length).
    func readUInt32(_ offset: Int) -> UInt32 {
        self[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    func readUInt16(_ offset: Int) -> UInt16 {
        UInt16(self[offset]) << 8 | UInt16(self[offset + 1])
    }
}
