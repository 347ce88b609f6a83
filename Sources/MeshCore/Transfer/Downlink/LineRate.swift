extension DownlinkController {
    /// The line's rate as the last measurement found it (see `Settings.lossyLineBackgroundShare`):
    /// the most that arrived in an interval whose queue showed the line full, over the first two
    /// such intervals after a measurement began. Measured only while no cap holds the rate down:
    /// under the cap, beside another flow, what arrives is our share, and taken as the line it
    /// would shrink the cap at every refresh.
    ///
    /// Invariants: a rate counts only once two intervals were seen, and only until `refresh`
    /// after the last of them; a new measurement begins only once that time is up.
    struct LineRate: Sendable {
        struct Measurement: Sendable {
            var rate: Double
            var measuredAt: MeshInstant
            /// Intervals with a queue that the measurement has seen (it ends at two).
            var samples: Int
        }

        let refresh: Duration
        private(set) var measurement: Measurement?

        init(refresh: Duration) {
            self.refresh = refresh
        }

        /// An interval closed with the line full, `arrived` bytes per second in it.
        mutating func measure(arrived: Double, now: MeshInstant) {
            if var line = measurement, line.samples < 2 {
                line.rate = max(line.rate, arrived)
                line.samples += 1
                line.measuredAt = now
                measurement = line
            } else if measurement.map({ now >= $0.measuredAt + refresh }) ?? true {
                measurement = Measurement(rate: arrived, measuredAt: now, samples: 1)
            }
        }

        /// The line's rate, if a measurement is complete (and, given `now`, not yet due again).
        func rate(now: MeshInstant?) -> Double? {
            guard let line = measurement, line.samples >= 2 else { return nil }
            if let now, now >= line.measuredAt + refresh { return nil }
            return line.rate
        }
    }
}
