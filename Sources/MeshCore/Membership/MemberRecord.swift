import MeshCrypto
import NIOCore

/// What a member says about itself: who it is, where it listens, its incarnation and its
/// current boot's ephemeral key, and whether it carries datagrams for others, signed with its
/// identity key so no one else can forge it.
package struct MemberRecord: Equatable, Sendable, SignedStatement {
    package static let maxNameBytes = 64
    package static let maxAddresses = 4
    package static let signingDomain = Array("groupmesh member record v1".utf8)

    package var signingKey: PublicSigningKey
    package var name: String
    package var addresses: [PeerAddress]
    package var incarnation: UInt64
    package var bootID: UInt64
    package var ephemeralKey: [UInt8]
    /// Whether this member carries sealed datagrams between two others (`--no-relay` says no).
    package var relays: Bool
    package var signature: [UInt8]

    package var id: NodeID { signingKey.nodeID }

    /// The longest prefix of whole characters that fits `maxNameBytes` of UTF-8.
    static func truncated(_ name: String) -> String {
        var result = ""
        var bytes = 0
        for character in name {
            let size = character.utf8.count
            guard bytes + size <= maxNameBytes else { break }
            result.append(character)
            bytes += size
        }
        return result
    }

    package init(
        signingKey: PublicSigningKey, name: String, addresses: [PeerAddress], incarnation: UInt64,
        bootID: UInt64, ephemeralKey: [UInt8], relays: Bool = true, signature: [UInt8] = []
    ) {
        self.signingKey = signingKey
        self.name = Self.truncated(name)
        self.addresses = Array(addresses.prefix(Self.maxAddresses))
        self.incarnation = incarnation
        self.bootID = bootID
        self.ephemeralKey = ephemeralKey
        self.relays = relays
        self.signature = signature
    }

    package func encodeUnsigned(into buffer: inout ByteBuffer) {
        buffer.writeBytes(signingKey.bytes)
        let nameBytes = Array(name.utf8)
        buffer.writeInteger(UInt8(nameBytes.count))
        buffer.writeBytes(nameBytes)
        PeerAddress.encode(addresses, into: &buffer)
        buffer.writeInteger(incarnation)
        buffer.writeInteger(bootID)
        buffer.writeBytes(ephemeralKey)
        buffer.writeInteger(UInt8(relays ? 0 : Self.refusesRelaying))
    }

    /// Flag bits; the others must be zero.
    static let refusesRelaying: UInt8 = 1
}

extension MemberRecord: WireBody {
    package func encode(into buffer: inout ByteBuffer) {
        encodeUnsigned(into: &buffer)
        buffer.writeBytes(signature)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let keyBytes = try buffer.readWireBytes(PublicSigningKey.byteCount, "record signing key")
        // safe: exactly 32 bytes were read
        let key = try! PublicSigningKey(bytes: keyBytes)  // safe: exactly 32 bytes were read
        let nameLength = try buffer.readWire(UInt8.self, "record name length")
        guard nameLength <= Self.maxNameBytes else { throw .invalidField(what: "record name length") }
        let name = String(decoding: try buffer.readWireBytes(Int(nameLength), "record name"), as: UTF8.self)
        let addresses = try PeerAddress.decodeList(from: &buffer, atMost: Self.maxAddresses, "record address count")
        let incarnation = try buffer.readWire(UInt64.self, "record incarnation")
        let boot = try buffer.readWire(UInt64.self, "record boot id")
        let ephemeral = try buffer.readWireBytes(EphemeralKeyPair.byteCount, "record ephemeral key")
        let flags = try buffer.readWire(UInt8.self, "record flags")
        guard flags & ~Self.refusesRelaying == 0 else { throw .invalidField(what: "record flags") }
        let signature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "record signature")
        self.init(
            signingKey: key, name: name, addresses: addresses, incarnation: incarnation, bootID: boot,
            ephemeralKey: ephemeral, relays: flags & Self.refusesRelaying == 0, signature: signature)
    }
}

extension PeerAddress {
    /// `family (1: 4|6) | address (4|16) | port (2)`, as in invites.
    package func encode(into buffer: inout ByteBuffer) {
        let bytes = hostBytes
        buffer.writeInteger(UInt8(bytes.count == 4 ? 4 : 6))
        buffer.writeBytes(bytes)
        buffer.writeInteger(port)
    }

    /// `count (1) | address…`, at most `limit` of them (member records, introductions).
    static func encode(_ addresses: [PeerAddress], into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(addresses.count))
        for address in addresses { address.encode(into: &buffer) }
    }

    static func decodeList(
        from buffer: inout ByteBuffer, atMost limit: Int, _ what: String
    ) throws(WireError) -> [PeerAddress] {
        let count = try buffer.readWire(UInt8.self, what)
        guard count <= limit else { throw .invalidField(what: what) }
        var addresses: [PeerAddress] = []
        for _ in 0..<count { addresses.append(try PeerAddress(decoding: &buffer)) }
        return addresses
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let family = try buffer.readWire(UInt8.self, "address family")
        switch family {
        case 4:
            let bytes = try buffer.readWireBytes(4, "IPv4 address")
            self.init(ipv4: bytes, port: try buffer.readWire(UInt16.self, "port"))
        case 6:
            let bytes = try buffer.readWireBytes(16, "IPv6 address")
            self.init(ipv6: bytes, port: try buffer.readWire(UInt16.self, "port"))
        default:
            throw .invalidField(what: "address family \(family)")
        }
    }
}
