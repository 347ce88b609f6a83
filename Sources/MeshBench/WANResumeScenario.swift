import Foundation
import GroupMesh
import MeshTestKit

/// `resume` (WAN_ONLY=resume): careful resume through the emulated 50 ms path. Three holders hold
/// a small attachment (8 MiB), 50 MiB and 100 MiB. In each round:
///
/// - fresh nodes: a new lazy joiner per attachment `get`s the 50 MiB one, another the 100 MiB one
///   (nothing known of the path but the membership probes' round trip);
/// - the same joiner: one lazy joiner `get`s the small one (which measures the path), then the
///   50 MiB one, then the 100 MiB one (what careful resume is for);
/// - CUBIC: an iperf3 download of the same bytes through the same link (`-n`).
///
/// Each figure is the `get`'s wall time as a rate beside CUBIC's, the ratio CUBIC's time ÷ the get's.
extension WANScenario {
    struct ResumeRound { var fresh50 = 0.0, fresh100 = 0.0, same50 = 0.0, same100 = 0.0, cubic50 = 0.0, cubic100 = 0.0 }

    static func resumeRounds(
        directory: String, tools: Tools, quick: Bool,
        using generator: inout SystemRandomNumberGenerator
    ) async throws -> [BenchResult] {
        let sizes = [8 << 20, quick ? 16 << 20 : 50 << 20, quick ? 32 << 20 : 100 << 20]
        let files = sizes.indices.map { directory + "/resume\($0).bin" }
        for (file, size) in zip(files, sizes) { try writeRandomFile(file, size: size, using: &generator) }
        defer { for file in files { try? FileManager.default.removeItem(atPath: file) } }
        var rounds: [ResumeRound] = []
        for round in 1...roundCount(quick: quick) {
            print("wan resume: round \(round)")
            let mesh = try await Holders(lab: tools.lab, files: files)
            defer { mesh.stop() }
            let link = try WANLink(lab: tools.lab, host: 3, profile: .fiftyMs)
            defer { link.tearDown() }
            var outcome = ResumeRound()
            outcome.fresh50 = try await timedGets(mesh: mesh, ids: [mesh.ids[1]], sizes: [sizes[1]], tools: tools)[0]
            outcome.fresh100 = try await timedGets(mesh: mesh, ids: [mesh.ids[2]], sizes: [sizes[2]], tools: tools)[0]
            let same = try await timedGets(mesh: mesh, ids: mesh.ids, sizes: sizes, tools: tools)
            (outcome.same50, outcome.same100) = (same[1], same[2])
            outcome.cubic50 = try await tools.tcpDownload(bytes: sizes[1], timeout: .seconds(60))
            outcome.cubic100 = try await tools.tcpDownload(bytes: sizes[2], timeout: .seconds(60))
            print(
                "  get wall time, MiB/s: fresh \(format(outcome.fresh50)) (50), \(format(outcome.fresh100)) (100); "
                    + "same joiner after 8 MiB \(format(same[0])): \(format(outcome.same50)) (50), "
                    + "\(format(outcome.same100)) (100); "
                    + "CUBIC \(format(outcome.cubic50)) (50), \(format(outcome.cubic100)) (100)")
            rounds.append(outcome)
        }
        let n = rounds.count
        func row(
            _ name: String, _ get: KeyPath<ResumeRound, Double>, _ cubic: KeyPath<ResumeRound, Double>,
            goal: String
        ) -> BenchResult {
            let median = medianRound(rounds) { $0[keyPath: get] / max($0[keyPath: cubic], 1e-9) }
            return BenchResult(
                scenario: "wan resume (50 ms RTT): " + name + ", get wall time (median of \(n) rounds)",
                figure: median[keyPath: get], unit: "MiB/s",
                baselineName: "one CUBIC TCP flow moving the same bytes, same round",
                baseline: median[keyPath: cubic], goal: goal)
        }
        return [
            row("\(sizes[1] >> 20) MiB, fresh joiner", \.fresh50, \.cubic50, goal: "-"),
            row("\(sizes[2] >> 20) MiB, fresh joiner", \.fresh100, \.cubic100, goal: "-"),
            row("\(sizes[1] >> 20) MiB, same joiner after 8 MiB", \.same50, \.cubic50, goal: "≥ 1.5×"),
            row(
                "\(sizes[2] >> 20) MiB, same joiner after 8 MiB and \(sizes[1] >> 20)", \.same100, \.cubic100,
                goal: "≥ 1.3×"),
        ]
    }

    /// Starts a lazy joiner on host 3 and `get`s `ids` one after another: each get's wall time as
    /// MiB/s.
    static func timedGets(mesh: Holders, ids: [String], sizes: [Int], tools: Tools) async throws -> [Double] {
        let joiner = try NodeProcess(
            [
                "run", "--listen", "\(tools.lab.addresses[3]):0", "--invite", mesh.invite,
                "--lazy", "--log-level", "info",
            ], launcher: tools.lab.launcher(3))
        defer { TransferScenario.stop([joiner]) }
        try await (mesh.nodes + [joiner]).waitForMesh(alive: 4)
        try await waitUntil("the joiner lists the attachments", timeout: .seconds(30)) {
            Set((try? TransferScenario.client(joiner).status().attachments.map(\.id)) ?? []).isSuperset(of: ids)
        }
        var rates: [Double] = []
        for (index, (id, size)) in zip(ids, sizes).enumerated() {
            let start = Date().timeIntervalSinceReferenceDate
            let get = try ChildProcess(
                executable: NodeProcess.executable,
                arguments: [
                    "get", "--data-dir", joiner.dataDirectory, id, "--output",
                    joiner.dataDirectory + "/out\(index).bin",
                ])
            defer { if get.isRunning { get.signal(SIGKILL); _ = get.waitUntilExit() } }
            let deadline = ContinuousClock.now + .seconds(120)
            while get.terminationStatus == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            guard let status = get.terminationStatus else { throw NodeProcessError.timeout("get of \(size >> 20) MiB") }
            guard status == 0 else { throw NodeProcessError.exited(status: status, stderr: get.standardError) }
            rates.append(Double(size) / 1_048_576 / max(Date().timeIntervalSinceReferenceDate - start, 1e-3))
            try? FileManager.default.removeItem(atPath: joiner.dataDirectory + "/out\(index).bin")
        }
        return rates
    }
}
