import Foundation
import GroupMesh
import MeshTestKit

/// Friends at home, every pair of home routers (root only): for each pair of router kinds, two
/// homes with no public member, a real coturn on the internet that both use for STUN and TURN,
/// and a real miniupnpd on the routers that map ports. Home 0 makes the session and prints its
/// invite; home 1 joins with it. Measured for each pair: how the homes reach each other once a
/// message crossed (direct, punched, relayed by a member, through TURN, or not at all), and the
/// time from the later start to the first acknowledged message.
enum NATMatrixScenario {
    /// A kind of home router.
    struct RouterKind: CustomStringConvertible {
        var name: String
        var mapping: NATLab.Mapping
        var inputFirewall = true
        var portMapping = false
        /// Behind a carrier's NAT too (double NAT).
        var carrier = false

        var description: String { name }
    }

    static let kinds = [
        RouterKind(name: "port-restricted", mapping: .endpointIndependent),
        RouterKind(name: "no firewall", mapping: .endpointIndependent, inputFirewall: false),
        RouterKind(name: "symmetric", mapping: .symmetric),
        RouterKind(name: "port-restricted + UPnP/PCP", mapping: .endpointIndependent, portMapping: true),
        RouterKind(name: "symmetric + UPnP/PCP", mapping: .symmetric, portMapping: true),
        RouterKind(name: "double NAT (carrier + home)", mapping: .endpointIndependent, carrier: true),
    ]

    struct Outcome {
        var first: RouterKind, second: RouterKind
        /// `direct`, `punched`, `relayed`, `TURN` or `unreachable` (the worse of the two views),
        /// 5 s after the first message, and once the pair went direct (or 60 s passed): a pair
        /// that started through TURN keeps punching.
        var path: String
        var seconds: Double?
        var settled: String = ""
        var directAfter: Double?
    }

    static func run(quick: Bool) async throws -> [BenchResult] {
        if let reason = NATLab.unavailableReason ?? LabCoturn.unavailableReason ?? NATLab.miniupnpdUnavailableReason {
            print("natmatrix: \(reason)")
            return []
        }
        var outcomes: [Outcome] = []
        // `NATMATRIX_KINDS=1,5` runs the pairs of those kinds only (numbered from 0, as listed).
        let chosen =
            ProcessInfo.processInfo.environment["NATMATRIX_KINDS"].map { text in
                text.split(separator: ",").compactMap { Int($0) }.filter { kinds.indices.contains($0) }.map {
                    kinds[$0]
                }
            } ?? kinds
        let pairs = chosen.indices.flatMap { i in chosen.indices.filter { $0 >= i }.map { (chosen[i], chosen[$0]) } }
        for (first, second) in quick ? Array(pairs.prefix(3)) : pairs {
            let outcome: Outcome
            do {
                outcome = try await pair(first, second)
            } catch {
                print("  \(first) × \(second): \(error)")
                outcome = Outcome(
                    first: first, second: second, path: "unreachable", seconds: nil, settled: "unreachable")
            }
            outcomes.append(outcome)
            print(
                "  \(first) × \(second): \(outcome.path)"
                    + (outcome.seconds.map {
                        ", first acknowledged message \(BenchReport.format($0)) s after the later start"
                    } ?? "")
                    + (outcome.path != outcome.settled && !outcome.settled.isEmpty
                        ? "; then \(outcome.settled)"
                            + (outcome.directAfter.map { " \(BenchReport.format($0)) s after the later start" }
                                ?? " after 60 s")
                        : ""))
        }
        // The pairs the goal speaks of: either side maps a port, or at least one is not symmetric
        // (a symmetric NAT against an endpoint-independent one is met by a birthday round).
        let eligible = outcomes.filter {
            $0.first.portMapping || $0.second.portMapping
                || $0.first.mapping != .symmetric || $0.second.mapping != .symmetric
        }
        let direct = eligible.filter { $0.settled == "direct" || $0.settled == "punched" }
        let times = outcomes.compactMap(\.seconds).sorted()
        let three = try await threeHomes()
        print(
            "  three homes behind mapping routers, no public member: first message between the joiners "
                + "\(BenchReport.format(three.firstMessage)) s after the last start; get of 20 MiB \(BenchReport.format(three.get)) s "
                + "(\(BenchReport.format(20 / max(three.get, 1e-3))) MiB/s)")
        return [
            BenchResult(
                scenario:
                    "natmatrix: three homes behind mapping routers, no public member: last start → first message between the two joiners",
                figure: three.firstMessage, unit: "s", baselineName: "goal", baseline: 2, goal: "≤ 2 s"),
            BenchResult(
                scenario: "natmatrix: three homes: get of 20 MiB from the first home at the third, wall time",
                figure: 20 / max(three.get, 1e-3), unit: "MiB/s", baselineName: "-", baseline: 0, goal: "-"),
            BenchResult(
                scenario: "natmatrix: pairs of home routers where one maps or one is not symmetric, "
                    + "direct within 60 s",
                figure: Double(direct.count), unit: "pairs", baselineName: "such pairs",
                baseline: Double(eligible.count),
                goal: "≥ 95%"),
            BenchResult(
                scenario: "natmatrix: every pair, a message acknowledged (any path)",
                figure: Double(outcomes.filter { $0.seconds != nil }.count), unit: "pairs", baselineName: "pairs",
                baseline: Double(outcomes.count), goal: "all"),
            BenchResult(
                scenario: "natmatrix: later start → first acknowledged message (median over the pairs)",
                figure: times.isEmpty ? 0 : times[times.count / 2], unit: "s", baselineName: "slowest pair",
                baseline: times.last ?? 0, goal: "≤ 2 s"),
        ]
    }

    /// One pair of homes, fresh routers and nodes.
    static func pair(_ first: RouterKind, _ second: RouterKind) async throws -> Outcome {
        let lab = try NATLab(
            publicHosts: 1, homes: [first.mapping, second.mapping],
            routerInputFirewalls: [first.inputFirewall, second.inputFirewall],
            carrierNAT: [first.carrier, second.carrier])
        defer { lab.tearDown() }
        let coturn = try await LabCoturn(lab: lab, publicHost: 0)
        defer { coturn.stop() }
        var routers: [Miniupnpd] = []
        defer { for router in routers { router.stop() } }
        for (index, kind) in [first, second].enumerated() where kind.portMapping {
            routers.append(try lab.startMiniupnpd(home: index))
        }
        var nodes: [NodeProcess] = []
        defer { TransferScenario.stop(nodes) }
        func start(_ name: String, home: Int, invite: String?) throws -> NodeProcess {
            var arguments = [
                "run", "--listen", "0.0.0.0:7946", "--name", name, "--print-invite",
                "--stun", coturn.endpoint, "--turn", coturn.turnURL,
            ]
            if let invite { arguments += ["--invite", invite] }
            let node = try NodeProcess(arguments, launcher: lab.launcher(.home(home)))
            nodes.append(node)
            return node
        }
        let h0 = try start("h0", home: 0, invite: nil)
        let invite = try await h0.waitForLine(prefix: "invite:")
        let started = ContinuousClock.now
        let h1 = try start("h1", home: 1, invite: invite)
        let acknowledged = try await firstAcknowledged(from: h1, to: "h0", since: started)
        guard acknowledged != nil else {
            return Outcome(first: first, second: second, path: "unreachable", seconds: nil, settled: "unreachable")
        }
        // Paths settle (a punch may follow a first message through TURN): each view is read
        // after a few seconds, and the worse of the two is the pair's.
        try await Task.sleep(for: .seconds(5))
        let order = ["direct", "punched", "relayed", "TURN", "unreachable"]
        func worst() async throws -> String {
            let views = [
                try await path(of: "h1", at: h0, coturn: coturn), try await path(of: "h0", at: h1, coturn: coturn),
            ]
            return views.max { (order.firstIndex(of: $0) ?? 4) < (order.firstIndex(of: $1) ?? 4) } ?? "unreachable"
        }
        var outcome = Outcome(first: first, second: second, path: try await worst(), seconds: acknowledged)
        outcome.settled = outcome.path
        let settleBy = started + .seconds(60)
        while outcome.settled != "direct", outcome.settled != "punched", ContinuousClock.now < settleBy {
            try await Task.sleep(for: .seconds(1))
            outcome.settled = try await worst()
        }
        if outcome.settled == "direct" || outcome.settled == "punched" {
            outcome.directAfter = seconds(ContinuousClock.now - started)
        }
        return outcome
    }

    /// Three homes behind routers that map ports (miniupnpd), no public member and no server:
    /// the first home's invite brings the other two in. The time from the third start to the
    /// first message acknowledged between the two joiners, and a `get` of 20 MiB at the third of
    /// what the first attached.
    static func threeHomes() async throws -> (firstMessage: Double, get: Double) {
        let lab = try NATLab(publicHosts: 0, homes: [.endpointIndependent, .endpointIndependent, .endpointIndependent])
        defer { lab.tearDown() }
        var routers: [Miniupnpd] = []
        defer { for router in routers { router.stop() } }
        for index in lab.homes.indices { routers.append(try lab.startMiniupnpd(home: index)) }
        var nodes: [NodeProcess] = []
        defer { TransferScenario.stop(nodes) }
        func start(_ name: String, home: Int, invite: String?) throws -> NodeProcess {
            var arguments = ["run", "--listen", "0.0.0.0:7946", "--name", name, "--print-invite", "--lazy"]
            if let invite { arguments += ["--invite", invite] }
            let node = try NodeProcess(arguments, launcher: lab.launcher(.home(home)))
            nodes.append(node)
            return node
        }
        let h0 = try start("h0", home: 0, invite: nil)
        let invite = try await h0.waitForLine(prefix: "invite:")
        _ = try start("h1", home: 1, invite: invite)
        let started = ContinuousClock.now
        let h2 = try start("h2", home: 2, invite: invite)
        let firstMessage = try await firstAcknowledged(from: h2, to: "h1", since: started) ?? 0
        let file = NodeProcess.makeTemporaryDirectory("bench-three-homes") + "/twenty.bin"
        defer { try? FileManager.default.removeItem(atPath: (file as NSString).deletingLastPathComponent) }
        var generator = SystemRandomNumberGenerator()
        try writeRandomFile(file, size: 20 << 20, using: &generator)
        let id = try await TransferScenario.attach(file, on: h0)
        try await waitUntil("h2 lists the attachment", timeout: .seconds(30), every: .milliseconds(50)) {
            (try? TransferScenario.client(h2).status().attachments.contains { $0.id == id }) ?? false
        }
        let getStarted = ContinuousClock.now
        let get = try await NodeProcess.runCommand(
            [
                "get", "--data-dir", h2.dataDirectory, id, "--output",
                h2.dataDirectory + "/got.bin",
            ], timeout: .seconds(300))
        guard get.status == 0 else { throw NodeProcessError.exited(status: get.status, stderr: get.stderr) }
        return (firstMessage, seconds(ContinuousClock.now - getStarted))
    }

    /// Sends from `sender` to the member named `receiver` until one send is acknowledged (at most
    /// 45 s): how long after `since` that was, or nil.
    static func firstAcknowledged(
        from sender: NodeProcess, to receiver: String, since started: ContinuousClock.Instant
    )
        async throws -> Double?
    {
        let deadline = ContinuousClock.now + .seconds(45)
        while ContinuousClock.now < deadline {
            let sent = try await NodeProcess.runCommand(
                ["send", "--data-dir", sender.dataDirectory, "--to", receiver, "hello"],
                timeout: .seconds(15))
            if sent.status == 0, sent.stderr.contains("sent to 1 member") {
                return seconds(ContinuousClock.now - started)
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// How `node` reaches `member`: its path, or `TURN` when it sends to a relayed address on the
    /// TURN server.
    static func path(of member: String, at node: NodeProcess, coturn: LabCoturn) async throws -> String {
        let status = try await node.status()
        guard let info = status.members.first(where: { $0.name == member }) else { return "unreachable" }
        if info.pathAddress?.hasPrefix(coturn.address + ":") == true { return "TURN" }
        return info.path ?? "direct"
    }
}
