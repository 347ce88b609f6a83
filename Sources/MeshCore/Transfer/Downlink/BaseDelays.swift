import MeshCrypto

extension DownlinkController {
    /// LEDBAT's base delay (RFC 6817), per holder: every piece carries the holder's clock, and the
    /// lowest difference to ours seen lately is the path's one-way delay with no queue in it.
    /// Anything a piece shows above it is time spent in a queue.
    ///
    /// Invariants: a queue is never negative; the base is the lowest sample of the current period
    /// of `history / 2` and of the one before, so a lower path is taken at once and a higher one
    /// (a route that changed) within one to two periods. Samples are our clock minus the holder's
    /// in microseconds, wrapping: they compare by their signed difference, so clocks that wrap
    /// (every 71 minutes) or differ by anything do not matter.
    struct BaseDelays: Sendable {
        struct Holder: Sendable {
            /// The lowest sample in this period of the history and in the one before.
            var base: UInt32?
            var previousBase: UInt32?
        }

        /// How long a low sample counts: over one to two periods of half of this.
        let history: Duration
        private(set) var holders: [NodeID: Holder] = [:]
        private var rolledAt: MeshInstant?

        init(history: Duration) {
            self.history = history
        }

        /// The queue a piece stamped `sentAt` by `holder`'s clock shows, arriving `now`.
        mutating func queue(sentAt: UInt32, from holder: NodeID, now: MeshInstant) -> Duration {
            rollIfDue(now: now)
            let sample = UInt32(truncatingIfNeeded: now.nanoseconds / 1000) &- sentAt
            var state = holders[holder] ?? Holder()
            let current = state.base.map { Int32(bitPattern: sample &- $0) < 0 ? sample : $0 } ?? sample
            state.base = current
            var base = current
            if let previous = state.previousBase, Int32(bitPattern: previous &- current) < 0 { base = previous }
            holders[holder] = state
            return Duration.microseconds(max(0, Int32(bitPattern: sample &- base)))
        }

        mutating func remove(_ holder: NodeID) {
            holders[holder] = nil
        }

        /// A new period begins: this one's lows become the previous ones, the oldest are forgotten.
        private mutating func rollIfDue(now: MeshInstant) {
            guard let rolled = rolledAt else { rolledAt = now; return }
            guard now >= rolled + history / 2 else { return }
            rolledAt = now
            for (id, state) in holders {
                holders[id]?.previousBase = state.base
                holders[id]?.base = nil
            }
        }
    }
}
