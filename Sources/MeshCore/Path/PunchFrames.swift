import MeshCrypto
import NIOCore

/// "I hear from this member nothing of its own: introduce us" (frame 0x53), sent pairwise to a
/// member both sides reach (PROTOCOL.md §1c).
package struct PunchRequest: WireBody {
    package var target: NodeID

    package init(target: NodeID) {
        self.target = target
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        target = try NodeID(decoding: &buffer)
    }

    package func encode(into buffer: inout ByteBuffer) {
        target.encode(into: &buffer)
    }
}

/// "Send to `peer` at these addresses now; it is told the same of you" (frame 0x54): the
/// mutual member's answer to a `PunchRequest`, sent to both sides at the same moment. The
/// addresses are where that member sees the peer's datagrams come from, then the peer's record's.
package struct PunchIntroduction: WireBody {
    package static let maxAddresses = MemberRecord.maxAddresses

    package var peer: NodeID
    package var addresses: [PeerAddress]

    package init(peer: NodeID, addresses: [PeerAddress]) {
        self.peer = peer
        self.addresses = Array(addresses.prefix(Self.maxAddresses))
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        peer = try NodeID(decoding: &buffer)
        addresses = try PeerAddress.decodeList(from: &buffer, atMost: Self.maxAddresses, "introduction address count")
    }

    package func encode(into buffer: inout ByteBuffer) {
        peer.encode(into: &buffer)
        PeerAddress.encode(addresses, into: &buffer)
    }
}

/// One datagram of a simultaneous open (frame 0x55), sealed pairwise: its arrival, like any
/// authenticated datagram of the peer, fixes the path to where it came from. A punch that is not
/// a reply is answered with one (a reply), so each side learns the path even if only one
/// direction got through first; replies and keepalives are not answered.
package struct Punch: WireBody {
    package var token: UInt64
    package var isReply: Bool

    package init(token: UInt64, isReply: Bool) {
        self.token = token
        self.isReply = isReply
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt64.self, "punch token")
        let flags = try buffer.readWire(UInt8.self, "punch flags")
        guard flags <= 1 else { throw .invalidField(what: "punch flags") }
        isReply = flags == 1
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(token)
        buffer.writeInteger(UInt8(isReply ? 1 : 0))
    }
}
