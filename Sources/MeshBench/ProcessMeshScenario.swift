import Foundation
import GroupMesh
import MeshCore
import MeshTestKit

/// Real `groupmesh run` processes on loopback: the time until every survivor of a
/// 50-node mesh sees a SIGKILLed node dead, beside the lan profile's minimum suspicion time,
/// and CPU per idle node, beside a node that is alone.
enum ProcessMeshScenario {
    static func run(quick: Bool) async throws -> [BenchResult] {
        let count = quick ? 20 : 50
        let runs = quick ? 1 : 3
        var detections: [Double] = []
        var idleCPU: [Double] = []
        var aloneCPU: [Double] = []
        for _ in 0..<runs {
            let (detection, idle, alone) = try await once(count: count)
            detections.append(detection)
            idleCPU.append(idle)
            aloneCPU.append(alone)
        }
        let settings = MembershipSettings.lan
        let floor = settings.suspicionTimeouts(memberCount: count).minimum
        return [
            BenchResult(
                scenario: "\(count) processes: SIGKILL seen dead by all", figure: median(detections),
                unit: "s", baselineName: "lan suspicion minimum", baseline: floor.milliseconds / 1000,
                goal: "≤ 5 s"),
            BenchResult(
                scenario: "\(count) processes: CPU per idle node", figure: median(idleCPU),
                unit: "% of a core", baselineName: "a node alone", baseline: median(aloneCPU), goal: "-"),
        ]
    }

    private static func once(count: Int) async throws -> (detection: Double, idleCPU: Double, aloneCPU: Double) {
        var nodes: [NodeProcess] = []
        var keepData = false
        defer {
            for node in nodes {
                node.signal(SIGKILL)
                if !keepData { try? FileManager.default.removeItem(atPath: node.dataDirectory) }
            }
        }

        let first = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        nodes.append(first)
        let invite = try await first.waitForLine(prefix: "invite:")
        let alone = try await cpuPercent(of: [first], over: .seconds(3))
        for _ in 1..<count {
            let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--invite", invite])
            nodes.append(node)
            _ = try await node.waitForLine(prefix: "listening:")
        }
        let clients = nodes.map { ControlClient(directory: DataDirectory(path: $0.dataDirectory)) }
        func aliveCounts() -> [Int] {
            clients.map { client in
                (try? client.status())?.members.filter { $0.state == "alive" }.count ?? -1
            }
        }
        do {
            try await waitUntil("mesh formation", timeout: .seconds(120), every: .milliseconds(200)) {
                aliveCounts().allSatisfy { $0 == count }
            }
        } catch {
            keepData = ProcessInfo.processInfo.environment["BENCH_KEEP"] != nil
            // Which nodes see how many: enough to tell a node that never joined from a split.
            let counts = aliveCounts()
            let lagging = counts.enumerated().filter { $0.element != count }
                .map { "node \($0.offset) (\(nodes[$0.offset].dataDirectory)): \($0.element) alive" }
            throw NodeProcessError.timeout(
                "mesh formation of \(count) within 120 s; \(lagging.joined(separator: "; "))")
        }
        let idle = try await cpuPercent(of: nodes, over: .seconds(5))

        let victim = nodes[count / 2]
        let victimID = try clients[count / 2].status().`self`.id
        let survivors = clients.enumerated().filter { $0.offset != count / 2 }.map(\.element)
        let start = ContinuousClock.now
        victim.signal(SIGKILL)
        var pending = survivors
        while !pending.isEmpty {
            guard ContinuousClock.now - start < .seconds(60) else { throw NodeProcessError.timeout("dead detection") }
            pending = pending.filter { client in
                let state = (try? client.status())?
                    .members.first { $0.id == victimID }?.state
                return state != "dead"
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let elapsed = ContinuousClock.now - start
        return (elapsed.milliseconds / 1000, idle, alone)
    }

    /// Average CPU use of the processes over `window`, in percent of one core, from /proc.
    private static func cpuPercent(of nodes: [NodeProcess], over window: Duration) async throws -> Double {
        let before = nodes.map { ProcessStats.cpuSeconds($0.pid) }
        try await Task.sleep(for: window)
        let after = nodes.map { ProcessStats.cpuSeconds($0.pid) }
        let used = zip(before, after).map { $1 - $0 }
        let seconds = window.milliseconds / 1000
        return used.reduce(0, +) / Double(nodes.count) / seconds * 100
    }
}
