import Foundation
import GroupMesh
import MeshCore
import MeshCrypto
import MeshTestKit

/// Membership with N real `groupmesh run` processes on loopback, the four figures the
/// issue compares with Serf: all see all alive after the joins, a SIGKILLed node seen dead by
/// all, a leave seen by all, and idle traffic per node with IP and UDP headers over a full
/// push-pull period. Each beside the bound the lan settings imply.
enum MembershipProcessScenario {
    /// IPv4 (20) and UDP (8) headers, which the node's counters do not include.
    static let headerBytes = 28.0

    static func run(quick: Bool) async throws -> [BenchResult] {
        var results: [BenchResult] = []
        for count in quick ? [20] : [20, 40] {
            results += try await once(count: count, quick: quick)
        }
        return results
    }

    private static func once(count: Int, quick: Bool) async throws -> [BenchResult] {
        let settings = MembershipSettings.lan
        var nodes: [NodeProcess] = []
        defer {
            for node in nodes {
                node.signal(SIGKILL)
                try? FileManager.default.removeItem(atPath: node.dataDirectory)
            }
        }
        let first = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        nodes.append(first)
        let invite = try await first.waitForLine(prefix: "invite:")
        let clients =
            [ControlClient(directory: DataDirectory(path: first.dataDirectory))]
            + (try await startJoiners(count - 1, invite: invite, into: &nodes))
        // From the last join sent (its `listening:` line) until every node sees every node alive.
        let joined = ContinuousClock.now
        let everyone = count
        try await waitForAll(clients, timeout: .seconds(60), "all see all \(count) alive") { status in
            status.members.filter { $0.state == "alive" }.count == everyone
        }
        let convergence = ContinuousClock.now - joined

        // Idle: a full push-pull period (the interval grows past 32 members, jittered ±25%).
        let period = settings.pushPullInterval * (count <= 32 ? 1.25 : 2.5)
        let window = quick ? .seconds(15) : period
        let before = try clients.map { try $0.status().counters }
        try await Task.sleep(for: window)
        let after = try clients.map { try $0.status().counters }
        let seconds = window.milliseconds / 1000
        var idle: [Double] = [], membershipIdle: [Double] = []
        for (old, new) in zip(before, after) {
            let datagrams = Double(new.datagramsSent - old.datagramsSent)
            idle.append((Double(new.bytesSent - old.bytesSent) + datagrams * headerBytes) / seconds)
            let oldKind = old.traffic["membership"], newKind = new.traffic["membership"]
            let kindDatagrams = Double((newKind?.datagramsSent ?? 0) - (oldKind?.datagramsSent ?? 0))
            let kindBytes = Double((newKind?.bytesSent ?? 0) - (oldKind?.bytesSent ?? 0))
            membershipIdle.append((kindBytes + kindDatagrams * headerBytes) / seconds)
        }
        // The floor of probing alone: a probe and an ack per member per probe interval, each a
        // pairwise datagram of one frame (42 bytes of header, the 16-byte tag, an 11-byte probe
        // frame without its target) plus IP and UDP.
        let probeDatagram =
            DatagramHeader.fixedLength + PacketSealer.tagByteCount
            + FrameCodec.encodedLength(of: .probe(Probe(sequence: 1, target: nil)))
        let probeFloor = 2 * (Double(probeDatagram) + headerBytes) / (settings.probeInterval.milliseconds / 1000)

        // Every node alive until now (joins, the idle window): nobody may have been suspected.
        let suspicions = after.reduce(UInt64(0)) { $0 + $1.suspicionsRaised }

        // A leave, then a SIGKILL, each until every other node sees it.
        let leaverIndex = count - 1, victimIndex = count / 2
        let leaverID = try clients[leaverIndex].status().`self`.id
        let victimID = try clients[victimIndex].status().`self`.id
        let leaveStart = ContinuousClock.now
        nodes[leaverIndex].signal(SIGTERM)
        let stayers = clients.indices.filter { $0 != leaverIndex }.map { clients[$0] }
        try await waitForAll(stayers, timeout: .seconds(30), "the leave seen by all") { status in
            status.members.first { $0.id == leaverID }?.state == "left"
        }
        let leave = ContinuousClock.now - leaveStart
        let killStart = ContinuousClock.now
        nodes[victimIndex].signal(SIGKILL)
        let survivors = clients.indices.filter { $0 != leaverIndex && $0 != victimIndex }.map { clients[$0] }
        try await waitForAll(survivors, timeout: .seconds(60), "the SIGKILL seen dead by all") { status in
            status.members.first { $0.id == victimID }?.state == "dead"
        }
        let death = ContinuousClock.now - killStart

        // Bounds of the settings: an update crosses log_(fanout+1) N hops, each a news spacing
        // (and the loopback's delay, nothing next to it); the dead bound as PROTOCOL.md derives it.
        let hops = (log(Double(count)) / log(Double(settings.gossipFanout + 1))).rounded(.up)
        let spacing = (settings.newsGossipSpacing ?? settings.gossipInterval).milliseconds / 1000
        let deathBound = settings.deadDetectionBound(memberCount: count).milliseconds / 1000
        return [
            BenchResult(
                scenario: "N=\(count) processes: all see all alive after the joins",
                figure: convergence.milliseconds / 1000, unit: "s",
                baselineName: "\(Int(hops)) hops × news spacing", baseline: hops * spacing,
                goal: count == 20 ? "≤ 0.55 s (Serf)" : "≤ 0.91 s (Serf)"),
            BenchResult(
                scenario: "N=\(count) processes: a SIGKILLed node seen dead by all",
                figure: death.milliseconds / 1000, unit: "s", baselineName: "lan dead bound",
                baseline: deathBound, goal: "< 4 s"),
            BenchResult(
                scenario: "N=\(count) processes: a leave seen by all", figure: leave.milliseconds / 1000,
                unit: "s", baselineName: "\(Int(hops)) hops × news spacing", baseline: hops * spacing,
                goal: count == 20 ? "≤ 0.75 s (Serf)" : "≤ 1.15 s (Serf)"),
            BenchResult(
                scenario: "N=\(count) processes: idle traffic per node (IP+UDP)", figure: median(idle),
                unit: "B/s", baselineName: "probe and ack alone", baseline: probeFloor,
                goal: count == 20 ? "< 333 B/s (Serf)" : "< 311 B/s (Serf)"),
            BenchResult(
                scenario: "N=\(count) processes: of which membership", figure: median(membershipIdle),
                unit: "B/s", baselineName: "probe and ack alone", baseline: probeFloor, goal: "-"),
            BenchResult(
                scenario: "N=\(count) processes: suspicions of live nodes, joins and idle", figure: Double(suspicions),
                unit: "", baselineName: "none", baseline: 0, goal: "0"),
        ]
    }

    /// Starts `count` nodes joining with `invite`, one after the other (each once it is
    /// listening), and returns their control clients.
    private static func startJoiners(
        _ count: Int, invite: String, into nodes: inout [NodeProcess]
    ) async throws
        -> [ControlClient]
    {
        var clients: [ControlClient] = []
        for _ in 0..<count {
            let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--invite", invite])
            nodes.append(node)
            _ = try await node.waitForLine(prefix: "listening:")
            clients.append(ControlClient(directory: DataDirectory(path: node.dataDirectory)))
        }
        return clients
    }

    /// Polls every client's status every 10 ms until `condition` holds for all (bounded).
    private static func waitForAll(
        _ clients: [ControlClient], timeout: Duration, _ what: String,
        _ condition: @escaping (StatusReport) -> Bool
    ) async throws {
        var pending = clients
        try await waitUntil(what, timeout: timeout, every: .milliseconds(10)) {
            pending = pending.filter { client in !((try? client.status()).map(condition) ?? false) }
            return pending.isEmpty
        }
    }
}
