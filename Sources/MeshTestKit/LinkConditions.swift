/// How one *direction* of a link treats the datagrams sent over it. The simulator looks up
/// the conditions for `from → to` (falling back to its default), so A→B and B→A can differ:
/// real paths are often asymmetric, and protocols must survive a one-way lossy link.
///
/// Each datagram, in this order: dropped if larger than `mtu`; lost with `lossProbability`;
/// otherwise delivered once, plus one extra copy with `duplicationProbability`. Every copy
/// independently gets `delay + uniform(0...jitter)`, plus `uniform(0...reorderDelay)` with
/// `reorderProbability` (so it overtakes or is overtaken by its neighbours), and has one
/// random bit flipped with `corruptionProbability`.
package struct LinkConditions: Sendable, Equatable, CustomStringConvertible {
    /// One-way base latency.
    package var delay: Duration
    /// Extra latency, uniform in `0...jitter`, drawn per datagram. Non-zero jitter alone can
    /// already reorder datagrams sent close together.
    package var jitter: Duration
    package var lossProbability: Double
    /// Chance that the network delivers a second copy of the datagram.
    package var duplicationProbability: Double
    /// Fraction of datagrams held back by an extra `uniform(0...reorderDelay)`.
    package var reorderProbability: Double
    package var reorderDelay: Duration
    /// Chance that one uniformly chosen bit of the datagram is flipped (as a link whose
    /// checksum missed it would): the receiver's authentication must catch it.
    package var corruptionProbability: Double
    /// Largest datagram (bytes) the path carries; larger ones are dropped, as a path with
    /// don't-fragment set would. `nil`: no limit.
    package var mtu: Int?

    package init(
        delay: Duration = .milliseconds(1),
        jitter: Duration = .zero,
        lossProbability: Double = 0,
        duplicationProbability: Double = 0,
        reorderProbability: Double = 0,
        reorderDelay: Duration = .milliseconds(10),
        corruptionProbability: Double = 0,
        mtu: Int? = nil
    ) {
        self.delay = delay
        self.jitter = jitter
        self.lossProbability = lossProbability
        self.duplicationProbability = duplicationProbability
        self.reorderProbability = reorderProbability
        self.reorderDelay = reorderDelay
        self.corruptionProbability = corruptionProbability
        self.mtu = mtu
    }

    /// 1 ms, no faults.
    package static let `default` = LinkConditions()

    /// A link that drops everything (counted as loss): a one-way cut.
    package static let down = LinkConditions(lossProbability: 1)

    /// True when no datagram on this link can be lost, duplicated, reordered or corrupted.
    package var isFaultFree: Bool {
        lossProbability <= 0 && duplicationProbability <= 0 && reorderProbability <= 0
            && corruptionProbability <= 0 && jitter <= .zero && mtu == nil
    }

    package var description: String {
        var parts = ["delay \(delay.milliseconds)ms"]
        if jitter > .zero { parts.append("jitter \(jitter.milliseconds)ms") }
        if lossProbability > 0 { parts.append("loss \(lossProbability)") }
        if duplicationProbability > 0 { parts.append("dup \(duplicationProbability)") }
        if reorderProbability > 0 { parts.append("reorder \(reorderProbability) up to \(reorderDelay.milliseconds)ms") }
        if corruptionProbability > 0 { parts.append("corrupt \(corruptionProbability)") }
        if let mtu { parts.append("mtu \(mtu)") }
        return parts.joined(separator: ", ")
    }
}
