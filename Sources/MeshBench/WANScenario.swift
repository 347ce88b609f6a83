import Foundation
import GroupMesh
import MeshTestKit

/// The WAN links with real processes (root only): a `NamespaceLab` of four hosts, three holders
/// on hosts 0–2 holding an attachment (one attaches, two replicate, on plain veth), and a joiner on
/// host 3 behind a `WANLink`. Every figure beside a baseline measured in the same run:
///
/// - `fiftyMs`: the joiner's fetch rate (its "fetched" log line) beside raw UDP through the same
///   emulated path (iperf3 -u, holder host to joiner host), and the `get` wall time beside it;
/// - `resume`: `get` wall times beside CUBIC moving the same bytes, fresh nodes and a joiner's
///   second fetch from the same holders (`WANResumeScenario`);
/// - `fiftyMsLossy`: the fetch rate beside its loss-free twin's (`fiftyMsSegmented`: packets cut
///   as the lossy link cuts them) and the `fiftyMs` one;
/// - `home50`, `home10`: while an iperf3 CUBIC download (server on host 0, `-R` client on host 3)
///   runs through the same link, once as replication (a joiner that is not lazy: background) and
///   once as a `get` (lazy joiner: foreground): the competitor's share of the cap over the fetch
///   (beside iperf3 alone through the link), the fetch rate, the bottleneck's drops (the downlink
///   tbf's counters, before and after) and the holders' chunk payload sent ÷ the file; and a
///   ping's round trip across the line during each fetch (`LinePing`), beside the same with
///   CUBIC alone (or the idle line, for a lone get): the delay the fetch adds for everyone else.
///
/// The 50 ms trio, each `get` beside CUBIC and replication beside CUBIC on a lossy line run in
/// rounds (`WAN_ROUNDS`, 3): a row shows the median round and another the lowest, except CUBIC's
/// share beside a fetch: its mean over the rounds, judged against the mean of the same flow alone
/// over the 8 s before each joiner starts (and, where the line loses packets at random, the 8 s
/// after its fetch).
///
/// The joiner's `downlink` (status --json) is sampled every half second during each fetch and
/// summarised on stdout, to explain the figures.
enum WANScenario {
    enum Mode: String {
        case replication, get
        /// A get with no competitor: a lone fetch must fill the line without overflowing its queue
        /// (and its tests for another flow must not find one).
        case alone
        /// No fetch at all, in rounds as a fetch beside CUBIC (`WAN_MODES=nothing`): CUBIC's share
        /// over the 12 s after its 8 s alone, the same windows, to show how the baseline drifts.
        case nothing
        /// A constant-rate UDP stream (iperf3 -u, host 0 to host 3) for 12 s in place of a fetch,
        /// at the mean rate replication reached earlier in the run (`WAN_MODES=replication,steady`;
        /// alone, half the cap): what a perfectly smooth flow that takes the same share costs
        /// CUBIC, beside what replication costs it.
        case steady
        var isGet: Bool { self == .get || self == .alone }
    }

    struct CappedProfile {
        var name: String
        var profile: WANLink.Profile
        var size: Int
    }

    static func run(quick: Bool) async throws -> [BenchResult] {
        if let reason = WANLink.unavailableReason {
            print("wan: \(reason)")
            return []
        }
        guard
            let iperf = ["/usr/bin/iperf3", "/usr/local/bin/iperf3", "/bin/iperf3"]
                .first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            print("wan: needs iperf3 (make deps installs it as root); skipped")
            return []
        }
        let directory = NodeProcess.makeTemporaryDirectory("bench-wan")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let lab = try NamespaceLab(hostCount: 4)
        defer { lab.tearDown() }
        let tools = Tools(lab: lab, iperf: iperf)
        var generator = SystemRandomNumberGenerator()
        var results: [BenchResult] = []
        // WAN_ONLY=fiftyMs,home50 runs some profiles only (while tuning one).
        let only = ProcessInfo.processInfo.environment["WAN_ONLY"].map {
            Set($0.split(separator: ",").map(String.init))
        }
        func wanted(_ name: String) -> Bool { only?.contains(name) ?? true }

        // 1 and 2: an uncapped 50 ms path, without and with 1% random loss, in rounds: one fetch
        // of 100 MiB is short, and on a small shared machine the emulator and the VM move a
        // single round's rate a lot. Each row shows the median round, and a row beside it the
        // lowest.
        let bigSize = quick ? 32 << 20 : 100 << 20
        let big = directory + "/big.bin"
        if wanted("fiftyMs") || wanted("fiftyMsLossy") {
            try writeRandomFile(big, size: bigSize, using: &generator)
            var rounds: [(clean: Uncapped, lossy: Uncapped, twin: Uncapped)] = []
            for round in 1...roundCount(quick: quick) {
                print("wan fiftyMs and fiftyMsLossy: round \(round)")
                let clean = try await uncapped(
                    .fiftyMs, name: "fiftyMs", file: big, size: bigSize, tools: tools, rawBaseline: true)
                let lossy =
                    wanted("fiftyMsLossy")
                    ? try await uncapped(
                        .fiftyMsLossy, name: "fiftyMsLossy", file: big, size: bigSize, tools: tools, rawBaseline: false)
                    : Uncapped()
                // The lossy link hands the joiner every packet on its own (the emulator cuts the holders'
                // GSO batches to drop single packets), where the clean one passes the batches whole: its
                // loss-free twin cuts them too, so that loss is all that differs.
                let twin =
                    wanted("fiftyMsLossy")
                    ? try await uncapped(
                        .fiftyMsSegmented, name: "fiftyMsSegmented", file: big, size: bigSize, tools: tools,
                        rawBaseline: false)
                    : Uncapped()
                rounds.append((clean, lossy, twin))
            }
            try? FileManager.default.removeItem(atPath: big)
            let mib = bigSize >> 20
            let reached = medianRound(rounds) { $0.clean.secondHalfRate },
                lowest = rounds.min { $0.clean.secondHalfRate < $1.clean.secondHalfRate } ?? reached
            let whole = medianRound(rounds) { $0.clean.fetchRate }
            let wall = medianRound(rounds) { $0.clean.getRate / max($0.clean.fetchRate, 1e-9) }
            func lossRatio(_ round: (clean: Uncapped, lossy: Uncapped, twin: Uncapped)) -> Double {
                round.lossy.fetchRate / max(round.twin.fetchRate, 1e-9)
            }
            let lossy = medianRound(rounds, by: lossRatio),
                lossyLowest = rounds.min { lossRatio($0) < lossRatio($1) } ?? lossy
            let n = rounds.count
            print(
                "wan fiftyMs rounds: rate reached \(rounds.map { format($0.clean.secondHalfRate) }.joined(separator: ", ")) MiB/s; raw UDP \(rounds.map { format($0.clean.rawUDP) }.joined(separator: ", "))\(wanted("fiftyMsLossy") ? "; lossy ÷ twin " + rounds.map { format(lossRatio($0)) }.joined(separator: ", ") : "")"
            )
            results += [
                BenchResult(
                    scenario:
                        "wan fiftyMs (50 ms RTT): late joiner's fetch of \(mib) MiB from 3 holders, the rate reached (its second half), median of \(n) rounds",
                    figure: reached.clean.secondHalfRate, unit: "MiB/s",
                    baselineName: "raw UDP (iperf3 -u) through the same link, same round",
                    baseline: reached.clean.rawUDP, goal: "≥ 120 MiB/s, ≥ 0.8× raw"),
                BenchResult(
                    scenario: "wan fiftyMs: the rate reached, the lowest of \(n) rounds",
                    figure: lowest.clean.secondHalfRate, unit: "MiB/s", baselineName: "raw UDP, same round",
                    baseline: lowest.clean.rawUDP, goal: "-"),
                BenchResult(
                    scenario: "wan fiftyMs: the whole fetch, slow start included (median round)",
                    figure: whole.clean.fetchRate, unit: "MiB/s",
                    baselineName: "raw UDP (iperf3 -u) through the same link",
                    baseline: whole.clean.rawUDP, goal: "-"),
                BenchResult(
                    scenario: "wan fiftyMs: get wall time (median round)", figure: wall.clean.getRate, unit: "MiB/s",
                    baselineName: "the fetch alone", baseline: wall.clean.fetchRate, goal: "-"),
                BenchResult(
                    scenario: "wan fiftyMs: datagram size in use", figure: rounds.map(\.clean.datagramSize).min() ?? 0,
                    unit: "B",
                    baselineName: "the veth's 1500 B MTU", baseline: 1472, goal: "1472"),
                BenchResult(
                    scenario: "wan fiftyMsLossy (50 ms, 1% loss each way): fetch rate, median of \(n) rounds",
                    figure: lossy.lossy.fetchRate,
                    unit: "MiB/s", baselineName: "its twin without loss (packets cut the same way), same round",
                    baseline: lossy.twin.fetchRate, goal: "≥ 0.8×"),
                BenchResult(
                    scenario: "wan fiftyMsLossy: fetch rate, the lowest of \(n) rounds (÷ its twin)",
                    figure: lossyLowest.lossy.fetchRate,
                    unit: "MiB/s", baselineName: "its twin, same round", baseline: lossyLowest.twin.fetchRate, goal: "-"
                ),
                BenchResult(
                    scenario: "wan fiftyMsLossy: fetch rate (median round)", figure: lossy.lossy.fetchRate,
                    unit: "MiB/s", baselineName: "fiftyMs (no loss, GSO batches passed whole), same round",
                    baseline: lossy.clean.fetchRate, goal: "-"),
                BenchResult(
                    scenario: "wan fiftyMsLossy: holders' bytes ÷ file, the most of \(n) rounds",
                    figure: rounds.map(\.lossy.holderRatio).max() ?? 0, unit: "×",
                    baselineName: "every byte once", baseline: 1, goal: "≤ 1.1×"),
            ]
        }

        // Careful resume: a joiner's second fetch from the same holders, beside CUBIC (WANResumeScenario).
        if wanted("resume") {
            results += try await resumeRounds(directory: directory, tools: tools, quick: quick, using: &generator)
        }

        // 3: capped home lines, each beside a CUBIC download.
        let capped = [
            CappedProfile(name: "home50", profile: .home50, size: quick ? 4 << 20 : 16 << 20),
            CappedProfile(name: "home10", profile: .home10, size: quick ? 2 << 20 : 8 << 20),
        ].filter { wanted($0.name) }
        for line in capped {
            let file = directory + "/\(line.name).bin"
            try writeRandomFile(file, size: line.size, using: &generator)
            defer { try? FileManager.default.removeItem(atPath: file) }
            results += try await cappedLine(line, file: file, tools: tools, quick: quick)
        }
        return results
    }

    // MARK: - rounds

    /// Rounds of the uncapped fetches and of each `get` beside CUBIC: WAN_ROUNDS, else 3 (1 quick).
    static func roundCount(quick: Bool) -> Int {
        if let text = ProcessInfo.processInfo.environment["WAN_ROUNDS"], let rounds = Int(text), rounds >= 1 {
            return min(rounds, 20)
        }
        return quick ? 1 : 3
    }

    /// ", ping 92/110 ms (median/p90)", or nothing without samples.
    static func pingText(_ summary: (median: Double, p90: Double, count: Int)?) -> String {
        guard let summary else { return "" }
        return ", ping \(format(summary.median))/\(format(summary.p90)) ms (median/p90 of \(summary.count))"
    }

    /// The element whose `key` is the median (the lower middle one of an even count).
    static func medianRound<T>(_ elements: [T], by key: (T) -> Double) -> T {
        let sorted = elements.sorted { key($0) < key($1) }
        return sorted[(sorted.count - 1) / 2]
    }

    // MARK: - uncapped

    struct Uncapped {
        var fetchRate = 0.0, secondHalfRate = 0.0, getRate = 0.0, rawUDP = 0.0, datagramSize = 0.0, holderRatio = 0.0
    }

    static func uncapped(
        _ profile: WANLink.Profile, name: String, file: String, size: Int, tools: Tools,
        rawBaseline: Bool
    ) async throws -> Uncapped {
        print("wan \(name): \(profile)")
        var outcome = Uncapped()
        let mesh = try await Holders(lab: tools.lab, file: file)
        defer { mesh.stop() }
        let link = try WANLink(lab: tools.lab, host: 3, profile: profile)
        defer { link.tearDown() }
        if rawBaseline {
            outcome.rawUDP = try await tools.rawUDP(seconds: 4)
            print(
                "  raw UDP through the link (iperf3 -u -l 1472, host 0 → 3): \(String(format: "%.1f", outcome.rawUDP)) MiB/s"
            )
        }
        let fetch = try await fetchThrough(mesh: mesh, mode: .get, size: size, tools: tools, timeout: .seconds(150))
        outcome.fetchRate = fetch.fetchRate
        outcome.secondHalfRate = fetch.secondHalfRate
        outcome.getRate = fetch.getRate
        outcome.datagramSize = fetch.datagramSize
        outcome.holderRatio = fetch.holderRatio
        link.tearDown()
        print(
            "  fetch \(format(fetch.fetchRate)) MiB/s (its second half \(format(fetch.secondHalfRate))), get wall time \(format(fetch.getRate)) MiB/s, datagrams \(Int(fetch.datagramSize)) B, holders sent \(format(fetch.holderRatio))× the file; \(fetch.cpuSummary); downlink: \(fetch.downlinkSummary); emulator late \(late(link))"
        )
        if let summary = link.emulatorSummary { print("  \(summary)") }
        return outcome
    }

    // MARK: - one fetch through the link

    struct Fetch {
        var fetchRate = 0.0, secondHalfRate = 0.0, getRate = 0.0, datagramSize = 0.0, holderRatio = 0.0
        /// The node's own timing of the fetch and of its second half (0 when not logged).
        var fetchSeconds = 0.0, secondHalfSeconds = 0.0
        var finished = true
        /// The fetch's span on the wall clock (seconds since the reference date).
        var window: (start: Double, end: Double) = (0, 0)
        var drops = Bottleneck(sent: 0, dropped: 0)
        var dropShare = 0.0
        var downlinkSummary = ""
        var cpuSummary = ""
    }

    /// Starts the joiner on host 3 (lazy for `.get`, which it then runs; eager for `.replication`)
    /// and measures one fetch of the holders' attachment.
    static func fetchThrough(
        mesh: Holders, mode: Mode, size: Int, tools: Tools, timeout: Duration
    ) async throws -> Fetch {
        // WAN_JOINER_LOG=path: the joiner logs at debug level, written to path-<mode>-<unix time>
        // after each fetch (tuning; one file per fetch, so the twin does not overwrite the lossy one).
        let logPath = ProcessInfo.processInfo.environment["WAN_JOINER_LOG"]
        var arguments = [
            "run", "--listen", "\(tools.lab.addresses[3]):0", "--invite", mesh.invite,
            "--log-level", logPath == nil ? "info" : "debug",
        ]
        if mode.isGet { arguments.append("--lazy") }
        var outcome = Fetch()
        let sentBefore = mesh.payloadSent()
        let refusedBefore = mesh.wantsRefused()
        let tcBefore = try tools.bottleneck()
        let joiner = try NodeProcess(arguments, launcher: tools.lab.launcher(3))
        defer { TransferScenario.stop([joiner]) }
        defer {
            if let logPath {
                try? joiner.stderr.write(
                    toFile: "\(logPath)-\(mode)-\(Int(Date().timeIntervalSince1970))", atomically: false,
                    encoding: .utf8)
            }
        }
        var get: ChildProcess?
        defer { if let get, get.isRunning { get.signal(SIGKILL); _ = get.waitUntilExit() } }
        var getStart = 0.0
        if mode.isGet {
            try await (mesh.nodes + [joiner]).waitForMesh(alive: 4)
            try await waitUntil("the joiner lists the attachment", timeout: .seconds(30)) {
                (try? TransferScenario.client(joiner).status().attachments.map(\.id)) == [mesh.id]
            }
            getStart = Date().timeIntervalSinceReferenceDate
            get = try ChildProcess(
                executable: NodeProcess.executable,
                arguments: [
                    "get", "--data-dir", joiner.dataDirectory, mesh.id, "--output", joiner.dataDirectory + "/out.bin",
                ])
        }
        // Until the fetch is done (the get exited, or the joiner holds it all), bounded; the
        // joiner's downlink sampled every half second meanwhile.
        var samples: [StatusReport.DownlinkInfo] = []
        var have = 0, chunks = 0
        let deadline = ContinuousClock.now + timeout
        var end = 0.0
        var getExitedAt: Double?
        let cpuBefore = ([joiner] + mesh.nodes).map { cpuSeconds($0.pid) }, machineBefore = machineCPU()
        while true {
            if let status = try? TransferScenario.client(joiner).status() {
                if let downlink = status.downlink, downlink.priority == (mode.isGet ? "foreground" : "background") {
                    samples.append(downlink)
                }
                if let entry = status.attachments.first(where: { $0.id == mesh.id }) {
                    (have, chunks) = (entry.chunksHave, entry.chunks)
                }
            }
            if let get, let status = get.terminationStatus {
                end = getExitedAt ?? Date().timeIntervalSinceReferenceDate
                guard status == 0 else { throw NodeProcessError.exited(status: status, stderr: get.standardError) }
                break
            }
            if get == nil, chunks > 0, have == chunks { end = Date().timeIntervalSinceReferenceDate; break }
            if ContinuousClock.now >= deadline {
                end = Date().timeIntervalSinceReferenceDate
                outcome.finished = false
                break
            }
            // The get's exit is looked for every 20 ms between samples: timed by the sampling
            // alone (every half second), its wall time would be up to half a second long.
            for _ in 0..<25 {
                if let get, get.terminationStatus != nil {
                    getExitedAt = getExitedAt ?? Date().timeIntervalSinceReferenceDate
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let machineAfter = machineCPU()
        let cpu = zip(([joiner] + mesh.nodes).map { cpuSeconds($0.pid) }, cpuBefore).map { $0 - $1 }
        let span = max(
            end - (getStart > 0 ? getStart : end - (ContinuousClock.now - joiner.startedAt).wallSeconds), 1e-3)
        let busy =
            machineAfter.total > machineBefore.total
            ? 1 - (machineAfter.idle - machineBefore.idle) / (machineAfter.total - machineBefore.total) : 0
        outcome.cpuSummary =
            "CPU over the fetch: joiner \(format(cpu[0] / span * 100))% of a core, holders "
            + cpu.dropFirst().map { "\(format($0 / span * 100))%" }.joined(separator: "/")
            + ", machine \(format(busy * 100))% busy"
        let tcAfter = try tools.bottleneck()
        outcome.drops = Bottleneck(sent: tcAfter.sent - tcBefore.sent, dropped: tcAfter.dropped - tcBefore.dropped)
        outcome.dropShare = tcAfter.dropShare(since: tcBefore)
        let sent = zip(mesh.payloadSent(), sentBefore).map { $0 - $1 }.reduce(0, +)
        outcome.holderRatio = Double(sent) / Double(size)
        outcome.cpuSummary += "; holders refused \(mesh.wantsRefused() - refusedBefore) wants"
        let joinerStatus = try? TransferScenario.client(joiner).status()
        outcome.datagramSize = Double(joinerStatus?.members.compactMap(\.datagramSize).max() ?? 0)
        // Losses the joiner's own socket caused (its receive buffer overflowed), apart from the link's.
        outcome.cpuSummary +=
            "; joiner's socket dropped \(joinerStatus?.counters.kernelReceiveDrops.map(String.init) ?? "unknown")"
        outcome.downlinkSummary = summary(samples)
        if outcome.finished,
            let line = try? await joiner.waitForLine(
                prefix: "", timeout: .seconds(5), onStderr: true, containing: " fetched"),
            let seconds = TransferScenario.field("seconds", in: line), seconds > 0
        {
            outcome.fetchRate = Double(size) / 1_048_576 / seconds
            outcome.secondHalfRate = TransferScenario.field("secondHalfMiBps", in: line) ?? 0
            outcome.fetchSeconds = seconds
            outcome.secondHalfSeconds = TransferScenario.field("secondHalfSeconds", in: line) ?? 0
            outcome.window = (end - seconds, end)
        } else {
            // Unfinished (or no log line): what arrived over the time since the joiner started.
            let start = getStart > 0 ? getStart : end - (ContinuousClock.now - joiner.startedAt).wallSeconds
            let arrived = chunks > 0 ? Double(size) * Double(have) / Double(chunks) : 0
            outcome.fetchRate = arrived / 1_048_576 / max(end - start, 1e-3)
            outcome.window = (start, end)
        }
        if mode.isGet {
            outcome.getRate = Double(size) / 1_048_576 / max(end - getStart, 1e-3)
            // The competitor's window for a get: what the user waited through.
            outcome.window = (getStart, end)
        }
        return outcome
    }

    static func summary(_ samples: [StatusReport.DownlinkInfo]) -> String {
        guard !samples.isEmpty else { return "no samples" }
        let rates = samples.map { $0.rate / 1_048_576 }
        let delays = samples.map(\.queueingDelayMs)
        let competing = samples.filter(\.competing).count, slow = samples.filter(\.slowStart).count
        let priorities = Set(samples.map(\.priority)).sorted().joined(separator: "/")
        return
            "\(samples.count) samples, \(priorities), rate median \(format(median(rates))) MiB/s (max \(format(rates.max() ?? 0))),"
            + " queueing delay median \(format(median(delays))) ms (max \(format(delays.max() ?? 0)), target \(format(samples.last?.targetMs ?? 0))),"
            + " round trip \(format(samples.last?.roundTripMs ?? 0)) ms, slow start \(slow), competing \(competing),"
            + " loss backoffs \(samples.last?.lossBackoffs ?? 0), slowdown tests \(samples.last?.slowdowns ?? 0)"
            + " (\(samples.last?.slowdownsFoundAnotherFlow ?? 0) found another flow); rates (MiB/s, every 0.5 s;"
            + " s slow start, c competing, d delay mode), queue (ms): "
            + samples.prefix(24).map { sample in
                let mode = sample.slowStart ? "s" : sample.competing ? "c" : "d"
                return "\(format(sample.rate / 1_048_576))\(mode)/\(Int(sample.queueingDelayMs.rounded()))"
            }.joined(separator: " ") + (samples.count > 24 ? " …" : "")
    }

    /// A process's user + system time so far, in seconds (/proc/PID/stat; 0 if gone).
    static func cpuSeconds(_ pid: pid_t) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the name: state is field 3, utime 14 and stime 15 (1-based) → 11 and 12 here.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The machine's idle and total CPU time (the first line of /proc/stat), in ticks.
    static func machineCPU() -> (idle: Double, total: Double) {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n").first
        else { return (0, 0) }
        let values = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard values.count >= 5 else { return (0, 0) }
        return (values[3] + values[4], values.reduce(0, +))
    }

    static func late(_ link: WANLink) -> String {
        link.emulatorMeanLateMilliseconds.map { String(format: "%.2f ms mean", $0) } ?? "unknown"
    }

    static func format(_ value: Double) -> String { BenchReport.format(value) }

    // MARK: - holders

    /// Three holders on hosts 0–2: the first attaches `file`, the others replicate it.
    final class Holders {
        let nodes: [NodeProcess]
        let invite: String
        /// The first attachment, and all of them in the order of `files`.
        let id: String
        let ids: [String]

        convenience init(lab: NamespaceLab, file: String) async throws { try await self.init(lab: lab, files: [file]) }

        init(lab: NamespaceLab, files: [String]) async throws {
            var nodes: [NodeProcess] = []
            do {
                let first = try NodeProcess(["run", "--listen", "\(lab.addresses[0]):0"], launcher: lab.launcher(0))
                nodes.append(first)
                let invite = try await first.waitForLine(prefix: "invite:")
                for index in 1..<3 {
                    nodes.append(
                        try NodeProcess(
                            ["run", "--listen", "\(lab.addresses[index]):0", "--invite", invite],
                            launcher: lab.launcher(index)))
                }
                try await nodes.waitForMesh(alive: 3)
                var ids: [String] = []
                for file in files { ids.append(try await TransferScenario.attach(file, on: first)) }
                let holders = nodes, all = ids
                try await waitUntil("replicated to every holder", timeout: .seconds(120), every: .milliseconds(100)) {
                    holders.allSatisfy { node in all.allSatisfy { TransferScenario.holdsWhole($0, node) } }
                }
                (self.nodes, self.invite, self.id, self.ids) = (nodes, invite, ids[0], ids)
            } catch {
                TransferScenario.stop(nodes)
                throw error
            }
        }

        /// Each holder's chunk payload sent so far.
        func payloadSent() -> [UInt64] {
            nodes.map { (try? TransferScenario.client($0).status().counters.chunkPayloadBytesSent) ?? 0 }
        }

        /// Wants the holders answered "busy" so far, in all.
        func wantsRefused() -> UInt64 {
            nodes.map { (try? TransferScenario.client($0).status().counters.wantsRefused) ?? 0 }.reduce(0, +)
        }

        func stop() { TransferScenario.stop(nodes) }
    }

    // MARK: - iperf3 and tc

    /// The downlink tbf's counters: packets sent on and packets dropped.
    struct Bottleneck {
        var sent: Int
        var dropped: Int

        func dropShare(since before: Bottleneck) -> Double {
            let sent = self.sent - before.sent, dropped = self.dropped - before.dropped
            return sent + dropped > 0 ? Double(dropped) / Double(sent + dropped) : 0
        }
    }

    /// A CUBIC download by iperf3 from host 0 to host 3, its per-half-second intervals read from
    /// its text output (flushed line by line, so a stopped client leaves what it measured).
    final class Competitor {
        let server: ChildProcess
        let client: ChildProcess
        /// When the test began (its "Reverse mode" line appeared), on the wall clock.
        let startedAt: Double

        init(server: ChildProcess, client: ChildProcess, startedAt: Double) {
            (self.server, self.client, self.startedAt) = (server, client, startedAt)
        }

        /// Stops both processes (bounded) and returns the client's intervals: (start, end, bytes).
        @discardableResult
        func stop() -> [(start: Double, end: Double, bytes: Double)] {
            client.stop()
            server.stop()
            return Self.intervals(client.standardOutput)
        }

        /// `[  5]   1.00-1.50   sec   2.88 MBytes  48.3 Mbits/sec` (receiver intervals of a -R client).
        static func intervals(_ text: String) -> [(start: Double, end: Double, bytes: Double)] {
            text.split(separator: "\n").compactMap { line in
                guard !line.contains("sender"), !line.contains("receiver") else { return nil }
                let tokens = line.split(separator: " ").map(String.init)
                guard let index = tokens.firstIndex(of: "sec"), index >= 1, index + 2 < tokens.count else { return nil }
                let span = tokens[index - 1].split(separator: "-").compactMap { Double($0) }
                guard span.count == 2, let amount = Double(tokens[index + 1]) else { return nil }
                let scale: Double
                switch tokens[index + 2] {
                case "Bytes": scale = 1
                case "KBytes": scale = 1024
                case "MBytes": scale = 1_048_576
                case "GBytes": scale = 1_073_741_824
                default: return nil
                }
                return (span[0], span[1], amount * scale)
            }
        }

        /// Bytes received between `from` and `to` (seconds since the test began), intervals
        /// partly inside counted in proportion.
        static func bytes(
            in intervals: [(start: Double, end: Double, bytes: Double)], from: Double, to: Double
        ) -> Double {
            intervals.reduce(0) { total, interval in
                let overlap = min(interval.end, to) - max(interval.start, from)
                guard overlap > 0, interval.end > interval.start else { return total }
                return total + interval.bytes * overlap / (interval.end - interval.start)
            }
        }
    }

    struct Tools {
        let lab: NamespaceLab
        let iperf: String

        /// The downlink tbf (the bridge's port toward host 3): `tc -s -j qdisc show`.
        func bottleneck() throws -> Bottleneck {
            let shown = try ChildProcess.run(
                WANLink.ipPath,
                [
                    "netns", "exec", lab.bridgeNamespace, WANLink.tcPath, "-s", "-j", "qdisc", "show", "dev",
                    lab.bridgePort(3),
                ])
            guard let array = try? JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [[String: Any]]
            else {
                return Bottleneck(sent: 0, dropped: 0)
            }
            let tbf = array.first { ($0["kind"] as? String) == "tbf" }
            return Bottleneck(sent: (tbf?["packets"] as? Int) ?? 0, dropped: (tbf?["drops"] as? Int) ?? 0)
        }

        /// iperf3 server on host 0 (one test), CUBIC client on host 3 receiving (-R) for at most
        /// `seconds`; returns once the test began (bounded).
        func startCompetitor(seconds: Int) async throws -> Competitor {
            let port = "\(Int.random(in: 20_000...29_999))"
            let server = try ChildProcess(
                executable: WANLink.ipPath,
                arguments: [
                    "netns", "exec", lab.hosts[0], iperf, "-s", "-1", "-p", port, "--forceflush",
                ])
            try await Task.sleep(for: .milliseconds(300))
            let client = try ChildProcess(
                executable: WANLink.ipPath,
                arguments: [
                    "netns", "exec", lab.hosts[3], iperf, "-c", lab.addresses[0], "-p", port, "-R", "-C", "cubic",
                    "-t", "\(seconds)", "-i", "0.5", "-f", "m", "--forceflush",
                ])
            let competitor = { (start: Double) in Competitor(server: server, client: client, startedAt: start) }
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline {
                if client.standardOutput.contains("Reverse mode") {
                    return competitor(Date().timeIntervalSinceReferenceDate)
                }
                if !client.isRunning { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            competitor(0).stop()
            throw NodeProcessError.timeout("iperf3 did not start: \(client.standardOutput) \(client.standardError)")
        }

        /// A CUBIC download of `bytes` from host 0 to host 3 (iperf3 -R -n): its receiver's rate
        /// in MiB/s, connection set-up excluded (as the get's is: the mesh is joined before it).
        func tcpDownload(bytes: Int, timeout: Duration) async throws -> Double {
            try await iperfTest(["-R", "-C", "cubic", "-n", "\(bytes)"], timeout: timeout)
        }

        /// One iperf3 test from host 0 to host 3 (a one-test server on host 0 on a port of its
        /// own, beside the competitor's; the client on host 3 with `options`), bounded by
        /// `timeout`: the receiver's rate in MiB/s.
        func iperfTest(_ options: [String], wrappedIn wrapper: [String] = [], timeout: Duration) async throws -> Double
        {
            let port = "\(Int.random(in: 30_000...39_999))"
            let server = try ChildProcess(
                executable: WANLink.ipPath,
                arguments: [
                    "netns", "exec", lab.hosts[0], iperf, "-s", "-1", "-p", port,
                ])
            defer { if server.isRunning { server.signal(SIGKILL); _ = server.waitUntilExit() } }
            try await Task.sleep(for: .milliseconds(300))
            let client = try ChildProcess(
                executable: WANLink.ipPath,
                arguments: ["netns", "exec", lab.hosts[3]] + wrapper
                    + [iperf, "-c", lab.addresses[0], "-p", port] + options + ["-f", "m"])
            defer { if client.isRunning { client.signal(SIGKILL); _ = client.waitUntilExit() } }
            let deadline = ContinuousClock.now + timeout
            while client.isRunning && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            guard !client.isRunning else {
                throw NodeProcessError.timeout("iperf3 \(options.joined(separator: " ")) did not finish")
            }
            _ = client.waitUntilExit()
            var waited = 0
            while !client.outputIsComplete && waited < 1000 { usleep(1000); waited += 1 }
            return try Self.receiverRate(client)
        }

        /// The receiver's summary line of an iperf3 client run with `-f m`, in MiB/s.
        static func receiverRate(_ client: ChildProcess) throws -> Double {
            // `[  5]   0.00-4.00  sec  X MBytes  Y Mbits/sec  ...  receiver`
            guard let line = client.standardOutput.split(separator: "\n").last(where: { $0.contains("receiver") })
            else {
                throw NodeProcessError.exited(
                    status: client.terminationStatus ?? -1,
                    stderr: "iperf3: no receiver line: \(client.standardOutput) \(client.standardError)")
            }
            let tokens = line.split(separator: " ").map(String.init)
            guard let index = tokens.firstIndex(of: "Mbits/sec"), index >= 1, let megabits = Double(tokens[index - 1])
            else {
                throw NodeProcessError.exited(status: -1, stderr: "iperf3: cannot read \(line)")
            }
            return megabits * 1e6 / 8 / 1_048_576
        }

        /// Raw UDP from host 0 to host 3 through the link: iperf3 -u at 4 Gbit/s of 1,472-byte
        /// datagrams (what the node sends over veth), the receiver's rate in MiB/s.
        func rawUDP(seconds: Int) async throws -> Double {
            try await iperfTest(
                ["-R", "-u", "-b", "4G", "-l", "1472", "-w", "4M", "-t", "\(seconds)"],
                wrappedIn: ["timeout", "\(seconds + 20)"], timeout: .seconds(seconds + 25))
        }
    }
}

private extension Duration {
    var wallSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
