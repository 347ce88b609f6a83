/// A deterministic random number generator: xoshiro256** (Blackman and Vigna, 2018), its
/// 256-bit state filled from the seed by SplitMix64 as its authors recommend.
///
/// Why our own: the simulator must replay a run exactly from one printed seed, on any
/// machine and any toolchain. `SystemRandomNumberGenerator` is not seedable, and the standard
/// library's `random(in:using:)` algorithms are not promised to stay the same across
/// releases, so the helpers below (`next(below:)`, `nextDouble()`, `chance(_:)`) use fixed
/// algorithms of their own.
package struct SeededGenerator: RandomNumberGenerator, Sendable, Hashable {
    private var s0: UInt64
    private var s1: UInt64
    private var s2: UInt64
    private var s3: UInt64

    package init(seed: UInt64) {
        var mixer = seed
        s0 = Self.splitMix64(&mixer)
        s1 = Self.splitMix64(&mixer)
        s2 = Self.splitMix64(&mixer)
        s3 = Self.splitMix64(&mixer)
        // SplitMix64 never yields four zero words in a row, but xoshiro's all-zero state is a
        // fixed point, so make the guarantee explicit.
        if s0 | s1 | s2 | s3 == 0 { s0 = 0x9e37_79b9_7f4a_7c15 }
    }

    package mutating func next() -> UInt64 {
        let result = rotateLeft(s1 &* 5, 7) &* 9
        let t = s1 << 17
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = rotateLeft(s3, 45)
        return result
    }

    /// A new generator whose stream is independent of this one's, derived deterministically:
    /// giving each node (and the network) its own stream means a change in how often one
    /// consumer draws does not shift every other consumer's numbers.
    package mutating func fork() -> SeededGenerator {
        SeededGenerator(seed: next())
    }

    /// Uniform in `0..<bound` (Lemire's multiply-shift with rejection, so no modulo bias).
    /// `bound` must be positive.
    package mutating func next(below bound: UInt64) -> UInt64 {
        precondition(bound > 0, "bound must be positive")
        var product = next().multipliedFullWidth(by: bound)
        if product.low < bound {
            let threshold = (0 &- bound) % bound
            while product.low < threshold {
                product = next().multipliedFullWidth(by: bound)
            }
        }
        return product.high
    }

    /// Uniform in `range`.
    package mutating func next(in range: ClosedRange<Int>) -> Int {
        let span = UInt64(bitPattern: Int64(range.upperBound) &- Int64(range.lowerBound))
        if span == .max { return Int(truncatingIfNeeded: next()) }
        return range.lowerBound &+ Int(truncatingIfNeeded: next(below: span + 1))
    }

    /// Uniform in [0, 1) with 53 random bits.
    package mutating func nextDouble() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }

    /// True with probability `probability` (clamped to [0, 1]); draws nothing when the
    /// answer is certain, so fault-free links consume no randomness.
    package mutating func chance(_ probability: Double) -> Bool {
        guard probability > 0 else { return false }
        guard probability < 1 else { return true }
        return nextDouble() < probability
    }

    /// Uniform in `0...maximum` at nanosecond resolution; zero (and no draw) for a
    /// non-positive maximum.
    package mutating func duration(upTo maximum: Duration) -> Duration {
        let limit = maximum.nanosecondsClamped
        guard limit > 0 else { return .zero }
        return .nanoseconds(Int64(next(below: UInt64(limit) + 1)))
    }

    private static func splitMix64(_ state: inout UInt64) -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}

@inline(__always)
private func rotateLeft(_ value: UInt64, _ amount: UInt64) -> UInt64 {
    (value << amount) | (value >> (64 &- amount))
}
