import MeshCrypto

/// A node's address in the simulated network: a small integer handed out in the order nodes
/// are added (n0, n1, …). Why not `PeerAddress`: an index is cheap to compare, hash and
/// store per node for thousands of nodes, and it orders nodes deterministically. Protocols
/// whose records carry a `PeerAddress` can convert with `peerAddress` / `init(peerAddress:)`.
public struct SimAddress: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let index: Int

    public init(_ index: Int) {
        precondition(index >= 0, "a simulated address is a non-negative index")
        self.index = index
    }

    public static func < (lhs: SimAddress, rhs: SimAddress) -> Bool { lhs.index < rhs.index }

    public var description: String { "n\(index)" }

    /// The port every simulated node "listens" on in its `PeerAddress` form.
    public static let simulatedPort: UInt16 = 7946

    /// A stable, distinct IPv4 address in 127.0.0.0/8 for this node (up to 2^24 - 1 nodes). Simulated
    /// traffic never touches a socket; loopback keeps even the addresses it names on this machine.
    public var peerAddress: PeerAddress {
        precondition(index < (1 << 24) - 1, "too many simulated nodes for 127.0.0.0/8")
        return PeerAddress(host: .ipv4(0x7F00_0000 | UInt32(index + 1)), port: Self.simulatedPort)
    }

    /// The inverse of `peerAddress`; nil for an address no simulated node has.
    public init?(peerAddress: PeerAddress) {
        guard case let .ipv4(value) = peerAddress.host, value >> 24 == 0x7F, value & 0x00FF_FFFF > 0,
              peerAddress.port == Self.simulatedPort else { return nil }
        self.init(Int(value & 0x00FF_FFFF) - 1)
    }
}
