import MeshCrypto
import NIOCore

/// A member's signed word that the session moves from one key epoch to the next without the
/// members in `removed` (Docs/SECURITY.md §Key epochs). Sessions are named by their ids, so a
/// rotation chains one epoch to the next without a global counter.
public struct KeyRotation: WireBody, Hashable {
    static let signingDomain = Array("groupmesh key rotation v1".utf8)
    public static let maxRemoved = 16

    public var previousSession: SessionID
    public var nextSession: SessionID
    public var removed: [NodeID]
    public var signingKey: PublicSigningKey
    public var signature: [UInt8]

    /// The member that rotated: its node id is the hash of the signing key.
    public var author: NodeID { signingKey.nodeID }

    public init(previousSession: SessionID, nextSession: SessionID, removed: [NodeID],
                signingKey: PublicSigningKey, signature: [UInt8] = []) {
        self.previousSession = previousSession
        self.nextSession = nextSession
        self.removed = removed
        self.signingKey = signingKey
        self.signature = signature
    }

    public var signedBytes: [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(Self.signingDomain)
        encodeUnsigned(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    public func signed(by authority: some RecordAuthority) -> KeyRotation {
        var copy = self
        copy.signingKey = authority.signingKey
        copy.signature = authority.sign(copy.signedBytes)
        return copy
    }

    public func hasValidSignature(_ authority: some RecordAuthority) -> Bool {
        authority.isValid(signature: signature, message: signedBytes, signingKey: signingKey)
    }

    private func encodeUnsigned(into buffer: inout ByteBuffer) {
        buffer.writeInteger(previousSession.value)
        buffer.writeInteger(nextSession.value)
        buffer.writeInteger(UInt8(removed.count))
        for id in removed { id.encode(into: &buffer) }
        buffer.writeBytes(signingKey.bytes)
    }

    public func encode(into buffer: inout ByteBuffer) {
        encodeUnsigned(into: &buffer)
        buffer.writeBytes(signature)
    }

    public init(decoding buffer: inout ByteBuffer) throws(WireError) {
        previousSession = SessionID(value: try buffer.readWire(UInt64.self, "rotation previous session"))
        nextSession = SessionID(value: try buffer.readWire(UInt64.self, "rotation next session"))
        let count = try buffer.readWire(UInt8.self, "rotation removed count")
        guard count <= Self.maxRemoved else { throw .invalidField(what: "rotation removed count") }
        removed = []
        for _ in 0..<count { removed.append(try NodeID(decoding: &buffer)) }
        let keyBytes = try buffer.readWireBytes(PublicSigningKey.byteCount, "rotation signing key")
        signingKey = try! PublicSigningKey(bytes: keyBytes)  // safe: exactly 32 bytes were read
        signature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "rotation signature")
    }
}
