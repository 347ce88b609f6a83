extension DownlinkController {
    /// The lowest want-to-first-piece time seen lately.
    ///
    /// Invariants: never zero or negative; a sample no higher than the current one replaces it at
    /// once, a higher one only once the current one is `history` old (a path that got longer).
    struct RoundTripEstimate: Sendable {
        let history: Duration
        /// Nil before the first sample.
        private(set) var value: Duration?
        private var takenAt = MeshInstant.zero

        init(history: Duration) {
            self.history = history
        }

        /// Returns whether `sample` was taken.
        mutating func add(_ sample: Duration, now: MeshInstant) -> Bool {
            guard sample > .zero else { return false }
            guard value.map({ sample <= $0 }) ?? true || now >= takenAt + history else { return false }
            value = sample
            takenAt = now
            return true
        }
    }
}
