import MeshCrypto
import NIOCore

/// "This session is over", signed by the member that ended it (GroupSession's `end()`). It
/// names the key epoch it ends, so it is good only while that epoch stands: a member removed
/// since, who lacks the epoch's key, can neither send it sealed nor make one that counts.
package struct SessionEnd: SignedStatement, WireBody, Sendable, Equatable {
    package static let signingDomain = Array("groupmesh session end v1".utf8)
    package static let byteCount = PublicSigningKey.byteCount + 8 + NodeIdentity.signatureByteCount

    package var signingKey: PublicSigningKey
    package var session: SessionID
    package var signature: [UInt8]

    package init(signingKey: PublicSigningKey, session: SessionID, signature: [UInt8] = []) {
        self.signingKey = signingKey
        self.session = session
        self.signature = signature
    }

    /// Who ended the session.
    package var author: NodeID { signingKey.nodeID }

    package func encodeUnsigned(into buffer: inout ByteBuffer) {
        buffer.writeBytes(signingKey.bytes)
        buffer.writeInteger(session.value)
    }

    package func encode(into buffer: inout ByteBuffer) {
        encodeUnsigned(into: &buffer)
        buffer.writeBytes(signature)
    }

    package var encoded: [UInt8] {
        var buffer = ByteBuffer()
        encode(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let keyBytes = try buffer.readWireBytes(PublicSigningKey.byteCount, "end signing key")
        let key = try! PublicSigningKey(bytes: keyBytes)  // safe: exactly 32 bytes were read
        let session = SessionID(value: try buffer.readWire(UInt64.self, "end session"))
        let signature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "end signature")
        self.init(signingKey: key, session: session, signature: signature)
    }
}
