import Foundation
import GroupMesh
import MeshTestKit

/// Attachments between real release-built `groupmesh` processes on loopback:
/// a late joiner pulling from 1, 3 and 5 holders with the CPU each side spends per MiB (beside one
/// TCP stream and libtorrent moving the same file, `TransferPeers`), the same under 5% loss, the
/// peak memory of joiner and holders, and an upload to a mesh of 10.
enum TransferScenario {
    static let datagramSize = 1200

    static func run(quick: Bool) async throws -> [BenchResult] {
        let size = quick ? 32 << 20 : 100 << 20
        let runs = quick ? 1 : 3
        let mib = size >> 20
        let file = NodeProcess.makeTemporaryDirectory("bench-file") + "/payload.bin"
        var generator = SystemRandomNumberGenerator()
        let payload = try writeRandomFile(file, size: size, using: &generator)
        defer { try? FileManager.default.removeItem(atPath: (file as NSString).deletingLastPathComponent) }

        let raw = (0..<runs).map { _ in RawUDPTransfer.run(bytes: size, datagramSize: datagramSize) }
        let baseline = median(raw.map(\.mebibytesPerSecond))
        let rawName = "raw UDP, same datagrams and socket setup"
        // For scale: the same without GSO/GRO, one datagram per system call each way.
        let plain = median(
            (0..<runs).map { _ in
                RawUDPTransfer.run(bytes: size, datagramSize: datagramSize, offload: false).mebibytesPerSecond
            })
        var results: [BenchResult] = [
            BenchResult(
                scenario: "raw UDP, \(datagramSize) B datagrams, no GSO/GRO", figure: plain, unit: "MiB/s",
                baselineName: "with GSO/GRO", baseline: baseline, goal: "-")
        ]
        var cleanRate = 0.0
        var diskRates: [Double] = []
        // Real peers moving the same file, each run beside a `get` (TransferPeers).
        var streamRates: [Double] = [], torrentRates: [Double] = []
        let streamProblem = TransferPeers.streamProblem(), torrentProblem = TransferPeers.libtorrentProblem()
        if let streamProblem { print("  the TCP stream row is skipped: \(streamProblem)") }
        if let torrentProblem { print("  the libtorrent row is skipped: \(torrentProblem)") }
        try warmPageCache(bytes: 2 << 30)
        for holders in [1, 3, 5] {
            var outcomes: [LateJoin] = []
            for _ in 0..<runs {
                // Measured beside each `get` it is the ceiling of: the disk moves from run to run.
                if holders == 3 { diskRates.append(try diskRate(writing: payload)) }
                if holders == 1, streamProblem == nil {
                    streamRates += TransferPeers.sample("TCP stream") { try TransferPeers.tcpStream(file: file) }
                }
                if holders == 3, torrentProblem == nil {
                    torrentRates += TransferPeers.sample("libtorrent") {
                        try TransferPeers.libtorrent(file: file, seeders: 3)
                    }
                }
                outcomes.append(try await lateJoiner(holders: holders, file: file, size: size, loss: 0))
            }
            let rate = median(outcomes.map(\.rate))
            if holders == 3 { cleanRate = rate }
            results.append(
                BenchResult(
                    scenario: "late joiner, \(holders) holder\(holders == 1 ? "" : "s"), \(mib) MiB",
                    figure: rate, unit: "MiB/s", baselineName: rawName, baseline: baseline,
                    goal: holders == 1 ? "≥ 150 MiB/s" : holders == 3 ? "≥ 200 MiB/s" : "-"))
            results += cpuRows(outcomes, holders: holders)
            if holders == 1, !streamRates.isEmpty {
                // Both write the file and sync it; the `get` writes it twice (its store, the output).
                results.append(
                    BenchResult(
                        scenario: "late joiner, 1 holder: get wall time ÷ one TCP stream",
                        figure: median(outcomes.map(\.getRate)), unit: "MiB/s",
                        baselineName: "one plain TCP stream, loopback, written and synced",
                        baseline: median(streamRates), goal: "-"))
            }
            if holders == 3 {
                // What a user sees: the `get` command from start to the file in place (written and
                // synced, data dirs on disk), beside the fetch alone.
                results.append(
                    BenchResult(
                        scenario: "late joiner, 3 holders: get wall time", figure: median(outcomes.map(\.getRate)),
                        unit: "MiB/s", baselineName: "the fetch alone", baseline: rate,
                        goal: "≥ 200 MiB/s"))
                if !torrentRates.isEmpty {
                    results.append(
                        BenchResult(
                            scenario: "late joiner, 3 holders: get wall time ÷ libtorrent over TCP",
                            figure: median(outcomes.map(\.getRate)), unit: "MiB/s",
                            baselineName: "libtorrent 2.0 over TCP, 3 seeders, loopback",
                            baseline: median(torrentRates), goal: "≥ 2.5×"))
                }
                results.append(
                    BenchResult(
                        scenario: "disk under the data dirs: what a get writes (the file twice), synced",
                        figure: median(diskRates), unit: "MiB/s", baselineName: "get wall time",
                        baseline: median(outcomes.map(\.getRate)), goal: "-"))
                results.append(
                    BenchResult(
                        scenario: "late joiner: datagram size in use", figure: median(outcomes.map(\.datagramSize)),
                        unit: "B", baselineName: "what every path carries", baseline: 1200,
                        goal: "8972 on loopback"))
                results.append(
                    BenchResult(
                        scenario: "late joiner: peak memory above idle", figure: median(outcomes.map(\.joinerPeak)),
                        unit: "MiB", baselineName: "idle resident size",
                        baseline: median(outcomes.map(\.joinerIdle)), goal: "≤ 64 MiB"))
                results.append(
                    BenchResult(
                        scenario: "holders: peak memory above idle (largest)",
                        figure: median(outcomes.map(\.holderPeak)),
                        unit: "MiB", baselineName: "idle resident size",
                        baseline: median(outcomes.map(\.holderIdle)), goal: "≤ 64 MiB"))
            }
        }
        // TRANSFER_ONLY=get: the loopback `get`s alone (while working on their CPU).
        if ProcessInfo.processInfo.environment["TRANSFER_ONLY"] == "get" { return results }
        var lossy: [LateJoin] = []
        for _ in 0..<runs { lossy.append(try await lateJoiner(holders: 3, file: file, size: size, loss: 0.05)) }
        results.append(
            BenchResult(
                scenario: "late joiner, 3 holders, 5% loss", figure: median(lossy.map(\.rate)),
                unit: "MiB/s", baselineName: "the same without loss", baseline: cleanRate,
                goal: "no stall"))
        // Each node on a host of its own: veth links to a bridge instead of loopback (root only).
        if NamespaceLab.isAvailable {
            let lab = try NamespaceLab(hostCount: 4)
            defer { lab.tearDown() }
            var hosted: [LateJoin] = []
            for _ in 0..<runs {
                hosted.append(try await lateJoiner(holders: 3, file: file, size: size, loss: 0, lab: lab))
            }
            results.append(
                BenchResult(
                    scenario: "late joiner, 3 holders, each on its own host (namespaces)",
                    figure: median(hosted.map(\.rate)), unit: "MiB/s",
                    baselineName: "the same on loopback", baseline: cleanRate, goal: "-"))
        } else {
            print("late joiner across network namespaces: \(NamespaceLab.unavailableReason ?? "unavailable")")
        }

        let fanSize = quick ? 16 << 20 : 100 << 20
        let fanFile = (file as NSString).deletingLastPathComponent + "/fan.bin"
        try writeRandomFile(fanFile, size: fanSize, using: &generator)
        var fans: [(seconds: Double, ratio: Double)] = []
        for _ in 0..<(quick ? 1 : 2) { fans.append(try await fanOut(members: 10, file: fanFile, size: fanSize)) }
        results.append(
            BenchResult(
                scenario: "upload of \(fanSize >> 20) MiB to a mesh of 10: uploader sent ÷ size",
                figure: median(fans.map(\.ratio)), unit: "×", baselineName: "every byte once",
                baseline: 1, goal: "≤ 1.05"))
        results.append(
            BenchResult(
                scenario: "upload of \(fanSize >> 20) MiB to a mesh of 10: until all hold it",
                figure: median(fans.map(\.seconds)), unit: "s",
                baselineName: "9 copies at the raw UDP rate",
                baseline: Double(9 * fanSize) / 1_048_576 / baseline, goal: "-"))
        return results
    }

    /// The CPU the joiner and the holders (together) spent per MiB the `get` moved, the joiner
    /// beside the holders: where a `get` costs the machine, whatever its wall time.
    static func cpuRows(_ outcomes: [LateJoin], holders: Int) -> [BenchResult] {
        let name = "late joiner, \(holders) holder\(holders == 1 ? "" : "s")"
        let joiner = median(outcomes.map(\.joinerCPU)), holding = median(outcomes.map(\.holdersCPU))
        return [
            BenchResult(
                scenario: "\(name): joiner's CPU per MiB", figure: joiner, unit: "ms/MiB",
                baselineName: "the holders' together", baseline: holding, goal: "-"),
            BenchResult(
                scenario: "\(name): holders' CPU per MiB (sum)", figure: holding, unit: "ms/MiB",
                baselineName: "the joiner's", baseline: joiner, goal: "-"),
        ]
    }

    /// Writes `bytes` into a file beside the data dirs and removes it, so that the page cache the
    /// `get`s fill next reuses memory touched before. In a virtual machine whose host backs guest
    /// memory only when first touched, writing into never-touched pages cost several times the
    /// copy, at random between runs: CPU per MiB measured the guest's history, not the node.
    static func warmPageCache(bytes: Int) throws {
        let path = NodeProcess.makeTemporaryDirectory("bench-warm") + "/warm.bin"
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        guard FileManager.default.createFile(atPath: path, contents: nil),
            let handle = FileHandle(forWritingAtPath: path)
        else { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
        defer { try? handle.close() }
        let block = Data(count: 1 << 20)
        for _ in 0..<(bytes >> 20) { try handle.write(contentsOf: block) }
    }

    /// The file's size over the time the disk under the data dirs takes to write it twice, as a
    /// `get --output` does (once into the store, once into the output), in 256 KiB writes, and
    /// sync both: a ceiling for the `get`'s wall time that no protocol change can lift.
    static func diskRate(writing payload: Data) throws -> Double {
        let directory = NodeProcess.makeTemporaryDirectory("bench-disk")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let start = ContinuousClock.now
        for name in ["store", "output"] {
            let path = directory + "/" + name
            guard FileManager.default.createFile(atPath: path, contents: nil),
                let handle = FileHandle(forWritingAtPath: path)
            else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
            }
            defer { try? handle.close() }
            for offset in stride(from: 0, to: payload.count, by: 256 << 10) {
                try handle.write(contentsOf: payload[offset..<min(payload.count, offset + (256 << 10))])
            }
            try handle.synchronize()
        }
        return Double(payload.count) / 1_048_576 / ((ContinuousClock.now - start).milliseconds / 1000)
    }

    struct LateJoin {
        var rate: Double
        /// The size over the `get` command's wall time.
        var getRate: Double
        /// The largest datagram a holder's path was proven to carry (PROTOCOL.md §1a).
        var datagramSize: Double
        var joinerPeak: Double, joinerIdle: Double
        var holderPeak: Double, holderIdle: Double
        /// CPU time (user + system, /proc) over the `get`, in ms per MiB of the file: the joiner's,
        /// and the holders' summed.
        var joinerCPU: Double, holdersCPU: Double
    }

    /// Holders get the file (one attaches, the others replicate it); then a `--lazy` node joins
    /// and `get`s it. The rate is the joiner's own figure for the fetch (from want to last chunk
    /// verified and written), read from its "fetched" log line.
    static func lateJoiner(
        holders: Int, file: String, size: Int, loss: Double, lab: NamespaceLab? = nil
    ) async throws -> LateJoin {
        var nodes: [NodeProcess] = []
        defer { stop(nodes) }
        // On loopback, or node N on host N of the lab (the joiner on the last).
        func start(_ index: Int, _ arguments: [String]) throws -> NodeProcess {
            guard let lab else { return try NodeProcess(["run", "--listen", "127.0.0.1:0"] + arguments) }
            return try NodeProcess(
                ["run", "--listen", "\(lab.addresses[index]):0"] + arguments, launcher: lab.launcher(index))
        }
        let first = try start(0, [])
        nodes.append(first)
        let invite = try await first.waitForLine(prefix: "invite:")
        for index in 1..<holders { nodes.append(try start(index, ["--invite", invite])) }
        try await nodes.waitForMesh(alive: holders)
        let id = try await attach(file, on: first)
        try await waitUntil("replicated to every holder", timeout: .seconds(300)) {
            nodes.allSatisfy { holdsWhole(id, $0) }
        }
        let holderIdle = nodes.map { ProcessStats.memory($0.pid).resident }
        for node in nodes { ProcessStats.resetPeak(node.pid) }

        var arguments = ["--invite", invite, "--lazy", "--log-level", "info"]
        if loss > 0 { arguments += ["--simulate-loss", "\(loss)"] }
        let joiner = try start(lab.map { $0.hosts.count - 1 } ?? holders, arguments)
        nodes.append(joiner)
        try await nodes.waitForMesh(alive: holders + 1)
        try await waitUntil("the joiner lists the attachment", timeout: .seconds(30)) {
            (try? client(joiner).attachments().map(\.id)) == [id]
        }
        let joinerIdle = ProcessStats.memory(joiner.pid).resident
        ProcessStats.resetPeak(joiner.pid)
        let cpuBefore = nodes.map { ProcessStats.cpuSeconds($0.pid) }
        let getStart = ContinuousClock.now
        let get = try await NodeProcess.runCommand(
            [
                "get", "--data-dir", joiner.dataDirectory, id,
                "--output", joiner.dataDirectory + "/out.bin",
            ], timeout: .seconds(300))
        let getSeconds = (ContinuousClock.now - getStart).milliseconds / 1000
        let cpu = zip(nodes, cpuBefore).map { (ProcessStats.cpuSeconds($0.pid) - $1) * 1000 / Double(size >> 20) }
        guard get.status == 0 else { throw NodeProcessError.exited(status: get.status, stderr: get.stderr) }
        let datagramSize = (try? client(joiner).status().members.compactMap(\.datagramSize).max()) ?? 0
        let line = try await joiner.waitForLine(
            prefix: "", timeout: .seconds(5), onStderr: true, containing: " fetched")
        guard let seconds = field("seconds", in: line) else {
            throw NodeProcessError.timeout("no fetch time in: \(line)")
        }
        let holderPeaks = zip(nodes.prefix(holders), holderIdle).map { ProcessStats.memory($0.pid).peak - $1 }
        return LateJoin(
            rate: Double(size) / 1_048_576 / seconds, getRate: Double(size) / 1_048_576 / getSeconds,
            datagramSize: Double(datagramSize),
            joinerPeak: ProcessStats.memory(joiner.pid).peak - joinerIdle, joinerIdle: joinerIdle,
            holderPeak: holderPeaks.max() ?? 0, holderIdle: holderIdle.max() ?? 0,
            joinerCPU: cpu.last ?? 0, holdersCPU: cpu.dropLast().reduce(0, +))
    }

    /// One member attaches; the other nine replicate it. How much chunk payload the uploader
    /// sent, over the size, and how long until all nine hold it.
    static func fanOut(members: Int, file: String, size: Int) async throws -> (seconds: Double, ratio: Double) {
        var nodes: [NodeProcess] = []
        defer { stop(nodes) }
        let first = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        nodes.append(first)
        let invite = try await first.waitForLine(prefix: "invite:")
        for _ in 1..<members { nodes.append(try NodeProcess(["run", "--listen", "127.0.0.1:0", "--invite", invite])) }
        try await nodes.waitForMesh(alive: members)
        let start = ContinuousClock.now
        let id = try await attach(file, on: first)
        try await waitUntil("every member holds it", timeout: .seconds(600)) { nodes.allSatisfy { holdsWhole(id, $0) } }
        let elapsed = ContinuousClock.now - start
        let sent = try client(first).status().counters.chunkPayloadBytesSent
        return (elapsed.milliseconds / 1000, Double(sent) / Double(size))
    }

    // MARK: helpers

    static func attach(_ file: String, on node: NodeProcess) async throws -> String {
        let result = try await NodeProcess.runCommand(
            ["attach", "--data-dir", node.dataDirectory, file], timeout: .seconds(120))
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func client(_ node: NodeProcess) -> ControlClient {
        ControlClient(directory: DataDirectory(path: node.dataDirectory))
    }

    static func holdsWhole(_ id: String, _ node: NodeProcess) -> Bool {
        guard let status = try? client(node).status(),
            let entry = status.attachments.first(where: { $0.id == id })
        else { return false }
        return entry.chunksHave == entry.chunks
    }

    static func stop(_ nodes: [NodeProcess]) {
        for node in nodes {
            node.signal(SIGKILL)
            _ = node.process.waitUntilExit()
            try? FileManager.default.removeItem(atPath: node.dataDirectory)
        }
    }

    static func field(_ name: String, in line: String) -> Double? {
        line.split(separator: " ").first { $0.hasPrefix(name + "=") }.flatMap { Double($0.dropFirst(name.count + 1)) }
    }
}
