import MeshCrypto
import NIOCore

/// "I hear from this member nothing of its own: introduce us" (frame 0x53), sent pairwise to a
/// member both sides reach (PROTOCOL.md §1c).
public struct PunchRequest: WireBody {
    public var target: NodeID

    public init(target: NodeID) {
        self.target = target
    }

    public init(decoding buffer: inout ByteBuffer) throws(WireError) {
        target = try NodeID(decoding: &buffer)
    }

    public func encode(into buffer: inout ByteBuffer) {
        target.encode(into: &buffer)
    }
}

/// "Send to `peer` at these addresses now; it is told the same of you" (frame 0x54): the
/// mutual member's answer to a `PunchRequest`, sent to both sides at the same moment. The
/// addresses are where that member sees the peer's datagrams come from, then the peer's record's.
public struct PunchIntroduction: WireBody {
    public static let maxAddresses = MemberRecord.maxAddresses

    public var peer: NodeID
    public var addresses: [PeerAddress]

    public init(peer: NodeID, addresses: [PeerAddress]) {
        self.peer = peer
        self.addresses = Array(addresses.prefix(Self.maxAddresses))
    }

    public init(decoding buffer: inout ByteBuffer) throws(WireError) {
        peer = try NodeID(decoding: &buffer)
        addresses = try PeerAddress.decodeList(from: &buffer, atMost: Self.maxAddresses, "introduction address count")
    }

    public func encode(into buffer: inout ByteBuffer) {
        peer.encode(into: &buffer)
        PeerAddress.encode(addresses, into: &buffer)
    }
}

/// One datagram of a simultaneous open (frame 0x55), sealed pairwise: its arrival, like any
/// authenticated datagram of the peer, fixes the path to where it came from. A punch that is not
/// a reply is answered with one (a reply), so each side learns the path even if only one
/// direction got through first; replies and keepalives are not answered.
public struct Punch: WireBody {
    public var token: UInt64
    public var isReply: Bool

    public init(token: UInt64, isReply: Bool) {
        self.token = token
        self.isReply = isReply
    }

    public init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt64.self, "punch token")
        let flags = try buffer.readWire(UInt8.self, "punch flags")
        guard flags <= 1 else { throw .invalidField(what: "punch flags") }
        isReply = flags == 1
    }

    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(token)
        buffer.writeInteger(UInt8(isReply ? 1 : 0))
    }
}
