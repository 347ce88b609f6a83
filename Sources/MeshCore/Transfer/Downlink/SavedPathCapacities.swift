import MeshCrypto

/// What fetches reached over each set of holders' paths, for careful resume: the node saves it
/// when a fetch ends and offers it to the downlink when the next fetch over the same paths
/// starts. A path is a holder as this node reaches it (its address, its relay, its boot): when any
/// of them changes the key does too, and what was saved is not found again (it expires).
public struct SavedPathCapacities: Sendable {
    /// One holder's path, as far as it bears on the line between us.
    public struct HolderPath: Hashable, Sendable, Comparable {
        public var member: NodeID
        public var address: PeerAddress?
        public var relay: NodeID?
        public var boot: UInt64

        public init(member: NodeID, address: PeerAddress?, relay: NodeID?, boot: UInt64) {
            self.member = member
            self.address = address
            self.relay = relay
            self.boot = boot
        }

        public static func < (lhs: HolderPath, rhs: HolderPath) -> Bool { lhs.member < rhs.member }
    }

    /// The paths of a fetch's holders, in order.
    public struct Key: Hashable, Sendable {
        public var paths: [HolderPath]

        public init(_ paths: [HolderPath]) { self.paths = paths.sorted() }
    }

    /// At most this many sets kept (the oldest go first).
    public static let capacity = 64

    private var saved: [Key: SavedPathCapacity] = [:]

    public init() {}

    public var count: Int { saved.count }

    public mutating func save(_ capacity: SavedPathCapacity, for key: Key) {
        guard !key.paths.isEmpty else { return }
        saved[key] = capacity
        while saved.count > Self.capacity, let oldest = saved.min(by: { $0.value.savedAt < $1.value.savedAt }) {
            saved[oldest.key] = nil
        }
    }

    /// What was saved for these paths and is younger than `lifetime` (nil: nothing, or expired).
    public func capacity(for key: Key, lifetime: Duration, now: MeshInstant) -> SavedPathCapacity? {
        guard let capacity = saved[key], now < capacity.savedAt + lifetime else { return nil }
        return capacity
    }

    /// Drops what expired.
    public mutating func forgetExpired(lifetime: Duration, now: MeshInstant) {
        saved = saved.filter { now < $0.value.savedAt + lifetime }
    }
}
