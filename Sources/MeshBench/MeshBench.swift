import Foundation
import Logging

/// `make bench`: every scenario, a table on stdout, and bench/results.json.
@main
enum MeshBench {
    static func main() async {
        do {
            try await runAll()
        } catch {
            // One line, not a crash report: a scenario that cannot finish says which and why.
            FileHandle.standardError.write(Data("bench failed: \(error)\n".utf8))
            exit(1)
        }
    }

    static func runAll() async throws {
        // Nodes run inside this process for the messenger scenario: only their warnings matter here.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .warning
            return handler
        }
        // Data dirs on ordinary disk, as a user's are (the test suite prefers /dev/shm): the
        // figure that counts is a `get` as a user runs it, writeback included.
        if ProcessInfo.processInfo.environment["GROUPMESH_TEST_TMPDIR"] == nil {
            setenv("GROUPMESH_TEST_TMPDIR", NSTemporaryDirectory(), 1)
        }
        let environment = ProcessInfo.processInfo.environment
        let quick = environment["QUICK"].map { $0 != "0" && !$0.isEmpty } ?? false
        let output = environment["BENCH_RESULTS"] ?? "bench/results.json"
        // BENCH_ONLY=crypto,messenger runs a subset (while working on one part).
        let only = environment["BENCH_ONLY"].map { Set($0.split(separator: ",").map(String.init)) }
        func wanted(_ name: String) -> Bool { only?.contains(name) ?? true }
        var results: [BenchResult] = []
        if wanted("crypto") {
            print("crypto and hashing (one core)…")
            results += CryptoScenario.run(quick: quick)
        }
        if wanted("membership") {
            print("membership in simulation…")
            results += MembershipScenario.run(quick: quick)
        }
        if wanted("homelink") {
            print("home lines in simulation…")
            results += HomeLinkScenario.run(quick: quick)
        }
        if wanted("messenger") {
            print("messenger on loopback…")
            results += try await MessengerScenario.run(quick: quick)
        }
        if wanted("processes") {
            print("membership with real processes on loopback…")
            results += try await ProcessMeshScenario.run(quick: quick)
        }
        if wanted("members") {
            print("membership with 20 and 40 real processes on loopback…")
            results += try await MembershipProcessScenario.run(quick: quick)
        }
        if wanted("transfer") {
            print("attachments between real processes on loopback…")
            results += try await TransferScenario.run(quick: quick)
        }
        if wanted("wan") {
            print("GroupMesh through emulated WAN links, namespaces…")
            results += try await WANScenario.run(quick: quick)
        }
        if wanted("natlab") {
            print("GroupMesh between homes behind Linux NAT, namespaces…")
            results += try await NATLabScenario.run(quick: quick)
        }
        if wanted("natmatrix") {
            print("Every pair of home router kinds, no public member (STUN/TURN server, port mapping), namespaces…")
            results += try await NATMatrixScenario.run(quick: quick)
        }
        print()
        BenchReport.printTable(results)
        try BenchReport.write(results, to: output, quick: quick)
        print("\nwrote \(output)")
    }
}
