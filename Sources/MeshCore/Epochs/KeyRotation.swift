import MeshCrypto
import NIOCore

/// A member's signed word that the session moves from one key epoch to the next without the
/// members in `removed` (Docs/SECURITY.md §Key epochs). Sessions are named by their ids, so a
/// rotation chains one epoch to the next without a global counter.
///
/// `roster` names the members owed the new epoch, as the rotating member knew them: every
/// member that hands the epoch on checks it, so a node nobody knew at the rotation (a newcomer
/// with an old invite, however it got into someone's view) is never handed it. Members are
/// named by the first 8 bytes of their id: forging an identity whose id starts like a rostered
/// member's costs about 2^64 / 48 hashes. The whole rotation must fit a hello datagram with the
/// handover around it, hence the caps.
package struct KeyRotation: WireBody, Hashable, SignedStatement {
    package static let signingDomain = Array("groupmesh key rotation v2".utf8)
    package static let maxRemoved = 4
    package static let maxRoster = 49

    package var previousSession: SessionID
    package var nextSession: SessionID
    package var removed: [NodeID]
    /// The first 8 bytes of each member owed the new epoch, sorted.
    package var roster: [UInt64]
    package var signingKey: PublicSigningKey
    package var signature: [UInt8]

    /// The member that rotated: its node id is the hash of the signing key.
    package var author: NodeID { signingKey.nodeID }

    package static func rosterEntry(_ id: NodeID) -> UInt64 { id.high }

    /// Whether `member` is owed the new epoch: on the roster, not removed.
    package func owes(_ member: NodeID) -> Bool {
        !removed.contains(member) && roster.contains(Self.rosterEntry(member))
    }

    package init(
        previousSession: SessionID, nextSession: SessionID, removed: [NodeID], roster: [UInt64] = [],
        signingKey: PublicSigningKey, signature: [UInt8] = []
    ) {
        self.previousSession = previousSession
        self.nextSession = nextSession
        self.removed = removed
        self.roster = roster
        self.signingKey = signingKey
        self.signature = signature
    }

    package func encodeUnsigned(into buffer: inout ByteBuffer) {
        buffer.writeInteger(previousSession.value)
        buffer.writeInteger(nextSession.value)
        buffer.writeInteger(UInt8(removed.count))
        for id in removed { id.encode(into: &buffer) }
        buffer.writeInteger(UInt8(roster.count))
        for entry in roster { buffer.writeInteger(entry) }
        buffer.writeBytes(signingKey.bytes)
    }

    package func encode(into buffer: inout ByteBuffer) {
        encodeUnsigned(into: &buffer)
        buffer.writeBytes(signature)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        previousSession = SessionID(value: try buffer.readWire(UInt64.self, "rotation previous session"))
        nextSession = SessionID(value: try buffer.readWire(UInt64.self, "rotation next session"))
        let count = try buffer.readWire(UInt8.self, "rotation removed count")
        guard count <= Self.maxRemoved else { throw .invalidField(what: "rotation removed count") }
        removed = []
        for _ in 0..<count { removed.append(try NodeID(decoding: &buffer)) }
        let rosterCount = try buffer.readWire(UInt8.self, "rotation roster count")
        guard rosterCount <= Self.maxRoster else { throw .invalidField(what: "rotation roster count") }
        roster = []
        for _ in 0..<rosterCount { roster.append(try buffer.readWire(UInt64.self, "rotation roster entry")) }
        let keyBytes = try buffer.readWireBytes(PublicSigningKey.byteCount, "rotation signing key")
        signingKey = try! PublicSigningKey(bytes: keyBytes)  // safe: exactly 32 bytes were read
        signature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "rotation signature")
    }
}
