extension DownlinkController {
    /// What arrived in the last two intervals (from all holders asked, proven or not), and the
    /// rates asked at the last two closes. An interval's deliveries answer to the older of those:
    /// a new rate reaches the holders half a round trip after a close, and their pieces reach us
    /// another half later, as the next interval ends.
    ///
    /// Invariants: rates are never negative; `last` is the newest interval's, `previous` the one
    /// before it; `asked.older` is the rate set two closes ago.
    struct DeliveryRates: Sendable {
        private(set) var last = 0.0
        private(set) var previous = 0.0
        private(set) var asked: (older: Double, newer: Double)

        init(rate: Double) {
            asked = (rate, rate)
        }

        /// The more of the last two intervals' arrivals.
        var recent: Double { max(last, previous) }

        /// An interval closed with `arrived` bytes per second.
        mutating func record(_ arrived: Double) {
            previous = last
            last = arrived
        }

        /// A close set `rate`: it shows in the deliveries two closes on.
        mutating func asked(_ rate: Double) {
            asked = (asked.newer, rate)
        }

        /// After a pause, what arrived before says nothing about the line now.
        mutating func forget() {
            last = 0
            previous = 0
        }
    }
}
