/// A point in time as the state machines see it: nanoseconds on a monotonic clock whose origin
/// does not matter. The shell passes the real clock's reading; the simulator passes its own.
package struct MeshInstant: Hashable, Comparable, Sendable, CustomStringConvertible {
    package var nanoseconds: UInt64

    package init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    package static let zero = MeshInstant(nanoseconds: 0)

    package static func < (lhs: MeshInstant, rhs: MeshInstant) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    /// Adding a negative duration saturates at zero; a huge one saturates at the far future.
    package static func + (lhs: MeshInstant, rhs: Duration) -> MeshInstant {
        let delta = rhs.nanosecondsClamped
        if delta >= 0 {
            let (sum, overflow) = lhs.nanoseconds.addingReportingOverflow(UInt64(delta))
            return MeshInstant(nanoseconds: overflow ? .max : sum)
        }
        let magnitude = UInt64(delta.magnitude)
        return MeshInstant(nanoseconds: lhs.nanoseconds > magnitude ? lhs.nanoseconds - magnitude : 0)
    }

    package static func - (lhs: MeshInstant, rhs: MeshInstant) -> Duration {
        lhs >= rhs
            ? .nanoseconds(Int64(clamping: lhs.nanoseconds - rhs.nanoseconds))
            : .nanoseconds(-Int64(clamping: rhs.nanoseconds - lhs.nanoseconds))
    }

    package var description: String {
        "\(nanoseconds / 1_000_000).\(String(nanoseconds / 1000 % 1000 + 1000).dropFirst())ms"
    }
}

extension Duration {
    /// Whole nanoseconds, clamped to Int64.
    package var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow2 ? (scaled < 0 ? .min : .max) : sum
    }

    package var milliseconds: Double { Double(nanosecondsClamped) / 1e6 }

    package static func * (lhs: Duration, rhs: Double) -> Duration {
        let value = Double(lhs.nanosecondsClamped) * rhs
        guard value.isFinite else {
            return value.isNaN ? .zero : (value > 0 ? .nanoseconds(Int64.max) : .nanoseconds(Int64.min))
        }
        if value >= 9.2e18 { return .nanoseconds(Int64.max) }
        if value <= -9.2e18 { return .nanoseconds(Int64.min) }
        return .nanoseconds(Int64(value))
    }
}
