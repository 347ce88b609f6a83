import MeshCrypto
import NIOCore

/// The clear header every datagram starts with (Docs/PROTOCOL.md §2). It is the associated
/// data of the seal, so it is authenticated although it is not encrypted.
package struct DatagramHeader: Equatable, Sendable {
    package static let version: UInt8 = 1
    /// version, key kind, session id, sender, boot id, packet number.
    package static let fixedLength = 1 + 1 + 8 + NodeID.byteCount + 8 + 8

    /// Which key sealed the datagram.
    package enum KeyKind: UInt8, Sendable {
        /// The pairwise key of sender and receiver; the packet number is the nonce.
        case pairwise = 0
        /// The session's hello key, for datagrams sent before pairwise keys exist; a random
        /// 24-byte nonce follows the fixed header.
        case hello = 1
    }

    package var keyKind: KeyKind
    package var sessionID: SessionID
    package var sender: NodeID
    package var bootID: UInt64
    package var packetNumber: UInt64
    /// Present exactly when `keyKind == .hello`.
    package var helloNonce: PacketNonce?

    package init(
        keyKind: KeyKind, sessionID: SessionID, sender: NodeID, bootID: UInt64,
        packetNumber: UInt64, helloNonce: PacketNonce? = nil
    ) {
        self.keyKind = keyKind
        self.sessionID = sessionID
        self.sender = sender
        self.bootID = bootID
        self.packetNumber = packetNumber
        self.helloNonce = helloNonce
    }

    package var encodedLength: Int {
        Self.fixedLength + (keyKind == .hello ? PacketSealer.nonceByteCount : 0)
    }

    package var nonce: PacketNonce {
        helloNonce ?? .packetNumber(packetNumber)
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(Self.version)
        buffer.writeInteger(keyKind.rawValue)
        buffer.writeInteger(sessionID.value)
        buffer.writeInteger(sender.high)
        buffer.writeInteger(sender.low)
        buffer.writeInteger(bootID)
        buffer.writeInteger(packetNumber)
        if keyKind == .hello {
            // A hello key is shared by every member, so its nonces must be random: no fallback.
            precondition(helloNonce != nil, "a hello datagram needs a random nonce")
            buffer.writeBytes(helloNonce?.raw ?? [])
        }
    }

    /// Reads a header from the front of `buffer`, leaving the sealed payload readable.
    /// The version is checked first so that a future format is reported as such.
    package static func decode(_ buffer: inout ByteBuffer) -> Result<DatagramHeader, WireError> {
        guard let version = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else {
            return .failure(.truncated(what: "datagram header"))
        }
        guard version == Self.version else { return .failure(.unsupportedVersion(version)) }
        guard buffer.readableBytes >= fixedLength else { return .failure(.truncated(what: "datagram header")) }
        buffer.moveReaderIndex(forwardBy: 1)
        // safe: length checked above
        let kindByte = buffer.readInteger(as: UInt8.self)!
        guard let kind = KeyKind(rawValue: kindByte) else { return .failure(.unknownKeyKind(kindByte)) }
        let session = SessionID(value: buffer.readInteger()!)
        let sender = NodeID(high: buffer.readInteger()!, low: buffer.readInteger()!)
        let boot: UInt64 = buffer.readInteger()!
        let number: UInt64 = buffer.readInteger()!
        var nonce: PacketNonce?
        if kind == .hello {
            guard let raw = buffer.readBytes(length: PacketSealer.nonceByteCount) else {
                return .failure(.truncated(what: "hello nonce"))
            }
            nonce = PacketNonce(raw: raw)
        }
        return .success(
            DatagramHeader(
                keyKind: kind, sessionID: session, sender: sender, bootID: boot,
                packetNumber: number, helloNonce: nonce))
    }
}
