/// NAT-PMP (RFC 6886) as a client speaks it: the external address request, a UDP mapping
/// request, and the gateway's answers to them.
package enum NATPMPMessage {
    package static let serverPort: UInt16 = 5351
    static let addressOpcode: UInt8 = 0
    static let mapUDPOpcode: UInt8 = 1

    package static let addressRequest: [UInt8] = [0, addressOpcode]

    /// Maps `internalPort` for `lifetime` seconds (0 deletes the mapping), asking for `suggestedPort`.
    package static func mapRequest(internalPort: UInt16, suggestedPort: UInt16, lifetime: UInt32) -> [UInt8] {
        var bytes: [UInt8] = [0, mapUDPOpcode, 0, 0]
        bytes.appendBigEndian(internalPort)
        bytes.appendBigEndian(suggestedPort)
        bytes.appendBigEndian(lifetime)
        return bytes
    }

    package enum Answer: Equatable, Sendable {
        /// The answer to the external address request.
        case address(result: UInt16, epoch: UInt32, external: UInt32)
        /// The answer to a UDP mapping request.
        case map(result: UInt16, epoch: UInt32, internalPort: UInt16, externalPort: UInt16, lifetime: UInt32)
        /// An error answer too short to carry the rest (result only), or another opcode's answer.
        case other(opcode: UInt8, result: UInt16)
    }

    /// The result codes of RFC 6886 §3.5.
    package static func reason(_ result: UInt16) -> String {
        switch result {
        case 0: "success"
        case 1: "unsupported version"
        case 2: "not authorized or refused"
        case 3: "network failure"
        case 4: "out of resources"
        case 5: "unsupported opcode"
        default: "result \(result)"
        }
    }

    /// Decodes an answer; nil for what is none (another version, a request, too short).
    package static func decode(_ bytes: [UInt8]) -> Answer? {
        guard bytes.count >= 4, bytes.count <= 1100, bytes[0] == 0, bytes[1] & 0x80 != 0 else { return nil }
        let opcode = bytes[1] & 0x7F
        let result = bytes.readUInt16(2)
        switch opcode {
        case addressOpcode where bytes.count >= 12:
            return .address(result: result, epoch: bytes.readUInt32(4), external: bytes.readUInt32(8))
        case mapUDPOpcode where bytes.count >= 16:
            return .map(
                result: result, epoch: bytes.readUInt32(4), internalPort: bytes.readUInt16(8),
                externalPort: bytes.readUInt16(10), lifetime: bytes.readUInt32(12))
        default:
            return .other(opcode: opcode, result: result)
        }
    }
}
