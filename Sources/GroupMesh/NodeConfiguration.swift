import MeshCore
import MeshCrypto

/// How a node is started: the flags of `groupmesh run`, already parsed and checked.
public struct NodeConfiguration: Sendable {
    public var dataDirectory: DataDirectory
    /// Host to bind (numeric IPv4 or IPv6); port 0 picks a free one.
    public var listenHost: String = "0.0.0.0"
    public var listenPort: Int = 7946
    /// Addresses to put in invites and in our member record instead of the listen address.
    public var advertise: [PeerAddress] = []
    public var invite: InviteToken?
    public var join: [PeerAddress] = []
    public var name: String?
    public var lazy = false
    public var profile: MembershipSettings.Profile = .lan
    public var wire = DatagramCodec.Configuration()
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

    public init(dataDirectory: DataDirectory) {
        self.dataDirectory = dataDirectory
    }
}
