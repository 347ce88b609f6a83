/// Why the simulated network did not deliver a datagram.
package enum SimDropReason: String, Sendable, CaseIterable, CustomStringConvertible {
    /// The link's loss probability (or a link set `.down`).
    case loss
    /// Sender and receiver were on different sides of a partition, at send or arrival time.
    case partition
    /// Larger than the link's MTU.
    case mtu
    /// The receiver was crashed (or not yet started) when the datagram arrived.
    case crashed
    /// No node was ever added at the destination address.
    case unknownDestination
    /// A bottleneck's queue (the sender's uplink or the receiver's downlink) was full.
    case queue
    /// A NAT box kept it out: no live mapping, filtered, or a private address from outside.
    case nat
    /// Sent short-lived (a small TTL) and expired on the way: it left the sender's home, never
    /// reached another's.
    case expired

    package var description: String { rawValue }
}

/// Datagrams dropped, by reason.
package struct SimDropCounts: Sendable, Equatable {
    package var loss = 0
    package var partition = 0
    package var mtu = 0
    package var crashed = 0
    package var unknownDestination = 0
    package var queue = 0
    package var nat = 0
    package var expired = 0

    package init() {}

    package var total: Int { loss + partition + mtu + crashed + unknownDestination + queue + nat + expired }

    package subscript(reason: SimDropReason) -> Int {
        get {
            switch reason {
            case .loss: loss
            case .partition: partition
            case .mtu: mtu
            case .crashed: crashed
            case .unknownDestination: unknownDestination
            case .queue: queue
            case .nat: nat
            case .expired: expired
            }
        }
        set {
            switch reason {
            case .loss: loss = newValue
            case .partition: partition = newValue
            case .mtu: mtu = newValue
            case .crashed: crashed = newValue
            case .unknownDestination: unknownDestination = newValue
            case .queue: queue = newValue
            case .nat: nat = newValue
            case .expired: expired = newValue
            }
        }
    }
}

/// One node's traffic, for checks such as "constant messages per node per period".
package struct SimNodeStatistics: Sendable, Equatable {
    package var sent = 0
    package var bytesSent = 0
    /// Datagrams handed to the node's `receive` (duplicates included).
    package var received = 0
    package var bytesReceived = 0
    package var timersFired = 0

    package init() {}
}

/// Counters for the whole network since the simulator was made or `resetStatistics()`.
/// `sent` counts datagrams handed to the network (by nodes or `inject`); every sent datagram
/// is either dropped or delivered at least once (or still in flight), and each extra copy is
/// counted in `duplicated`, so `delivered + dropped.total + inFlight == sent + duplicated`.
package struct SimStatistics: Sendable, Equatable {
    package var sent = 0
    package var bytesSent = 0
    package var delivered = 0
    package var bytesDelivered = 0
    package var dropped = SimDropCounts()
    package var duplicated = 0
    package var corrupted = 0
    package var timersFired = 0
    /// Per node, indexed by `SimAddress.index`.
    package internal(set) var nodes: [SimNodeStatistics] = []

    package init() {}

    package subscript(node: SimAddress) -> SimNodeStatistics {
        node.index < nodes.count ? nodes[node.index] : SimNodeStatistics()
    }

    /// The most datagrams any one node sent.
    package var maxSentPerNode: Int { nodes.lazy.map(\.sent).max() ?? 0 }
}
