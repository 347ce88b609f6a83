import MeshCore
import MeshCrypto

/// How a node is started: the flags of `groupmesh run`, already parsed and checked.
public struct NodeConfiguration: Sendable {
    public var dataDirectory: DataDirectory
    /// Host to bind (numeric IPv4 or IPv6); port 0 picks a free one.
    public var listenHost: String = "0.0.0.0"
    public var listenPort: Int = 7946
    /// Addresses to put in invites and in our member record instead of the listen address.
    public var advertise: [MeshAddress] = []
    public var invite: Invite?
    public var join: [MeshAddress] = []
    public var name: String?
    public var lazy = false
    public var profile: Profile = .lan
    /// The largest attachment accepted (DESIGN.md: 100 MiB, configurable).
    public var maxAttachmentSize: UInt64 = 100 << 20
    /// How long `get` waits for a holder of what is missing before reporting it unavailable.
    public var unavailableTimeout: Duration = .seconds(10)
    public var chunkSize = Manifest.defaultChunkSize
    /// Start the control socket (tests of the node alone may skip it).
    public var controlSocket = true
    /// Share of received datagrams dropped on purpose, to measure behaviour under loss on a
    /// loopback that loses nothing (`run --simulate-loss`, hidden; benchmarks and tests only).
    public var simulatedLoss: Double = 0
    package var wire = DatagramCodec.Configuration()

    public init(dataDirectory: DataDirectory) {
        self.dataDirectory = dataDirectory
    }

    /// Timing defaults, as memberlist's LAN, local and WAN configurations.
    public enum Profile: String, Sendable, CaseIterable {
        case lan, local, wan
    }

    /// The core's policy for this configuration.
    var settings: NodeSettings {
        var settings = NodeSettings(profile: MembershipSettings.Profile(rawValue: profile.rawValue) ?? .lan)
        settings.wire = wire
        settings.chunkSize = chunkSize
        settings.maxAttachmentSize = maxAttachmentSize
        settings.unavailableTimeout = unavailableTimeout
        settings.lazy = lazy
        return settings
    }

    var listenDescription: String { MeshAddress.join(listenHost, listenPort) }
}

/// A member's UDP address, `HOST:PORT` (`[v6]:PORT` for IPv6).
public struct MeshAddress: Hashable, Sendable, CustomStringConvertible {
    package let peer: PeerAddress

    package init(_ peer: PeerAddress) { self.peer = peer }

    public init(_ text: String) throws(GroupMeshError) {
        do { peer = try PeerAddress(parsing: text) } catch { throw .invalidAddress(text) }
    }

    public var description: String { peer.description }

    /// `HOST:PORT` split in two (the port may be 0 here); nil when it is not of that form.
    public static func split(_ text: String) -> (host: String, port: UInt16)? { PeerAddress.split(text) }

    /// `HOST:PORT`, with brackets around an IPv6 host.
    public static func join(_ host: String, _ port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

/// An invite: the session secret and the addresses to join through. Whoever holds it can join.
public struct Invite: Sendable, Equatable, CustomStringConvertible {
    package let token: InviteToken

    package init(_ token: InviteToken) { self.token = token }

    public init(_ text: String) throws(GroupMeshError) {
        do { token = try InviteToken(parsing: text) } catch { throw .invalidInvite(error.description) }
    }

    /// The token as people paste it (`gm1…`).
    public var text: String { token.text }
    public var description: String { text }
}
