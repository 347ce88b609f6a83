import Foundation

/// One row of the benchmark table and of bench/results.json.
struct BenchResult: Encodable {
    var scenario: String
    var figure: Double
    var unit: String
    var baselineName: String
    var baseline: Double
    var goal: String

    /// figure ÷ baseline: for rates, the share of the baseline we reach.
    var ratio: Double { baseline == 0 ? 0 : figure / baseline }

    enum CodingKeys: String, CodingKey { case scenario, figure, unit, baselineName, baseline, goal, ratio }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(scenario, forKey: .scenario)
        try container.encode(figure, forKey: .figure)
        try container.encode(unit, forKey: .unit)
        try container.encode(baselineName, forKey: .baselineName)
        try container.encode(baseline, forKey: .baseline)
        try container.encode(goal, forKey: .goal)
        try container.encode(ratio, forKey: .ratio)
    }
}

enum BenchReport {
    static func printTable(_ results: [BenchResult]) {
        let header = ["scenario", "figure", "baseline", "ratio", "goal"]
        let rows = results.map { result in
            [
                result.scenario,
                "\(format(result.figure)) \(result.unit)",
                "\(format(result.baseline)) \(result.unit) (\(result.baselineName))",
                String(format: "%.2f", result.ratio),
                result.goal,
            ]
        }
        let widths = header.indices.map { column in
            ([header[column]] + rows.map { $0[column] }).map(\.count).max() ?? 0
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }
        print(line(header))
        print(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  "))
        rows.forEach { print(line($0)) }
    }

    static func write(_ results: [BenchResult], to path: String, quick: Bool) throws {
        struct Document: Encodable {
            var date: String
            var quick: Bool
            var machine: String
            var results: [BenchResult]
        }
        let document = Document(
            date: ISO8601DateFormatter().string(from: Date()), quick: quick,
            machine: "\(ProcessInfo.processInfo.activeProcessorCount) cores",
            results: results)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try encoder.encode(document).write(to: url)
    }

    static func format(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    }
}

/// Runs `body` (which processes `bytes` bytes per call) repeatedly for about `seconds`,
/// `runs` times, and returns the median throughput in MB/s (10^6 bytes per second).
func measureThroughput(bytes: Int, seconds: Double, runs: Int, _ body: () -> Void) -> Double {
    var rates: [Double] = []
    let clock = ContinuousClock()
    for _ in 0..<runs {
        var iterations = 0
        let start = clock.now
        var elapsed = Duration.zero
        repeat {
            for _ in 0..<8 { body() }
            iterations += 8
            elapsed = clock.now - start
        } while elapsed < .milliseconds(Int(seconds * 1000))
        let secs = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        rates.append(Double(bytes) * Double(iterations) / secs / 1e6)
    }
    return median(rates)
}

/// The middle value (the upper one of an even count); 0 for none.
func median(_ values: [Double]) -> Double {
    percentile(values, 0.5)
}

/// The value `p` of the way up the sorted values (0.5: the upper middle one); 0 for none.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

/// The bar for a TCP flow beside a fetch, given its share of the line alone: 80% of the
/// line beside replication and 40% beside a `get`; where random loss holds TCP under that bar
/// even alone, 0.8× what it gets alone (a loss-bound TCP's rate falls as any queue lengthens its
/// round trip, and it cannot reach a share of the line it never had). `againstAlone` says which.
func competitorShareGoal(replication: Bool, aloneShare: Double) -> (text: String, againstAlone: Bool) {
    // Beside a get, 40% is 0.8× a TCP that had half the line alone.
    let (bar, lossBoundUnder) = replication ? ("≥ 80%", 0.8) : ("≥ 40%", 0.5)
    return aloneShare < lossBoundUnder ? ("≥ 0.8× alone", true) : (bar, false)
}
