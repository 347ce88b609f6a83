/// Lifeguard's local-health multiplier: a node that notices signs of its own slowness (probes
/// it could not complete, nacks it did not get, suspicion of itself it had to refute) stretches
/// its probe interval and timeouts instead of accusing healthy peers.
package struct LocalHealth: Sendable, Equatable {
    package private(set) var score: Int = 0
    package let maximum: Int

    package init(maximum: Int) { self.maximum = maximum }

    package mutating func worsen(by amount: Int = 1) { score = min(maximum, score + amount) }
    package mutating func improve() { score = max(0, score - 1) }

    /// 1 when healthy, up to `maximum + 1`.
    package var multiplier: Double { Double(score + 1) }
}
