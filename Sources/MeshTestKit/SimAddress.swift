import MeshCrypto

/// A node's address in the simulated network: a small integer handed out in the order nodes
/// are added (n0, n1, …), and a port. Why not `PeerAddress`: an index is cheap to compare, hash and
/// store per node for thousands of nodes, and it orders nodes deterministically. Protocols
/// whose records carry a `PeerAddress` can convert with `peerAddress` / `init(peerAddress:)`.
///
/// A node listens on `simulatedPort`. The public side of a NAT box (`Simulator.addNAT`) is a host
/// of its own, numbered from `natHostBase` up, whose ports are the NAT's mappings.
package struct SimAddress: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let index: Int
    package let port: UInt16

    package init(_ index: Int, port: UInt16 = SimAddress.simulatedPort) {
        precondition(index >= 0, "a simulated address is a non-negative index")
        self.index = index
        self.port = port
    }

    package static func < (lhs: SimAddress, rhs: SimAddress) -> Bool {
        (lhs.index, lhs.port) < (rhs.index, rhs.port)
    }

    package var description: String {
        if isNATPublic { return "nat\(index - Self.natHostBase):\(port)" }
        return port == Self.simulatedPort ? "n\(index)" : "n\(index):\(port)"
    }

    /// The port every simulated node "listens" on in its `PeerAddress` form.
    package static let simulatedPort: UInt16 = 7946

    /// Host numbers of NAT boxes' public sides start here: far above any node count, still inside
    /// the 2^24 addresses `peerAddress` can name.
    package static let natHostBase = 1 << 23

    /// The public side of NAT box `number`, at `port`.
    package init(natHost number: Int, port: UInt16) {
        self.init(Self.natHostBase + number, port: port)
    }

    /// True for an address on a NAT box's public side.
    package var isNATPublic: Bool { index >= Self.natHostBase }

    /// The same host at another port.
    package func with(port: UInt16) -> SimAddress { SimAddress(index, port: port) }

    /// A stable, distinct IPv4 address in 127.0.0.0/8 for this host (up to 2^24 - 1 hosts). Simulated
    /// traffic never touches a socket; loopback keeps even the addresses it names on this machine.
    package var peerAddress: PeerAddress {
        precondition(index < (1 << 24) - 1, "too many simulated nodes for 127.0.0.0/8")
        return PeerAddress(host: .ipv4(0x7F00_0000 | UInt32(index + 1)), port: port)
    }

    /// The inverse of `peerAddress`; nil for an address no simulated host has.
    package init?(peerAddress: PeerAddress) {
        guard case let .ipv4(value) = peerAddress.host, value >> 24 == 0x7F, value & 0x00FF_FFFF > 0 else { return nil }
        self.init(Int(value & 0x00FF_FFFF) - 1, port: peerAddress.port)
    }
}
