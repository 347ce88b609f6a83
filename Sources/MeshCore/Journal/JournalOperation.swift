import MeshCrypto
import NIOCore

/// 16 bytes naming a journal operation: the start of the SHA-256 of its signed encoding.
package struct OperationID: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let high: UInt64, low: UInt64
    package init(high: UInt64, low: UInt64) { self.high = high; self.low = low }
    package static func < (lhs: OperationID, rhs: OperationID) -> Bool { (lhs.high, lhs.low) < (rhs.high, rhs.low) }
    package var description: String { Hex.encode(NodeID(high: high, low: low).bytes) }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(high)
        buffer.writeInteger(low)
    }

    init(decoding buffer: inout ByteBuffer) throws(WireError) {
        high = try buffer.readWire(UInt64.self, "operation id")
        low = try buffer.readWire(UInt64.self, "operation id")
    }
}

/// One signed change to the journal: an add (with the attachment's id, its content's size, chunk
/// count and the metadata of this add) or a remove (naming the adds its author had seen). Anyone
/// may forward an operation; only its author can have made it.
///
/// Two formats (PROTOCOL.md §6): format 2 carries the attachment's own id; format 1, from before
/// attachments had ids of their own, names only the content, and its id is derived from it
/// (`AttachmentID(legacyContent:)`). Both are read, so a journal log and members of either time
/// keep everything; each keeps its own encoding, which its signature and operation id cover.
package struct JournalOperation: Sendable, Equatable {
    package enum Kind: UInt8, Sendable { case add = 1, remove = 2 }
    package static let maxMetadataBytes = 64 * 1024
    package static let maxObservedAdds = 1024
    static let legacyDomain = Array("groupmesh journal op v1".utf8)
    static let domain = Array("groupmesh journal op v2".utf8)
    /// Format 2's kinds on the wire are format 1's plus this.
    static let formatTwoKindOffset: UInt8 = 2

    package var kind: Kind
    /// Format 1: no attachment id of its own.
    package var isLegacy: Bool
    /// The attachment this add makes, or this remove removes.
    package var attachmentID: AttachmentID
    /// The content's manifest digest (SHA-256).
    package var attachment: SHA256Digest
    package var author: PublicSigningKey
    /// Lamport clock: orders adds for "the latest add's metadata wins".
    package var clock: UInt64
    package var size: UInt64
    package var chunkCount: UInt32
    package var metadata: [UInt8]
    package var observedAdds: [OperationID]
    package var signature: [UInt8]

    /// `attachmentID` nil: format 1, the id derived from the content.
    package init(
        kind: Kind, attachmentID: AttachmentID?, attachment: SHA256Digest, author: PublicSigningKey,
        clock: UInt64, size: UInt64 = 0, chunkCount: UInt32 = 0, metadata: [UInt8] = [],
        observedAdds: [OperationID] = [], signature: [UInt8] = []
    ) {
        self.kind = kind
        isLegacy = attachmentID == nil
        self.attachmentID = attachmentID ?? AttachmentID(legacyContent: attachment)
        self.attachment = attachment
        self.author = author
        self.clock = clock
        self.size = size
        self.chunkCount = chunkCount
        self.metadata = metadata
        self.observedAdds = observedAdds
        self.signature = signature
    }

    package var authorID: NodeID { author.nodeID }

    package var signedBytes: [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(isLegacy ? Self.legacyDomain : Self.domain)
        encodeUnsigned(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    package var id: OperationID {
        let digest = SHA256Digest.hashing(signedBytes + signature)
        return OperationID(high: digest.w0, low: digest.w1)
    }

    package func signed(by authority: some RecordAuthority) -> JournalOperation {
        var copy = self
        copy.signature = authority.sign(signedBytes)
        return copy
    }

    /// Well-formed, within limits, and signed by its author.
    package func isValid(_ authority: some RecordAuthority) -> Bool {
        metadata.count <= Self.maxMetadataBytes && observedAdds.count <= Self.maxObservedAdds
            && (kind == .add || metadata.isEmpty)
            && authority.isValid(signature: signature, message: signedBytes, signingKey: author)
    }

    private func encodeUnsigned(into buffer: inout ByteBuffer) {
        if isLegacy {
            buffer.writeInteger(kind.rawValue)
        } else {
            buffer.writeInteger(kind.rawValue + Self.formatTwoKindOffset)
            attachmentID.encode(into: &buffer)
        }
        buffer.writeBytes(attachment.bytes)
        buffer.writeBytes(author.bytes)
        buffer.writeInteger(clock)
        buffer.writeInteger(size)
        buffer.writeInteger(chunkCount)
        buffer.writeInteger(UInt32(metadata.count))
        buffer.writeBytes(metadata)
        buffer.writeInteger(UInt16(observedAdds.count))
        for id in observedAdds { id.encode(into: &buffer) }
    }
}

extension JournalOperation: WireBody {
    package func encode(into buffer: inout ByteBuffer) {
        encodeUnsigned(into: &buffer)
        buffer.writeBytes(signature)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let kindByte = try buffer.readWire(UInt8.self, "operation kind")
        let legacy = kindByte <= Self.formatTwoKindOffset
        guard let kind = Kind(rawValue: legacy ? kindByte : kindByte &- Self.formatTwoKindOffset) else {
            throw .invalidField(what: "operation kind")
        }
        let attachmentID = legacy ? nil : try AttachmentID(decoding: &buffer)
        let attachment = try buffer.readDigest("attachment content")
        let authorBytes = try buffer.readWireBytes(32, "operation author")
        guard let author = try? PublicSigningKey(bytes: authorBytes) else {
            throw .invalidField(what: "operation author")
        }
        let clock = try buffer.readWire(UInt64.self, "operation clock")
        let size = try buffer.readWire(UInt64.self, "attachment size")
        let chunkCount = try buffer.readWire(UInt32.self, "attachment chunk count")
        let metadataLength = try buffer.readWire(UInt32.self, "metadata length")
        guard metadataLength <= Self.maxMetadataBytes else { throw .invalidField(what: "metadata length") }
        let metadata = try buffer.readWireBytes(Int(metadataLength), "metadata")
        let observedCount = try buffer.readWire(UInt16.self, "observed count")
        guard observedCount <= Self.maxObservedAdds else { throw .invalidField(what: "observed count") }
        var observed: [OperationID] = []
        for _ in 0..<observedCount { observed.append(try OperationID(decoding: &buffer)) }
        let signature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "operation signature")
        self.init(
            kind: kind, attachmentID: attachmentID, attachment: attachment, author: author, clock: clock, size: size,
            chunkCount: chunkCount, metadata: metadata, observedAdds: observed, signature: signature)
    }
}
