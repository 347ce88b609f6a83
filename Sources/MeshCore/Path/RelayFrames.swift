import MeshCrypto
import NIOCore

/// A whole sealed datagram carried for two members by a third (PROTOCOL.md §1d): to the relay as
/// `relayForward` (frame 0x56, `peer` is where it goes), from the relay as `relayDelivery` (frame
/// 0x57, `peer` is whom it came from). The datagram inside is sealed with the pair's own key:
/// the relay can count it, drop it or delay it, but not read, change or forge it.
package struct RelayedDatagram: WireBody {
    /// A pairwise datagram as large as any a node receives: what a proven path carries.
    package static let maxDatagramSize = DatagramCodec.Configuration().maxReceivedDatagramSize
    /// The smallest sealed datagram: a header and a tag around one frame header.
    package static let minDatagramSize =
        DatagramHeader.fixedLength + PacketSealer.tagByteCount + FrameCodec.headerLength
    /// What one hop of relaying adds to a datagram: the relay's header and tag, the frame's
    /// header and the member id.
    package static let overhead =
        DatagramHeader.fixedLength + PacketSealer.tagByteCount + FrameCodec.headerLength + NodeID.byteCount

    package var peer: NodeID
    package var datagram: ByteBuffer

    package init(peer: NodeID, datagram: ByteBuffer) {
        self.peer = peer
        self.datagram = datagram
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        peer = try NodeID(decoding: &buffer)
        // The rest of the frame: its length says how long.
        let length = buffer.readableBytes
        guard length >= Self.minDatagramSize, length <= Self.maxDatagramSize,
            let datagram = buffer.readSlice(length: length)
        else {
            throw .invalidField(what: "relayed datagram length")
        }
        self.datagram = datagram
    }

    package func encode(into buffer: inout ByteBuffer) {
        peer.encode(into: &buffer)
        buffer.writeImmutableBuffer(datagram)
    }
}

/// "I will not carry datagrams from you to `peer`" (frame 0x58): the relay's answer to a
/// `relayForward` it will not forward, at most once a second per pair, so that the sender picks
/// another relay at once instead of waiting for silence.
package struct RelayRefusal: WireBody {
    package enum Reason: UInt8, Sendable {
        /// This member does not relay (`--no-relay`).
        case disabled = 0
        /// `peer` is no member this relay reaches on a path of its own.
        case unreachable = 1
        /// This relay carries all it can for the pairs it has: ask one with room.
        case busy = 2
    }

    package var peer: NodeID
    package var reason: Reason

    package init(peer: NodeID, reason: Reason) {
        self.peer = peer
        self.reason = reason
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        peer = try NodeID(decoding: &buffer)
        let raw = try buffer.readWire(UInt8.self, "relay refusal reason")
        guard let reason = Reason(rawValue: raw) else { throw .invalidField(what: "relay refusal reason") }
        self.reason = reason
    }

    package func encode(into buffer: inout ByteBuffer) {
        peer.encode(into: &buffer)
        buffer.writeInteger(reason.rawValue)
    }
}
