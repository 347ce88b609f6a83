/// Lifeguard's local-health multiplier: a node that notices signs of its own slowness (probes
/// it could not complete, nacks it did not get, suspicion of itself it had to refute) stretches
/// its probe interval and timeouts instead of accusing healthy peers.
public struct LocalHealth: Sendable, Equatable {
    public private(set) var score: Int = 0
    public let maximum: Int

    public init(maximum: Int) { self.maximum = maximum }

    public mutating func worsen(by amount: Int = 1) { score = min(maximum, score + amount) }
    public mutating func improve() { score = max(0, score - 1) }

    /// 1 when healthy, up to `maximum + 1`.
    public var multiplier: Double { Double(score + 1) }
}
