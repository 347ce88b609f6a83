/// RFC 6298's retransmission timeout, with millisecond granularity and a floor of a few
/// milliseconds instead of the RFC's one second (loopback and LAN round trips are well under a
/// millisecond). Karn's rule is the caller's: only samples of never-retransmitted data count.
package struct RetransmissionTimer: Sendable, Equatable {
    package var initial: Duration
    package var minimum: Duration
    package var maximum: Duration
    /// Clock granularity G.
    package var granularity: Duration

    package private(set) var smoothed: Duration?
    package private(set) var variation: Duration = .zero
    /// The timeout before backoff.
    package private(set) var base: Duration
    package private(set) var backoffs = 0

    package init(
        initial: Duration = .milliseconds(200), minimum: Duration = .milliseconds(10),
        maximum: Duration = .seconds(5), granularity: Duration = .milliseconds(1)
    ) {
        self.initial = initial
        self.minimum = minimum
        self.maximum = maximum
        self.granularity = granularity
        self.base = initial
    }

    /// The current timeout, with exponential backoff applied.
    package var timeout: Duration {
        var value = base
        for _ in 0..<backoffs {
            value = value * 2
            if value >= maximum { return maximum }
        }
        return min(max(value, minimum), maximum)
    }

    /// RFC 6298 §2.2 and §2.3 for a new round-trip sample; resets the backoff.
    package mutating func sample(_ rtt: Duration) {
        let r = max(rtt, .zero)
        if let srtt = smoothed {
            let deviation = srtt > r ? srtt - r : r - srtt
            variation = variation * 0.75 + deviation * 0.25
            smoothed = srtt * 0.875 + r * 0.125
        } else {
            smoothed = r
            variation = r / 2
        }
        // safe: set just above
        base = min(max(smoothed! + max(granularity, variation * 4), minimum), maximum)
        backoffs = 0
    }

    /// RFC 6298 §5.5: the timer expired, double the timeout (up to the maximum).
    package mutating func backOff() {
        if timeout < maximum { backoffs += 1 }
    }
}
