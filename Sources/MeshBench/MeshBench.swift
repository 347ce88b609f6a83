import Foundation

/// `make bench`: every scenario, a table on stdout, and bench/results.json.
@main
enum MeshBench {
    static func main() async throws {
        let environment = ProcessInfo.processInfo.environment
        let quick = environment["QUICK"].map { $0 != "0" && !$0.isEmpty } ?? false
        let output = environment["BENCH_RESULTS"] ?? "bench/results.json"
        var results: [BenchResult] = []
        print("crypto and hashing (one core)…")
        results += CryptoScenario.run(quick: quick)
        print("membership in simulation…")
        results += MembershipScenario.run(quick: quick)
        print("membership with real processes on loopback…")
        results += try await ProcessMeshScenario.run(quick: quick)
        print()
        BenchReport.printTable(results)
        try BenchReport.write(results, to: output, quick: quick)
        print("\nwrote \(output)")
    }
}
