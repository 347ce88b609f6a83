import MeshCore

/// What a node counts about its traffic; `status --json` prints it as `counters`.
public struct NodeCounters: Sendable, Codable, Equatable {
    public var datagramsSent: UInt64 = 0
    public var datagramsReceived: UInt64 = 0
    public var bytesSent: UInt64 = 0
    public var bytesReceived: UInt64 = 0
    public var sendErrors: UInt64 = 0
    public var chunksFetched: UInt64 = 0
    public var chunksServed: UInt64 = 0
    public var chunksRejected: UInt64 = 0
    public var chunkPayloadBytesSent: UInt64 = 0
    public var piecesUnsolicited: UInt64 = 0
    /// Datagrams dropped by `--simulate-loss`.
    public var simulatedDrops: UInt64 = 0
    /// Wants answered "busy" because the send queue was full or too many chunks were being read.
    public var wantsRefused: UInt64 = 0
    /// Key epochs handed to members (on removal, and to members that had not caught up).
    public var handoversSent: UInt64 = 0
    /// Handovers to us that were not taken: not for our boot, did not open, or not believable.
    public var handoversRefused: UInt64 = 0
    public var dropped: [String: UInt64] = Dictionary(uniqueKeysWithValues: DropReason.allCases.map { ($0.rawValue, 0) })

    public init() {}

    public mutating func countDrop(_ reason: DropReason) {
        dropped[reason.rawValue, default: 0] += 1
    }

    public func droppedCount(_ reason: DropReason) -> UInt64 {
        dropped[reason.rawValue] ?? 0
    }
}
