import Foundation
import MeshTestKit
import Testing

/// `get` on a slow line between two hosts of our own (network namespaces, the joiner's side
/// capped by `tc tbf`), where a fetch lasts long enough to watch and to interrupt.
@Suite("get on a slow link (network namespaces)", .serialized)
struct GetOnSlowLinkTests {
    static let tc = ["/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    static let tmux = ["/usr/bin/tmux", "/usr/local/bin/tmux"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    static var unavailableReason: String? {
        NamespaceLab.unavailableReason ?? (tc == nil ? "needs iproute2's tc to cap the link; skipped" : nil)
    }

    static func listed(_ node: NodeProcess) async throws -> [FirstHourTests.Listed] {
        try await FirstHourTests.listed(node)
    }

    @Test(
        "progress in bytes on a terminal and in a pipe, with a summary; Ctrl-C exits 130, writes nothing, and a lazy node stops fetching",
        .enabled(if: unavailableReason == nil, Comment(rawValue: unavailableReason ?? "")))
    func progressAndInterrupt() async throws {
        let lab = try NamespaceLab(hostCount: 2)
        defer { lab.tearDown() }
        // 12 Mbit/s towards the joiner: 4 MiB take about 3 s.
        let shaped = try ChildProcess.run(
            NamespaceLab.ipCommand ?? "ip",
            [
                "netns", "exec", lab.bridgeNamespace, Self.tc ?? "tc", "qdisc", "add", "dev", lab.bridgePort(1), "root",
                "tbf", "rate", "12mbit", "burst", "32kb", "latency", "300ms",
            ])
        try #require(shaped.status == 0, "tc: \(shaped.stderr)")
        var processes: [NodeProcess] = []
        defer { for process in processes { Task { await process.cleanUp() } } }
        let holder = try NodeProcess(
            [
                "run", "--listen", "0.0.0.0:7946", "--advertise", "\(lab.addresses[0]):7946",
                "--name", "holder",
            ], launcher: lab.launcher(0))
        processes.append(holder)
        let invite = try await holder.waitForLine(prefix: "invite:")
        let joiner = try NodeProcess(
            [
                "run", "--listen", "0.0.0.0:7946", "--advertise", "\(lab.addresses[1]):7946",
                "--name", "joiner", "--lazy", "--invite", invite, "--log-level", "info",
            ],
            launcher: lab.launcher(1))
        processes.append(joiner)
        try await [holder, joiner].waitForMesh(alive: 2)

        let work = NodeProcess.makeTemporaryDirectory("slow-get")
        defer { try? FileManager.default.removeItem(atPath: work) }
        var ids: [String] = []
        var contents: [Data] = []
        for index in 0..<2 {
            let (path, bytes) = try FirstHourTests.randomFile(
                work, name: "file\(index).bin", size: 4 << 20, seed: UInt64(index + 1))
            let attach = try await NodeProcess.runCommand(["attach", path, "--data-dir", holder.dataDirectory])
            try #require(attach.status == 0, "\(attach.stderr)")
            ids.append(attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            contents.append(bytes)
        }
        try await waitUntil("the joiner lists both", timeout: .seconds(30)) { try await Self.listed(joiner).count == 2 }

        // On a terminal (tmux): the line is redrawn in place and ends at 100%, then the summary.
        if let tmux = Self.tmux {
            let session = "gm-get-\(UInt32.random(in: 0...UInt32.max))"
            let out = work + "/terminal.bin"
            let command =
                "'\(NodeProcess.executable)' get \(ids[0]) -o '\(out)' --data-dir '\(joiner.dataDirectory)'; "
                + "echo EXITED:$?; sleep 120"
            let started = try ChildProcess.run(
                tmux, ["new-session", "-d", "-s", session, "-x", "150", "-y", "12", command])
            try #require(started.status == 0, "tmux: \(started.stderr)")
            defer { _ = try? ChildProcess.run(tmux, ["kill-session", "-t", session]) }
            var screen = ""
            var sawProgress = false
            try await waitUntil("the terminal get ends", timeout: .seconds(90), every: .milliseconds(100)) {
                screen = (try? ChildProcess.run(tmux, ["capture-pane", "-p", "-t", session]).stdout) ?? ""
                if screen.contains(" of 4.0 MiB") && screen.contains("/s") && screen.contains("ETA") {
                    sawProgress = true
                }
                return screen.contains("EXITED:")
            }
            let lines = screen.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(screen.contains("EXITED:0"), "\(screen)")
            #expect(sawProgress, "a progress line with bytes, rate and ETA was drawn: \(screen)")
            #expect(
                lines.contains { $0.hasPrefix("100%") && $0.hasSuffix("4.0 MiB of 4.0 MiB") },
                "the 100% line, nothing left over: \(screen)")
            #expect(lines.contains { $0.hasPrefix("got 4.0 MiB in ") && $0.contains("on average") }, "\(screen)")
            #expect(FileManager.default.contents(atPath: out) == contents[0])
        } else {
            print("tmux is not installed: the terminal progress line is not checked (apt-get install tmux)")
        }

        // Piped, interrupted: 130, nothing written, and the lazy joiner gives the fetch up.
        let out = work + "/interrupted.bin"
        let interrupted = try NodeProcess(
            ["get", ids[1], "-o", out], dataDirectory: joiner.dataDirectory, ownsDataDirectory: false)
        processes.append(interrupted)
        try await waitUntil("the fetch is under way", timeout: .seconds(30)) {
            try await Self.listed(joiner).first { $0.id == ids[1] }.map { $0.chunksHave > 0 && $0.fetching == true }
                ?? false
        }
        interrupted.signal(SIGINT)
        #expect(try await interrupted.waitForExit() == 130, "\(interrupted.stderr)")
        #expect(interrupted.stderr.contains("interrupted: nothing was written to \(out)"), "\(interrupted.stderr)")
        // The command waited for the node to remove its partial file: nothing is left once it exits.
        #expect(!FileManager.default.fileExists(atPath: out + ".groupmesh-partial"))
        try await waitUntil("the lazy joiner stops fetching", timeout: .seconds(20)) {
            try await Self.listed(joiner).first { $0.id == ids[1] }?.fetching == false
        }
        #expect(!FileManager.default.fileExists(atPath: out))
        #expect(joiner.stderr.contains("fetch given up: no one waits for it"), "the node's log says why it stopped")
        let held = try #require(try await Self.listed(joiner).first { $0.id == ids[1] })
        #expect(held.chunksHave < held.chunks)

        // Piped to the end: a plain line every 2 s, then the summary, counting only what was fetched.
        let piped = try NodeProcess(
            ["get", ids[1], "-o", out], dataDirectory: joiner.dataDirectory, ownsDataDirectory: false)
        processes.append(piped)
        #expect(try await piped.waitForExit(timeout: .seconds(90)) == 0, "\(piped.stderr)")
        let plain = piped.stderr.split(separator: "\n").filter { $0.hasPrefix("get: ") }
        #expect(
            !plain.isEmpty && plain.allSatisfy { $0.contains("%") && $0.contains(" of 4.0 MiB") }, "\(piped.stderr)")
        let summary = piped.stderr.split(separator: "\n").last ?? ""
        #expect(summary.hasPrefix("got 4.0 MiB in "), "\(piped.stderr)")
        #expect(summary.contains(" of it was here already)"), "the chunks the interrupted get kept: \(summary)")
        #expect(!piped.stderr.contains("\u{1B}["), "no terminal control sequences in a pipe")
        #expect(FileManager.default.contents(atPath: out) == contents[1])
    }
}
