import MeshCrypto
import NIOCore

/// Names one add of an attachment (GroupSessionJournal's `Attachment.ID`): 128 random bits
/// chosen by the member that adds it, so the same bytes added twice are two attachments. Their
/// content stays one: chunks are stored and sent once, by the SHA-256 manifest.
package struct AttachmentID: Hashable, Comparable, Sendable, CustomStringConvertible {
    package static let byteCount = 16
    package let high: UInt64, low: UInt64

    package init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    package init?(hex: some StringProtocol) {
        guard let id = NodeID(hex: hex) else { return nil }
        self.init(high: id.high, low: id.low)
    }

    /// The id every member gives to the adds of `content` made before adds had ids of their own
    /// (journal operations of format 1): derived from the content, so that all agree on it.
    package init(legacyContent content: SHA256Digest) {
        let digest = SHA256Digest.hashing(Array("groupmesh attachment id v1".utf8) + content.bytes)
        self.init(high: digest.w0, low: digest.w1)
    }

    package static func random(using random: inout some RandomNumberGenerator) -> AttachmentID {
        AttachmentID(high: random.next(), low: random.next())
    }

    package static func < (lhs: AttachmentID, rhs: AttachmentID) -> Bool { (lhs.high, lhs.low) < (rhs.high, rhs.low) }

    /// 32 lowercase hex characters.
    package var hex: String { Hex.encode(NodeID(high: high, low: low).bytes) }
    package var description: String { hex }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(high)
        buffer.writeInteger(low)
    }

    init(decoding buffer: inout ByteBuffer) throws(WireError) {
        high = try buffer.readWire(UInt64.self, "attachment id")
        low = try buffer.readWire(UInt64.self, "attachment id")
    }
}
