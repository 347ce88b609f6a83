import MeshCrypto

/// What fetches reached over each set of holders' paths, for careful resume: the node saves it
/// when a fetch ends and offers it to the downlink when the next fetch over the same paths
/// starts. A path is a holder as this node reaches it (its address, its relay, its boot): when any
/// of them changes the key does too, and what was saved is not found again (it expires).
package struct SavedPathCapacities: Sendable {
    /// One holder's path, as far as it bears on the line between us.
    package struct HolderPath: Hashable, Sendable, Comparable {
        package var member: NodeID
        package var address: PeerAddress?
        package var relay: NodeID?
        package var boot: UInt64

        package init(member: NodeID, address: PeerAddress?, relay: NodeID?, boot: UInt64) {
            self.member = member
            self.address = address
            self.relay = relay
            self.boot = boot
        }

        package static func < (lhs: HolderPath, rhs: HolderPath) -> Bool { lhs.member < rhs.member }
    }

    /// The paths of a fetch's holders, in order.
    package struct Key: Hashable, Sendable {
        package var paths: [HolderPath]

        package init(_ paths: [HolderPath]) { self.paths = paths.sorted() }
    }

    /// At most this many sets kept (the oldest go first).
    package static let capacity = 64

    private var saved: [Key: SavedPathCapacity] = [:]

    package init() {}

    package var count: Int { saved.count }

    package mutating func save(_ capacity: SavedPathCapacity, for key: Key) {
        guard !key.paths.isEmpty else { return }
        saved[key] = capacity
        while saved.count > Self.capacity, let oldest = saved.min(by: { $0.value.savedAt < $1.value.savedAt }) {
            saved[oldest.key] = nil
        }
    }

    /// What was saved for these paths and is younger than `lifetime` (nil: nothing, or expired).
    package func capacity(for key: Key, lifetime: Duration, now: MeshInstant) -> SavedPathCapacity? {
        guard let capacity = saved[key], now < capacity.savedAt + lifetime else { return nil }
        return capacity
    }

    /// Drops what expired.
    package mutating func forgetExpired(lifetime: Duration, now: MeshInstant) {
        saved = saved.filter { now < $0.value.savedAt + lifetime }
    }
}
