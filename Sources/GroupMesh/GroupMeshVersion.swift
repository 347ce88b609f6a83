import MeshCore
import MeshStore

/// What `groupmesh --version` prints: the release, the wire protocol and the data dir format it
/// speaks, and how it was built.
public enum GroupMeshVersion {
    /// Semantic version of this release; `-dev` until it is tagged.
    public static let release = "0.11.0-dev"
    /// The protocol version this release speaks (PROTOCOL.md §3, "Protocol versions"); every
    /// datagram still starts with format version byte 1.
    public static let wireProtocol = ProtocolVersion.current
    /// The oldest protocol version it still speaks to a member.
    public static let oldestProtocol = ProtocolVersion.oldestSpoken

    public static var build: String {
        #if DEBUG
            let configuration = "debug"
        #else
            let configuration = "release"
        #endif
        #if arch(x86_64)
            let architecture = "x86_64"
        #elseif arch(arm64)
            let architecture = "arm64"
        #else
            let architecture = "other"
        #endif
        #if os(Linux)
            let system = "linux"
        #elseif os(macOS)
            let system = "macos"
        #else
            let system = "other"
        #endif
        return "\(configuration) build, \(system)-\(architecture)"
    }

    /// One line: `0.11.0-dev (protocol 2, speaks 1–2, data dir format 1, release build, linux-x86_64)`.
    public static var line: String {
        "\(release) (protocol \(wireProtocol), speaks \(oldestProtocol)–\(wireProtocol), "
            + "data dir format \(DataDirectory.formatVersion), \(build))"
    }
}
