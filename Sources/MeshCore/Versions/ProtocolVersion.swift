import NIOCore

/// The protocol a node speaks, beside the datagram format (whose version byte stays 1, so that
/// every release opens every other's datagrams). Protocol 1 is release 0.9.0's, which says
/// nothing of it; from 2 on a node tells each member its own in a `protocolVersion` frame
/// (PROTOCOL.md §3, "Protocol versions").
package enum ProtocolVersion {
    /// The protocol this release speaks.
    package static let current = 2
    /// The oldest one it still speaks to a member: the previous release's.
    package static let oldestSpoken = current - 1
    /// What a member that never told us speaks (release 0.9.0 knows no version frame).
    package static let unannounced = 1
}

/// The versions one node speaks: `oldest` up to `current`.
package struct SpokenVersions: Equatable, Sendable, CustomStringConvertible {
    package var current: Int
    package var oldest: Int

    package init(current: Int, oldest: Int) {
        self.current = current
        self.oldest = oldest
    }

    /// This release's.
    package static let this = SpokenVersions(current: ProtocolVersion.current, oldest: ProtocolVersion.oldestSpoken)
    /// A member that never told us its versions.
    package static let unannounced = SpokenVersions(
        current: ProtocolVersion.unannounced, oldest: ProtocolVersion.unannounced)

    /// The newest version both speak, or nil when the ranges do not meet (one side cannot follow).
    package func common(with other: SpokenVersions) -> Int? {
        let newest = min(current, other.current)
        return newest >= max(oldest, other.oldest) ? newest : nil
    }

    package var description: String { "protocol \(current) (oldest \(oldest))" }
}

/// `protocolVersion` (0x5A): the versions its sender speaks, alone in a pairwise datagram (a
/// release that does not know the frame drops only that datagram) or with the sender's
/// introduction. `isAnswer` when it answers the member's own, which is then not answered again.
/// `heldDoor` names the door of the recipient's introduction that the sender holds (the first 8
/// bytes of its id): until it is the recipient's own, the recipient asks again, with it beside.
/// `founding` is the session's founding id as the sender holds it, with the sender's nonce when
/// it founded the session (PROTOCOL.md §3, "Founding"): release 0.10.0 passes both over.
package struct VersionAnnouncement: WireBody {
    package var versions: SpokenVersions
    package var isAnswer: Bool
    package var heldDoor: UInt64?
    package var founding: FoundingID?
    /// Only beside `founding`.
    package var foundingNonce: [UInt8]?

    package init(
        versions: SpokenVersions, isAnswer: Bool, heldDoor: UInt64? = nil, founding: FoundingID? = nil,
        foundingNonce: [UInt8]? = nil
    ) {
        self.versions = versions
        self.isAnswer = isAnswer
        self.heldDoor = heldDoor
        self.founding = founding
        self.foundingNonce = founding == nil ? nil : foundingNonce
    }

    static let answerFlag: UInt8 = 1
    static let heldDoorFlag: UInt8 = 2
    static let foundingFlag: UInt8 = 4
    /// Only with `foundingFlag`: without it the bit is a later protocol's, and passed over.
    static let founderFlag: UInt8 = 8

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let current = try buffer.readWire(UInt16.self, "protocol version")
        let oldest = try buffer.readWire(UInt16.self, "oldest protocol version")
        let flags = try buffer.readWire(UInt8.self, "protocol version flags")
        guard oldest >= 1, oldest <= current else { throw .invalidField(what: "protocol versions") }
        versions = SpokenVersions(current: Int(current), oldest: Int(oldest))
        isAnswer = flags & Self.answerFlag != 0
        heldDoor = flags & Self.heldDoorFlag != 0 ? try buffer.readWire(UInt64.self, "held door") : nil
        founding = nil
        foundingNonce = nil
        if flags & Self.foundingFlag != 0 {
            founding = FoundingID(bytes: try buffer.readWireBytes(FoundingID.byteCount, "founding id"))
            if flags & Self.founderFlag != 0 {
                foundingNonce = try buffer.readWireBytes(FoundingID.nonceByteCount, "founding nonce")
            }
        }
        // The one frame a later protocol must be able to extend and still be heard by this one:
        // flags this release does not know, and what follows, are passed over.
        buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(clamping: versions.current))
        buffer.writeInteger(UInt16(clamping: versions.oldest))
        let nonce = founding == nil || foundingNonce?.count != FoundingID.nonceByteCount ? nil : foundingNonce
        var flags = isAnswer ? Self.answerFlag : 0
        if heldDoor != nil { flags |= Self.heldDoorFlag }
        if founding != nil { flags |= Self.foundingFlag }
        if nonce != nil { flags |= Self.founderFlag }
        buffer.writeInteger(flags)
        if let heldDoor { buffer.writeInteger(heldDoor) }
        if let founding { buffer.writeBytes(founding.bytes) }
        if let nonce { buffer.writeBytes(nonce) }
    }
}

extension FrameType {
    /// The protocol version that introduced this frame: it goes only to members that speak that
    /// version (`NodeInstance.sendPairwise`, the one gate). A new frame adds its case here.
    package var introducedIn: Int {
        switch self {
        case .protocolVersion, .introduction, .introductionRequest, .introductionRefusal: return 2
        default: return 1
        }
    }
}
