import Foundation
import GroupMesh
import MeshTestKit

/// Issue 19's NAT laboratory with real release-built processes (root only): a public member P
/// (lazy) and two homes behind MASQUERADE routers (`NATLab`), each home node joined with P's
/// invite. Measured:
///
/// - the time from the home nodes' start to a punched path between the homes, both ways (each
///   run with fresh nodes and routers whose mappings were flushed);
/// - a `get` at home 1 of a 50 MiB attachment home 0 added (the only holder: P and home 1 are
///   lazy), across the punched path: the fetch rate (its "fetched" log line, and its second half)
///   and the `get` wall time, beside raw UDP through the same two NATs (the same datagram size,
///   socket setup and flow control as `RawUDPTransfer`, home 0 → home 1).
enum NATLabScenario {
    static let port: UInt16 = 7946
    static let rawPort: UInt16 = 7950

    static func run(quick: Bool) async throws -> [BenchResult] {
        if let reason = NATLab.unavailableReason {
            print("natlab: \(reason)")
            return []
        }
        let runs = quick ? 1 : 3
        let size = 50 << 20
        let lab = try NATLab(publicHosts: 1, homes: [.endpointIndependent, .endpointIndependent])
        defer { lab.tearDown() }
        let directory = NodeProcess.makeTemporaryDirectory("bench-natlab")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/attachment.bin"
        var generator = SystemRandomNumberGenerator()
        try writeRandomFile(file, size: size, using: &generator)

        var punchTimes: [Double] = []
        var fetches: [Fetch] = []
        for run in 0..<runs {
            // Each run starts from routers that remember nothing.
            if NATLab.conntrackCommand != nil { for home in lab.homes.indices { _ = try? lab.flushConntrack(home: home) } }
            let outcome = try await oneRun(lab: lab, file: file, size: size)
            punchTimes.append(outcome.punch)
            fetches.append(outcome.fetch)
            print("  run \(run + 1): punched both ways \(format(outcome.punch)) s after the homes started; get: fetch "
                  + "\(format(outcome.fetch.rate)) MiB/s (second half \(format(outcome.fetch.secondHalf))), wall time "
                  + "\(format(outcome.fetch.getRate)) MiB/s, datagrams \(outcome.fetch.datagramSize) B")
        }
        let raw = (0..<runs).compactMap { _ in rawThroughNATs(lab: lab, size: size) }
        let rawRate = median(raw)
        print("  raw UDP home 0 → home 1 through both NATs (1,472 B datagrams, GSO/GRO): "
              + raw.map { format($0) }.joined(separator: ", ") + " MiB/s")
        let rawName = "raw UDP through the same two NATs"
        return [
            BenchResult(scenario: "natlab: home nodes started → punched path between two MASQUERADE homes (median of \(runs))",
                        figure: median(punchTimes), unit: "s", baselineName: "slowest run", baseline: punchTimes.max() ?? 0,
                        goal: "-"),
            BenchResult(scenario: "natlab: get of 50 MiB across the punched path, fetch rate", figure: median(fetches.map(\.rate)),
                        unit: "MiB/s", baselineName: rawName, baseline: rawRate, goal: "-"),
            BenchResult(scenario: "natlab: the fetch's second half", figure: median(fetches.map(\.secondHalf)),
                        unit: "MiB/s", baselineName: rawName, baseline: rawRate, goal: "-"),
            BenchResult(scenario: "natlab: get wall time", figure: median(fetches.map(\.getRate)), unit: "MiB/s",
                        baselineName: "the fetch alone", baseline: median(fetches.map(\.rate)), goal: "-"),
        ]
    }

    struct Fetch { var rate = 0.0, secondHalf = 0.0, getRate = 0.0, datagramSize = 0 }

    static func oneRun(lab: NATLab, file: String, size: Int) async throws -> (punch: Double, fetch: Fetch) {
        var nodes: [NodeProcess] = []
        defer { TransferScenario.stop(nodes) }
        func start(_ name: String, on host: NATLab.Host, invite: String?, lazy: Bool) throws -> NodeProcess {
            var arguments = ["run", "--listen", "0.0.0.0:\(port)", "--name", name, "--log-level", "info"]
            if let invite { arguments += ["--invite", invite] }
            if lazy { arguments.append("--lazy") }
            let node = try NodeProcess(arguments, launcher: lab.launcher(host))
            nodes.append(node)
            return node
        }
        let p = try start("p", on: .publicHost(0), invite: nil, lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        let started = ContinuousClock.now
        let h0 = try start("h0", on: .home(0), invite: invite, lazy: false)
        let h1 = try start("h1", on: .home(1), invite: invite, lazy: true)
        func punched(_ node: NodeProcess, _ other: String) -> Bool {
            (try? TransferScenario.client(node).status().members.contains { $0.name == other && $0.path == "punched" }) ?? false
        }
        try await waitUntil("both homes punched", timeout: .seconds(60), every: .milliseconds(20)) {
            punched(h0, "h1") && punched(h1, "h0")
        }
        let punch = (ContinuousClock.now - started).seconds

        let id = try await TransferScenario.attach(file, on: h0)
        try await waitUntil("home 1 lists the attachment", timeout: .seconds(30), every: .milliseconds(20)) {
            (try? TransferScenario.client(h1).status().attachments.contains { $0.id == id }) ?? false
        }
        let output = h1.dataDirectory + "/fetched.bin"
        let getStarted = ContinuousClock.now
        let get = try await NodeProcess.runCommand(["get", "--data-dir", h1.dataDirectory, id, "--output", output],
                                                   timeout: .seconds(300))
        let getSeconds = (ContinuousClock.now - getStarted).seconds
        guard get.status == 0 else { throw NodeProcessError.exited(status: get.status, stderr: get.stderr) }
        guard punched(h1, "h0") else { throw NodeProcessError.timeout("the path was no longer punched after the get") }
        var fetch = Fetch(getRate: Double(size) / 1_048_576 / max(getSeconds, 1e-3))
        if let line = try? await h1.waitForLine(prefix: "", timeout: .seconds(5), onStderr: true, containing: " fetched"),
           let seconds = TransferScenario.field("seconds", in: line), seconds > 0 {
            fetch.rate = Double(size) / 1_048_576 / seconds
            fetch.secondHalf = TransferScenario.field("secondHalfMiBps", in: line) ?? 0
        }
        fetch.datagramSize = (try? TransferScenario.client(h1).status().members.compactMap(\.datagramSize).max()) ?? 0
        return (punch, fetch)
    }

    /// Raw UDP from home 0 to home 1 through both routers, after a raw punch; nil if it failed.
    static func rawThroughNATs(lab: NATLab, size: Int) -> Double? {
        guard let sender = try? lab.udpSocket(on: .home(0), port: rawPort) else { return nil }
        defer { close(sender) }
        guard let receiver = try? lab.udpSocket(on: .home(1), port: rawPort) else { return nil }
        defer { close(receiver) }
        guard lab.punchRaw((home: 0, fd: sender), (home: 1, fd: receiver), port: rawPort) else {
            print("  raw UDP: the raw punch between the homes failed")
            return nil
        }
        var destination = sockaddr_in()
        destination.sin_family = sa_family_t(AF_INET)
        destination.sin_port = rawPort.bigEndian
        inet_pton(AF_INET, lab.homes[1].publicAddress, &destination.sin_addr)
        let result = RawUDPTransfer.run(bytes: size, datagramSize: 1472, sender: sender, receiver: receiver,
                                        destination: destination)
        return result.mebibytesPerSecond
    }

    static func format(_ value: Double) -> String { BenchReport.format(value) }
}

private extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
