import NIOCore

/// The protocol a node speaks, beside the datagram format (whose version byte stays 1, so that
/// every release opens every other's datagrams). Protocol 1 is release 0.9.0's, which says
/// nothing of it; from 2 on a node tells each member its own in a `protocolVersion` frame
/// (PROTOCOL.md §3, "Protocol versions").
public enum ProtocolVersion {
    /// The protocol this release speaks.
    public static let current = 2
    /// The oldest one it still speaks to a member: the previous release's.
    public static let oldestSpoken = current - 1
    /// What a member that never told us speaks (release 0.9.0 knows no version frame).
    public static let unannounced = 1
}

/// The versions one node speaks: `oldest` up to `current`.
public struct SpokenVersions: Equatable, Sendable, CustomStringConvertible {
    public var current: Int
    public var oldest: Int

    public init(current: Int, oldest: Int) {
        self.current = current
        self.oldest = oldest
    }

    /// This release's.
    public static let this = SpokenVersions(current: ProtocolVersion.current, oldest: ProtocolVersion.oldestSpoken)
    /// A member that never told us its versions.
    public static let unannounced = SpokenVersions(
        current: ProtocolVersion.unannounced, oldest: ProtocolVersion.unannounced)

    /// The newest version both speak, or nil when the ranges do not meet (one side cannot follow).
    public func common(with other: SpokenVersions) -> Int? {
        let newest = min(current, other.current)
        return newest >= max(oldest, other.oldest) ? newest : nil
    }

    public var description: String { "protocol \(current) (oldest \(oldest))" }
}

/// `protocolVersion` (0x5A): the versions its sender speaks, alone in a pairwise datagram (a
/// release that does not know the frame drops only that datagram). `isAnswer` when it answers
/// the member's own, which is then not answered again.
public struct VersionAnnouncement: WireBody {
    public var versions: SpokenVersions
    public var isAnswer: Bool

    public init(versions: SpokenVersions, isAnswer: Bool) {
        self.versions = versions
        self.isAnswer = isAnswer
    }

    static let answerFlag: UInt8 = 1

    public init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let current = try buffer.readWire(UInt16.self, "protocol version")
        let oldest = try buffer.readWire(UInt16.self, "oldest protocol version")
        let flags = try buffer.readWire(UInt8.self, "protocol version flags")
        guard oldest >= 1, oldest <= current else { throw .invalidField(what: "protocol versions") }
        guard flags & ~Self.answerFlag == 0 else { throw .invalidField(what: "protocol version flags") }
        versions = SpokenVersions(current: Int(current), oldest: Int(oldest))
        isAnswer = flags & Self.answerFlag != 0
    }

    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(clamping: versions.current))
        buffer.writeInteger(UInt16(clamping: versions.oldest))
        buffer.writeInteger(isAnswer ? Self.answerFlag : 0)
    }
}

extension FrameType {
    /// The protocol version that introduced this frame: it goes only to members that speak that
    /// version (`NodeInstance.sendPairwise`, the one gate). A new frame adds its case here.
    public var introducedIn: Int {
        switch self {
        case .protocolVersion: return 2
        default: return 1
        }
    }
}
