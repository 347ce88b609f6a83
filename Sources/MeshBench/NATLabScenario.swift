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
///   socket setup and flow control as `RawUDPTransfer`, home 0 → home 1);
/// - with a home behind `MASQUERADE --random-fully` (symmetric) and one behind MASQUERADE, which
///   cannot punch: the time to a relayed path through P both ways, a `get` of 20 MiB through it
///   (P carries 4 MiB/s per pair at most), and P's CPU time per MiB it carried beside the holder's.
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
        let relayLab = try NATLab(publicHosts: 1, homes: [.symmetric, .endpointIndependent])
        defer { relayLab.tearDown() }
        let relayFile = directory + "/relayed.bin"
        try writeRandomFile(relayFile, size: relaySize, using: &generator)
        var relays: [Relayed] = []
        for run in 0..<runs {
            let outcome = try await relayRun(lab: relayLab, file: relayFile)
            relays.append(outcome)
            print("  run \(run + 1): relayed both ways \(format(outcome.relayed)) s after the homes started; get of 20 MiB: "
                  + "fetch \(format(outcome.fetch)) MiB/s, wall time \(format(outcome.get)) MiB/s; the relay's CPU "
                  + "\(format(outcome.relayCPU)) ms per MiB carried, the holder's \(format(outcome.holderCPU)) ms per MiB sent")
        }
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
            BenchResult(scenario: "natlab: home nodes started → relayed path between a symmetric and a MASQUERADE home",
                        figure: median(relays.map(\.relayed)), unit: "s", baselineName: "slowest run",
                        baseline: relays.map(\.relayed).max() ?? 0, goal: "-"),
            BenchResult(scenario: "natlab: get of 20 MiB through a relay, wall time", figure: median(relays.map(\.get)),
                        unit: "MiB/s", baselineName: "the relay's per-pair rate", baseline: 4, goal: "-"),
            BenchResult(scenario: "natlab: the relay's CPU per MiB carried", figure: median(relays.map(\.relayCPU)),
                        unit: "ms/MiB", baselineName: "the holder's per MiB sent", baseline: median(relays.map(\.holderCPU)),
                        goal: "-"),
        ]
    }

    static let relaySize = 20 << 20

    struct Relayed { var relayed = 0.0, fetch = 0.0, get = 0.0, relayCPU = 0.0, holderCPU = 0.0 }
    struct Fetch { var rate = 0.0, secondHalf = 0.0, getRate = 0.0, datagramSize = 0 }

    /// P on the internet, s behind a symmetric NAT holding the file, h behind MASQUERADE fetching
    /// it (P and h lazy): everything between s and h goes through P.
    static func relayRun(lab: NATLab, file: String) async throws -> Relayed {
        let run = try await pairRun(lab: lab, file: file, size: relaySize, path: "relayed")
        let mebibytes = Double(relaySize) / 1_048_576
        return Relayed(relayed: run.pathTime, fetch: run.fetch.rate, get: run.fetch.getRate,
                       relayCPU: run.cpu.public * 1000 / mebibytes, holderCPU: run.cpu.holder * 1000 / mebibytes)
    }

    static func oneRun(lab: NATLab, file: String, size: Int) async throws -> (punch: Double, fetch: Fetch) {
        let run = try await pairRun(lab: lab, file: file, size: size, path: "punched")
        return (run.pathTime, run.fetch)
    }

    /// Fresh nodes on routers that remember nothing: P (lazy) on the internet, home 0 holding
    /// `file`, home 1 (lazy) fetching it with `get` once each home shows the other on `path`
    /// (`punched`, `relayed`). How long that took from the homes' start, the fetch, and the CPU
    /// seconds P and home 0 spent during the `get`.
    static func pairRun(lab: NATLab, file: String, size: Int, path: String) async throws
        -> (pathTime: Double, fetch: Fetch, cpu: (public: Double, holder: Double)) {
        if NATLab.conntrackCommand != nil { for home in lab.homes.indices { _ = try? lab.flushConntrack(home: home) } }
        var nodes: [NodeProcess] = []
        defer { TransferScenario.stop(nodes) }
        func start(_ name: String, on host: NATLab.Host, invite: String?, lazy: Bool) throws -> NodeProcess {
            let node = try startNode(name, on: host, in: lab, invite: invite, lazy: lazy)
            nodes.append(node)
            return node
        }
        let p = try start("p", on: .publicHost(0), invite: nil, lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        let started = ContinuousClock.now
        let h0 = try start("h0", on: .home(0), invite: invite, lazy: false)
        let h1 = try start("h1", on: .home(1), invite: invite, lazy: true)
        func onPath(_ node: NodeProcess, _ other: String) -> Bool {
            (try? TransferScenario.client(node).status().members.contains { $0.name == other && $0.path == path }) ?? false
        }
        try await waitUntil("both homes \(path)", timeout: .seconds(90), every: .milliseconds(20)) {
            onPath(h0, "h1") && onPath(h1, "h0")
        }
        let pathTime = (ContinuousClock.now - started).seconds

        let id = try await TransferScenario.attach(file, on: h0)
        try await waitUntil("home 1 lists the attachment", timeout: .seconds(30), every: .milliseconds(20)) {
            (try? TransferScenario.client(h1).status().attachments.contains { $0.id == id }) ?? false
        }
        let output = h1.dataDirectory + "/fetched.bin"
        let cpuBefore = (ProcessStats.cpuSeconds(p.pid), ProcessStats.cpuSeconds(h0.pid))
        let getStarted = ContinuousClock.now
        let get = try await NodeProcess.runCommand(["get", "--data-dir", h1.dataDirectory, id, "--output", output],
                                                   timeout: .seconds(300))
        let getSeconds = (ContinuousClock.now - getStarted).seconds
        let cpu = (ProcessStats.cpuSeconds(p.pid) - cpuBefore.0, ProcessStats.cpuSeconds(h0.pid) - cpuBefore.1)
        guard get.status == 0 else { throw NodeProcessError.exited(status: get.status, stderr: get.stderr) }
        guard onPath(h1, "h0") else { throw NodeProcessError.timeout("the path was no longer \(path) after the get") }
        var fetch = Fetch(getRate: Double(size) / 1_048_576 / max(getSeconds, 1e-3))
        if let line = try? await h1.waitForLine(prefix: "", timeout: .seconds(5), onStderr: true, containing: " fetched"),
           let seconds = TransferScenario.field("seconds", in: line), seconds > 0 {
            fetch.rate = Double(size) / 1_048_576 / seconds
            fetch.secondHalf = TransferScenario.field("secondHalfMiBps", in: line) ?? 0
        }
        fetch.datagramSize = (try? TransferScenario.client(h1).status().members.compactMap(\.datagramSize).max()) ?? 0
        return (pathTime, fetch, cpu)
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

    /// A release `groupmesh run` inside `host`, at the lab's port, logging its fetches.
    static func startNode(_ name: String, on host: NATLab.Host, in lab: NATLab, invite: String?, lazy: Bool) throws -> NodeProcess {
        var arguments = ["run", "--listen", "0.0.0.0:\(port)", "--name", name, "--log-level", "info"]
        if let invite { arguments += ["--invite", invite] }
        if lazy { arguments.append("--lazy") }
        return try NodeProcess(arguments, launcher: lab.launcher(host))
    }

    static func format(_ value: Double) -> String { BenchReport.format(value) }
}

private extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
