import MeshCore
import MeshCrypto

/// How a node is started: the flags of `groupmesh run`, already parsed and checked.
public struct NodeConfiguration: Sendable {
    public var dataDirectory: DataDirectory
    /// `HOST:PORT` to bind; port 0 picks a free one.
    public var listenHost: String = "0.0.0.0"
    public var listenPort: Int = 7946
    /// Addresses to put in invites instead of the listen address.
    public var advertise: [PeerAddress] = []
    public var invite: InviteToken?
    public var join: [PeerAddress] = []
    public var name: String?
    public var lazy = false
    public var wire = DatagramCodec.Configuration()

    public init(dataDirectory: DataDirectory) {
        self.dataDirectory = dataDirectory
    }
}
