/// Why bytes from the network could not be decoded. Decoding never traps: every failure is
/// one of these values, and the shell counts it and drops the datagram.
public enum WireError: Error, Equatable, Sendable, CustomStringConvertible {
    case truncated(what: String)
    case unsupportedVersion(UInt8)
    case unknownKeyKind(UInt8)
    case unknownFrameType(UInt8)
    case invalidField(what: String)
    case oversized(length: Int, limit: Int)
    case trailingBytes(Int)

    public var description: String {
        switch self {
        case let .truncated(what): return "truncated \(what)"
        case let .unsupportedVersion(version): return "unsupported datagram version \(version)"
        case let .unknownKeyKind(kind): return "unknown key kind \(kind)"
        case let .unknownFrameType(type): return "unknown frame type 0x\(String(type, radix: 16))"
        case let .invalidField(what): return "invalid \(what)"
        case let .oversized(length, limit): return "\(length) bytes exceed the limit of \(limit)"
        case let .trailingBytes(count): return "\(count) unexpected trailing bytes"
        }
    }
}
