import Foundation
import GroupMesh
import MeshTestKit

/// The NAT laboratory with real release-built processes (root only): a public member P
/// (lazy) and two homes behind MASQUERADE routers (`NATLab`), each home node joined with P's
/// invite. Measured:
///
/// - the time from the home nodes' start to a punched path between the homes, both ways (each
///   run with fresh nodes and routers whose mappings were flushed);
/// - a `get` at home 1 of a 50 MiB attachment home 0 added (the only holder: P and home 1 are
///   lazy), across the punched path: the fetch rate (its "fetched" log line, and its second half)
///   and the `get` wall time, beside raw UDP through the same two NATs (the same datagram size,
///   socket setup and flow control as `RawUDPTransfer`, home 0 → home 1);
/// - with two homes behind `MASQUERADE --random-fully` (symmetric), which cannot punch (a birthday
///   round needs one side that is not symmetric): the time to a relayed path through P both ways,
///   a `get` of 20 MiB through it (P's budget sized by what it measured), and P's CPU time per MiB
///   it carried beside the holder's;
/// - with both homes' lines capped at `NATLAB_LINE_MIBPS` (10 MiB/s unless set) each way (`tc tbf`
///   on the routers' legs on the internet), a `get` of 20 MiB across the punched path and one
///   through the relay: what the lines carry is the bottleneck, and the relayed `get` should reach
///   0.8× of the direct one; and the same through a TURN server (a real coturn on P's host, P
///   relaying nothing): the relay when no member can be one.
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
        // NATLAB_RELAY_ONLY=1 skips the uncapped punched runs and raw UDP (while working on relays).
        let relayOnly = ProcessInfo.processInfo.environment["NATLAB_RELAY_ONLY"] == "1"
        for run in 0..<(relayOnly ? 0 : runs) {
            let outcome = try await oneRun(lab: lab, file: file, size: size)
            punchTimes.append(outcome.punch)
            fetches.append(outcome.fetch)
            print(
                "  run \(run + 1): punched both ways \(format(outcome.punch)) s after the homes started; get: fetch "
                    + "\(format(outcome.fetch.rate)) MiB/s (second half \(format(outcome.fetch.secondHalf))), wall time "
                    + "\(format(outcome.fetch.getRate)) MiB/s, datagrams \(outcome.fetch.datagramSize) B")
        }
        let raw = (0..<(relayOnly ? 0 : runs)).compactMap { _ in rawThroughNATs(lab: lab, size: size) }
        let rawRate = median(raw)
        print(
            "  raw UDP home 0 → home 1 through both NATs (1,472 B datagrams, GSO/GRO): "
                + raw.map { format($0) }.joined(separator: ", ") + " MiB/s")
        let rawName = "raw UDP through the same two NATs"
        let relayFile = directory + "/relayed.bin"
        try writeRandomFile(relayFile, size: relaySize, using: &generator)
        let lineRate = Self.lineRate
        let lineName = "lines capped at \(format(Double(lineRate) / 1_048_576)) MiB/s"
        var directOnLines: [Fetch] = []
        for home in lab.homes.indices { try lab.capLine(home: home, bytesPerSecond: lineRate) }
        for run in 0..<runs {
            let outcome = try await pairRun(lab: lab, file: relayFile, size: relaySize, path: "punched")
            directOnLines.append(outcome.fetch)
            print(
                "  run \(run + 1), \(lineName): punched get of 20 MiB: fetch \(format(outcome.fetch.rate)) MiB/s, "
                    + "wall time \(format(outcome.fetch.getRate)) MiB/s")
        }
        for home in lab.homes.indices { try lab.capLine(home: home, bytesPerSecond: nil) }
        let relayLab = try NATLab(publicHosts: 1, homes: [.symmetric, .symmetric])
        defer { relayLab.tearDown() }
        var relays: [Relayed] = []
        for run in 0..<runs {
            let outcome = try await relayRun(lab: relayLab, file: relayFile)
            relays.append(outcome)
            print(
                "  run \(run + 1): relayed both ways \(format(outcome.relayed)) s after the homes started; get of 20 MiB: "
                    + "fetch \(format(outcome.fetch)) MiB/s, wall time \(format(outcome.get)) MiB/s; the relay's CPU "
                    + "\(format(outcome.relayCPU)) ms per MiB carried, the holder's \(format(outcome.holderCPU)) ms per MiB sent"
                    + "; \(outcome.relayStatus)")
        }
        var relayedOnLines: [Relayed] = []
        for home in relayLab.homes.indices { try relayLab.capLine(home: home, bytesPerSecond: lineRate) }
        for run in 0..<runs {
            let outcome = try await relayRun(lab: relayLab, file: relayFile)
            relayedOnLines.append(outcome)
            print(
                "  run \(run + 1), \(lineName): relayed get of 20 MiB: fetch \(format(outcome.fetch)) MiB/s, wall time "
                    + "\(format(outcome.get)) MiB/s; \(outcome.relayStatus)")
        }
        var turnOnLines: [Fetch] = []
        if let reason = LabCoturn.unavailableReason {
            print("  TURN: \(reason)")
        } else {
            let coturn = try await LabCoturn(lab: relayLab, publicHost: 0)
            defer { coturn.stop() }
            for run in 0..<runs {
                let outcome = try await pairRun(
                    lab: relayLab, file: relayFile, size: relaySize, path: "TURN", turn: coturn)
                turnOnLines.append(outcome.fetch)
                print(
                    "  run \(run + 1), \(lineName): get of 20 MiB through TURN: fetch \(format(outcome.fetch.rate)) MiB/s, "
                        + "wall time \(format(outcome.fetch.getRate)) MiB/s")
            }
        }
        let directGet = median(directOnLines.map(\.getRate)), relayedGet = median(relayedOnLines.map(\.get))
        let turnGet = turnOnLines.isEmpty ? 0 : median(turnOnLines.map(\.getRate))
        print("  \(lineName): through TURN ÷ direct get \(format(turnGet / max(directGet, 1e-9)))×")
        print(
            "  \(lineName): relayed ÷ direct get \(format(relayedGet / max(directGet, 1e-9)))× (fetch "
                + "\(format(median(relayedOnLines.map(\.fetch)) / max(median(directOnLines.map(\.rate)), 1e-9)))×)")
        return [
            BenchResult(
                scenario: "natlab: home nodes started → punched path between two MASQUERADE homes (median of \(runs))",
                figure: median(punchTimes), unit: "s", baselineName: "slowest run", baseline: punchTimes.max() ?? 0,
                goal: "-"),
            BenchResult(
                scenario: "natlab: get of 50 MiB across the punched path, fetch rate",
                figure: median(fetches.map(\.rate)),
                unit: "MiB/s", baselineName: rawName, baseline: rawRate, goal: "-"),
            BenchResult(
                scenario: "natlab: the fetch's second half", figure: median(fetches.map(\.secondHalf)),
                unit: "MiB/s", baselineName: rawName, baseline: rawRate, goal: "-"),
            BenchResult(
                scenario: "natlab: get wall time", figure: median(fetches.map(\.getRate)), unit: "MiB/s",
                baselineName: "the fetch alone", baseline: median(fetches.map(\.rate)), goal: "-"),
            BenchResult(
                scenario: "natlab: home nodes started → relayed path between two symmetric homes",
                figure: median(relays.map(\.relayed)), unit: "s", baselineName: "slowest run",
                baseline: relays.map(\.relayed).max() ?? 0, goal: "-"),
            BenchResult(
                scenario: "natlab: get of 20 MiB through a relay, wall time", figure: median(relays.map(\.get)),
                unit: "MiB/s", baselineName: "the punched get's (first lab, 50 MiB)",
                baseline: median(fetches.map(\.getRate)), goal: "-"),
            BenchResult(
                scenario: "natlab: the relay's CPU per MiB carried", figure: median(relays.map(\.relayCPU)),
                unit: "ms/MiB", baselineName: "the holder's per MiB sent", baseline: median(relays.map(\.holderCPU)),
                goal: "-"),
            BenchResult(
                scenario: "natlab: get of 20 MiB across the punched path, \(lineName), wall time",
                figure: directGet, unit: "MiB/s", baselineName: "the lines' rate",
                baseline: Double(lineRate) / 1_048_576, goal: "-"),
            BenchResult(
                scenario: "natlab: get of 20 MiB through a relay, \(lineName), wall time", figure: relayedGet,
                unit: "MiB/s", baselineName: "the punched path's through the same lines", baseline: directGet,
                goal: "≥ 0.8×"),
        ]
            + (turnOnLines.isEmpty
                ? []
                : [
                    BenchResult(
                        scenario: "natlab: get of 20 MiB through TURN (coturn), \(lineName), wall time",
                        figure: turnGet,
                        unit: "MiB/s", baselineName: "the punched path's through the same lines", baseline: directGet,
                        goal: "≥ 0.8×")
                ])
    }

    static let relaySize = 20 << 20

    struct Relayed {
        var relayed = 0.0, fetch = 0.0, get = 0.0, relayCPU = 0.0, holderCPU = 0.0
        /// The relay's budget and its own CPU measure after the get, as its status says.
        var relayStatus = ""
    }

    /// Each home line's rate for the capped runs: `NATLAB_LINE_MIBPS`, else 10 MiB/s (the nodes'
    /// CPU, not the line, would bound much more on a 2-core machine).
    static var lineRate: Int {
        let text = ProcessInfo.processInfo.environment["NATLAB_LINE_MIBPS"] ?? ""
        guard let mebibytes = Double(text), mebibytes > 0 else { return 10 << 20 }
        return Int(mebibytes * 1_048_576)
    }
    struct Fetch { var rate = 0.0, secondHalf = 0.0, getRate = 0.0, datagramSize = 0 }

    /// P on the internet, s behind a symmetric NAT holding the file, h behind MASQUERADE fetching
    /// it (P and h lazy): everything between s and h goes through P.
    static func relayRun(lab: NATLab, file: String) async throws -> Relayed {
        let run = try await pairRun(lab: lab, file: file, size: relaySize, path: "relayed")
        let mebibytes = Double(relaySize) / 1_048_576
        var status = "relay status: -"
        if let relay = run.relay {
            let mib = { (bytes: Int?) in bytes.map { format(Double($0) / 1_048_576) } ?? "-" }
            status =
                "relay budget \(mib(relay.budget)) MiB/s (measured \(mib(relay.measuredCapacity)) MiB/s), "
                + "dropped over it \(relay.droppedOverRate) of \(relay.forwardedDatagrams + relay.droppedOverRate), "
                + "its own CPU measure \(relay.cpuMillisecondsPerMiB.map { format($0) } ?? "-") ms/MiB"
        }
        return Relayed(
            relayed: run.pathTime, fetch: run.fetch.rate, get: run.fetch.getRate,
            relayCPU: run.cpu.public * 1000 / mebibytes, holderCPU: run.cpu.holder * 1000 / mebibytes,
            relayStatus: status)
    }

    static func oneRun(lab: NATLab, file: String, size: Int) async throws -> (punch: Double, fetch: Fetch) {
        let run = try await pairRun(lab: lab, file: file, size: size, path: "punched")
        return (run.pathTime, run.fetch)
    }

    /// Fresh nodes on routers that remember nothing: P (lazy) on the internet, home 0 holding
    /// `file`, home 1 (lazy) fetching it with `get` once each home shows the other on `path`
    /// (`punched`, `relayed`). How long that took from the homes' start, the fetch, and the CPU
    /// seconds P and home 0 spent during the `get`.
    ///
    /// With `turn`, P relays nothing and the homes use that TURN server: `path` is then `TURN`,
    /// a member reached at an address on the server.
    static func pairRun(
        lab: NATLab, file: String, size: Int, path: String, turn: LabCoturn? = nil
    ) async throws
        -> (pathTime: Double, fetch: Fetch, cpu: (public: Double, holder: Double), relay: StatusReport.RelayInfo?)
    {
        if NATLab.conntrackCommand != nil { for home in lab.homes.indices { _ = try? lab.flushConntrack(home: home) } }
        var nodes: [NodeProcess] = []
        defer { TransferScenario.stop(nodes) }
        func start(_ name: String, on host: NATLab.Host, invite: String?, lazy: Bool) throws -> NodeProcess {
            var extra: [String] = []
            if let turn {
                extra = host == .publicHost(0) ? ["--no-relay"] : ["--turn", turn.turnURL, "--stun", turn.endpoint]
            }
            let node = try startNode(name, on: host, in: lab, invite: invite, lazy: lazy, extra: extra)
            nodes.append(node)
            return node
        }
        let p = try start("p", on: .publicHost(0), invite: nil, lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        let started = ContinuousClock.now
        let h0 = try start("h0", on: .home(0), invite: invite, lazy: false)
        let h1 = try start("h1", on: .home(1), invite: invite, lazy: true)
        func isOnPath(_ member: StatusReport.MemberInfo) -> Bool {
            if let turn { return member.pathAddress.hasPrefix(turn.address + ":") }
            return member.path == path
        }
        func onPath(_ node: NodeProcess, _ other: String) -> Bool {
            (try? TransferScenario.client(node).status().members.contains { $0.name == other && isOnPath($0) }) ?? false
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
        let get = try await NodeProcess.runCommand(
            ["get", "--data-dir", h1.dataDirectory, id, "--output", output],
            timeout: .seconds(300))
        let getSeconds = (ContinuousClock.now - getStarted).seconds
        let cpu = (ProcessStats.cpuSeconds(p.pid) - cpuBefore.0, ProcessStats.cpuSeconds(h0.pid) - cpuBefore.1)
        guard get.status == 0 else { throw NodeProcessError.exited(status: get.status, stderr: get.stderr) }
        // A relayed pair is introduced again now and then (5, 10, 20… s apart): while its punch
        // rounds run its path says `punching`, but everything still goes through the relay.
        func stillOnPath(_ node: NodeProcess, _ other: String) -> Bool {
            guard let member = try? TransferScenario.client(node).status().members.first(where: { $0.name == other })
            else {
                return false
            }
            return isOnPath(member) || (path == "relayed" && member.relay != nil)
        }
        guard stillOnPath(h1, "h0") else {
            let paths = [h0, h1].map { node in
                ((try? TransferScenario.client(node).status().members.map { "\($0.name): \($0.path)" }) ?? [])
                    .joined(separator: ", ")
            }
            throw NodeProcessError.timeout(
                "the path was no longer \(path) after the get (h0 sees \(paths[0]); "
                    + "h1 sees \(paths[1]))")
        }
        var fetch = Fetch(getRate: Double(size) / 1_048_576 / max(getSeconds, 1e-3))
        if let line = try? await h1.waitForLine(
            prefix: "", timeout: .seconds(5), onStderr: true, containing: " fetched"),
            let seconds = TransferScenario.field("seconds", in: line), seconds > 0
        {
            fetch.rate = Double(size) / 1_048_576 / seconds
            fetch.secondHalf = TransferScenario.field("secondHalfMiBps", in: line) ?? 0
        }
        fetch.datagramSize = (try? TransferScenario.client(h1).status().members.compactMap(\.datagramSize).max()) ?? 0
        let relay = try? TransferScenario.client(p).status().counters.relay
        return (pathTime, fetch, cpu, relay)
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
        let result = RawUDPTransfer.run(
            bytes: size, datagramSize: 1472, sender: sender, receiver: receiver,
            destination: destination)
        return result.mebibytesPerSecond
    }

    /// A release `groupmesh run` inside `host`, at the lab's port, logging its fetches.
    static func startNode(
        _ name: String, on host: NATLab.Host, in lab: NATLab, invite: String?, lazy: Bool,
        extra: [String] = []
    ) throws -> NodeProcess {
        var arguments = ["run", "--listen", "0.0.0.0:\(port)", "--name", name, "--log-level", "info"] + extra
        if let invite { arguments += ["--invite", invite] }
        if lazy { arguments.append("--lazy") }
        return try NodeProcess(arguments, launcher: lab.launcher(host))
    }

    static func format(_ value: Double) -> String { BenchReport.format(value) }
}

private extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
