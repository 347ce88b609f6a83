import Foundation

/// Which seeds a simulation test runs, and how a failure names its seed.
///
/// Why: a simulation failure is only useful if it can be replayed. Tests run a fixed, small
/// set of seeds by default (fast, and the same on every machine), `make soak SEEDS=N` asks for
/// more, and a failing seed can be rerun alone:
///
///     SIM_SEED=17 swift test --filter MembershipSimulationTests
///
/// Use the seeds as test arguments so the runner names the failing case, and put the seed in
/// every expectation's message too:
///
///     @Test(arguments: SimulationSeeds.from())
///     func convergesUnderLoss(seed: UInt64) {
///         let sim = Simulator(seed: seed)
///         …
///         #expect(converged, "\(SimulationSeeds.replay(seed))")
///     }
package enum SimulationSeeds {
    /// How many seeds a test runs when the environment does not say.
    package static let defaultCount = 5

    /// The seeds to run, from the environment:
    /// - `SIM_SEED=17` or `SIM_SEED=3,17,42`: exactly those seeds (to replay a failure);
    /// - `SIM_SEEDS=200`: seeds 1...200 (the soak run);
    /// - neither (or unparsable): seeds `1...defaultCount` (the caller's count, if given).
    /// A count that is below the caller's default is honoured, so `SIM_SEEDS=1` is a quick run.
    package static func from(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        defaultCount: Int = SimulationSeeds.defaultCount
    ) -> [UInt64] {
        if let list = environment["SIM_SEED"] {
            let seeds = list.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
            if !seeds.isEmpty { return seeds }
        }
        if let text = environment["SIM_SEEDS"], let count = Int(text.trimmingCharacters(in: .whitespaces)), count > 0 {
            return first(count)
        }
        return first(max(defaultCount, 1))
    }

    /// Seeds 1...count: small numbers are easy to read in a report and to type back.
    package static func first(_ count: Int) -> [UInt64] {
        (0..<UInt64(max(count, 0))).map { $0 + 1 }
    }

    /// "seed 17 (replay: SIM_SEED=17)", for expectation messages.
    package static func replay(_ seed: UInt64) -> String {
        "seed \(seed) (replay: SIM_SEED=\(seed))"
    }

    /// Runs `body` once per seed; an error thrown for a seed is rethrown wrapped in a
    /// `SeededFailure` that names the seed.
    package static func forEach(_ seeds: [UInt64] = from(), _ body: (UInt64) throws -> Void) throws {
        for seed in seeds {
            do { try body(seed) } catch { throw SeededFailure(seed: seed, underlying: error) }
        }
    }
}

/// An error raised while running one seed, carrying the seed so the report can be replayed.
package struct SeededFailure: Error, CustomStringConvertible {
    package let seed: UInt64
    package let underlying: any Error

    package init(seed: UInt64, underlying: any Error) {
        self.seed = seed
        self.underlying = underlying
    }

    package var description: String { "\(SimulationSeeds.replay(seed)): \(underlying)" }
}
