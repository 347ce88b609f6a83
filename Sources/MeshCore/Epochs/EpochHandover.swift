import MeshCrypto
import NIOCore

/// A key epoch's secret handed to one member (frame 0x40), inside a hello datagram of the
/// epoch it leaves. The secret is sealed to the recipient's boot: with keys from `crypto_kx`
/// between the sender's and the recipient's ephemeral keys, bound to the earlier epoch's secret
/// under their own purpose. Whoever holds neither ephemeral secret (a removed member included)
/// cannot open it.
package struct EpochHandover: WireBody {
    package static let sealedSecretByteCount = SessionSecret.byteCount + PacketSealer.tagByteCount

    package var rotation: KeyRotation
    /// The member handing over; its signed record carries the ephemeral key the seal used.
    package var sender: MemberRecord
    package var recipient: NodeID
    package var recipientBoot: UInt64
    package var nonce: PacketNonce
    package var sealedSecret: [UInt8]

    package init(
        rotation: KeyRotation, sender: MemberRecord, recipient: NodeID, recipientBoot: UInt64,
        nonce: PacketNonce, sealedSecret: [UInt8]
    ) {
        self.rotation = rotation
        self.sender = sender
        self.recipient = recipient
        self.recipientBoot = recipientBoot
        self.nonce = nonce
        self.sealedSecret = sealedSecret
    }

    /// Seals `secret` for `recipient`'s boot. `previous` is the epoch both share now; the
    /// nonce comes from the caller (MeshCore draws no randomness).
    package static func seal(
        _ secret: SessionSecret, rotation: KeyRotation, previous: SessionSecret,
        sender: MemberRecord, local: EphemeralKeyPair, recipient: MemberRecord,
        nonce: PacketNonce
    ) -> EpochHandover? {
        guard
            let keys = PairwiseKeys.derive(
                session: previous, local: local, peerPublicKey: recipient.ephemeralKey,
                purpose: .epochHandover)
        else { return nil }
        var handover = EpochHandover(
            rotation: rotation, sender: sender, recipient: recipient.id,
            recipientBoot: recipient.bootID, nonce: nonce, sealedSecret: [])
        handover.sealedSecret = keys.sending.seal(secret.bytes, associatedData: handover.associatedData, nonce: nonce)
        return handover
    }

    /// The secret, if this handover was sealed for our boot by the holder of the sender
    /// record's ephemeral key, and names the session it opens.
    package func open(previous: SessionSecret, local: EphemeralKeyPair) -> SessionSecret? {
        guard
            let keys = PairwiseKeys.derive(
                session: previous, local: local, peerPublicKey: sender.ephemeralKey,
                purpose: .epochHandover),
            let bytes = keys.receiving.open(sealedSecret, associatedData: associatedData, nonce: nonce),
            let secret = try? SessionSecret(bytes: bytes),
            secret.sessionID == rotation.nextSession
        else { return nil }
        return secret
    }

    /// What the seal binds the secret to: the rotation, the sender and the recipient's boot.
    private var associatedData: [UInt8] {
        var buffer = ByteBuffer()
        rotation.encode(into: &buffer)
        sender.id.encode(into: &buffer)
        recipient.encode(into: &buffer)
        buffer.writeInteger(recipientBoot)
        return Array(buffer.readableBytesView)
    }

    package func encode(into buffer: inout ByteBuffer) {
        rotation.encode(into: &buffer)
        sender.encode(into: &buffer)
        recipient.encode(into: &buffer)
        buffer.writeInteger(recipientBoot)
        buffer.writeBytes(nonce.raw)
        buffer.writeBytes(sealedSecret)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        rotation = try KeyRotation(decoding: &buffer)
        sender = try MemberRecord(decoding: &buffer)
        recipient = try NodeID(decoding: &buffer)
        recipientBoot = try buffer.readWire(UInt64.self, "handover recipient boot")
        guard let nonce = PacketNonce(raw: try buffer.readWireBytes(PacketSealer.nonceByteCount, "handover nonce"))
        else {
            throw .invalidField(what: "handover nonce")
        }
        self.nonce = nonce
        sealedSecret = try buffer.readWireBytes(Self.sealedSecretByteCount, "handover sealed secret")
    }
}
