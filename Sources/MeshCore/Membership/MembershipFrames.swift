import MeshCrypto
import NIOCore

// Frame bodies of the membership protocol (Docs/PROTOCOL.md §3.2).

/// SWIM ping: "are you there?" In a hello datagram `target` names the member meant, so a reused
/// address cannot answer for someone else. In a pairwise datagram only the member meant can open
/// it, so the target is left out (nil): 16 bytes less on the most frequent datagram there is.
package struct Probe: WireBody {
    package var sequence: UInt64
    package var target: NodeID?
    package init(sequence: UInt64, target: NodeID?) { self.sequence = sequence; self.target = target }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        sequence = try buffer.readWire(UInt64.self, "probe sequence")
        target = buffer.readableBytes == 0 ? nil : try NodeID(decoding: &buffer)
    }
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(sequence)
        target?.encode(into: &buffer)
    }
}

/// The answer to a probe, sent to the prober directly or relayed by an indirect prober. `target`
/// is the member that was probed; nil in a pairwise datagram, whose key names its sender.
package struct ProbeAck: WireBody {
    package var sequence: UInt64
    package var target: NodeID?
    package init(sequence: UInt64, target: NodeID?) { self.sequence = sequence; self.target = target }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        sequence = try buffer.readWire(UInt64.self, "ack sequence")
        target = buffer.readableBytes == 0 ? nil : try NodeID(decoding: &buffer)
    }
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(sequence)
        target?.encode(into: &buffer)
    }
}

/// Lifeguard's nack: an indirect prober heard nothing from the target, but it is itself alive,
/// which tells the requester its own link is fine.
package struct ProbeNack: WireBody {
    package var sequence: UInt64
    package var target: NodeID
    package init(sequence: UInt64, target: NodeID) { self.sequence = sequence; self.target = target }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        sequence = try buffer.readWire(UInt64.self, "nack sequence")
        target = try NodeID(decoding: &buffer)
    }
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(sequence)
        target.encode(into: &buffer)
    }
}

/// SWIM ping-req: "probe `target` at `address` for me and relay its ack".
package struct ProbeRequest: WireBody {
    package var sequence: UInt64
    package var target: NodeID
    package var address: PeerAddress
    package init(sequence: UInt64, target: NodeID, address: PeerAddress) {
        self.sequence = sequence
        self.target = target
        self.address = address
    }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        sequence = try buffer.readWire(UInt64.self, "probe request sequence")
        target = try NodeID(decoding: &buffer)
        address = try PeerAddress(decoding: &buffer)
    }
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(sequence)
        target.encode(into: &buffer)
        address.encode(into: &buffer)
    }
}

/// "`accuser` suspects `member` at `incarnation`" (and likewise for dead).
package struct Accusation: WireBody {
    package var member: NodeID
    package var incarnation: UInt64
    package var accuser: NodeID
    package init(member: NodeID, incarnation: UInt64, accuser: NodeID) {
        self.member = member
        self.incarnation = incarnation
        self.accuser = accuser
    }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        member = try NodeID(decoding: &buffer)
        incarnation = try buffer.readWire(UInt64.self, "accusation incarnation")
        accuser = try NodeID(decoding: &buffer)
    }
    package func encode(into buffer: inout ByteBuffer) {
        member.encode(into: &buffer)
        buffer.writeInteger(incarnation)
        accuser.encode(into: &buffer)
    }
}

/// A member's signed goodbye: only the member itself can say it left.
package struct Departure: WireBody {
    static let signingDomain = Array("groupmesh leave v1".utf8)
    package var member: NodeID
    package var incarnation: UInt64
    package var signature: [UInt8]

    package init(member: NodeID, incarnation: UInt64, signature: [UInt8] = []) {
        self.member = member
        self.incarnation = incarnation
        self.signature = signature
    }

    package var signedBytes: [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(Self.signingDomain)
        member.encode(into: &buffer)
        buffer.writeInteger(incarnation)
        return Array(buffer.readableBytesView)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        member = try NodeID(decoding: &buffer)
        incarnation = try buffer.readWire(UInt64.self, "departure incarnation")
        signature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "departure signature")
    }
    package func encode(into buffer: inout ByteBuffer) {
        member.encode(into: &buffer)
        buffer.writeInteger(incarnation)
        buffer.writeBytes(signature)
    }
}

/// "Send me your whole member list" (join and anti-entropy); the sender's own list travels
/// beside it as ordinary alive/suspect/dead/left frames.
package struct SyncRequest: WireBody {
    package var isJoin: Bool
    package init(isJoin: Bool) { self.isJoin = isJoin }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let flags = try buffer.readWire(UInt8.self, "sync flags")
        guard flags <= 1 else { throw .invalidField(what: "sync flags") }
        isJoin = flags == 1
    }
    package func encode(into buffer: inout ByteBuffer) { buffer.writeInteger(UInt8(isJoin ? 1 : 0)) }
}

extension NodeID {
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(high)
        buffer.writeInteger(low)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let high = try buffer.readWire(UInt64.self, "node id")
        let low = try buffer.readWire(UInt64.self, "node id")
        self.init(high: high, low: low)
    }
}

extension Frame {
    /// The member a membership update is about.
    var membershipSubject: NodeID? {
        switch self {
        case let .alive(record): return record.id
        case let .suspect(accusation), let .dead(accusation): return accusation.member
        case let .left(departure): return departure.member
        default: return nil
        }
    }

    /// The frame as a hello datagram must carry it: a probe of `target`, an ack of `acker`'s,
    /// named (a pairwise one leaves them to the key).
    func namingProbeTarget(_ target: NodeID, acker: NodeID) -> Frame {
        switch self {
        case let .probe(probe) where probe.target == nil:
            return .probe(Probe(sequence: probe.sequence, target: target))
        case let .probeAck(ack) where ack.target == nil:
            return .probeAck(ProbeAck(sequence: ack.sequence, target: acker))
        default:
            return self
        }
    }

    /// A probe or its answer: what makes a pairwise datagram membership's.
    package var isProbeOrAck: Bool {
        switch self {
        case .probe, .probeAck: return true
        default: return false
        }
    }
}
