import Foundation
import MeshTestKit
import Testing

/// README.md's quick start, run as written on two hosts of our own (network namespaces): each
/// block on the machine its first line names, in its own directory, with `groupmesh` on PATH.
@Suite("README quick start (network namespaces)", .serialized)
struct ReadmeQuickStartTests {
    struct Block {
        var machine: String
        var commands: [String]
    }

    /// The quick start's `sh` blocks: the machine from `# on NAME's machine`, the commands without
    /// their trailing comments.
    static func quickStart() throws -> [Block] {
        let readme = try String(contentsOfFile: packageRoot + "/README.md", encoding: .utf8)
        let start = try #require(readme.range(of: "## Quick start"))
        let section = readme[start.upperBound...].components(separatedBy: "\n## ").first ?? ""
        var blocks: [Block] = []
        for chunk in section.components(separatedBy: "```sh\n").dropFirst() {
            let lines = chunk.components(separatedBy: "\n```").first?.split(separator: "\n").map(String.init) ?? []
            guard let first = lines.first,
                let name = first.split(separator: " ").dropFirst(2).first?.split(separator: "'").first
            else { continue }
            let commands = lines.dropFirst().map { line in
                line.range(of: #"\s{2,}# .*$"#, options: .regularExpression).map { String(line[..<$0.lowerBound]) }
                    ?? line
            }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
            blocks.append(Block(machine: String(name), commands: commands))
        }
        return blocks
    }

    static var packageRoot: String {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }

    @Test(
        "the quick start runs as written: two machines meet, a message and an attachment cross",
        .enabled(if: NamespaceLab.isAvailable, Comment(rawValue: NamespaceLab.unavailableReason ?? "")))
    func quickStartRunsAsWritten() async throws {
        let blocks = try Self.quickStart()
        try #require(
            blocks.map(\.machine) == ["alice", "bob", "alice", "bob"],
            "the quick start's shape changed: update this test")
        let lab = try NamespaceLab(hostCount: 2)
        defer { lab.tearDown() }
        let root = NodeProcess.makeTemporaryDirectory("readme")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let bin = URL(fileURLWithPath: NodeProcess.executable).deletingLastPathComponent().path
        var background: [ChildProcess] = []
        defer {
            for process in background where process.isRunning { process.signal(SIGKILL) }
        }
        func directory(_ machine: String) -> String { root + "/" + machine }
        func launcher(_ machine: String) -> [String] { lab.launcher(machine == "alice" ? 0 : 1) }
        func shell(_ machine: String, _ command: String) -> [String] {
            launcher(machine) + [
                "/bin/sh", "-c", "cd '\(directory(machine))' && export PATH='\(bin)':\"$PATH\" && exec \(command)",
            ]
        }
        func groupmesh(
            _ machine: String, _ arguments: [String]
        ) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await NodeProcess.runCommand(arguments + ["--data-dir", directory(machine) + "/.groupmesh"])
        }
        for machine in ["alice", "bob"] {
            try FileManager.default.createDirectory(atPath: directory(machine), withIntermediateDirectories: true)
        }
        let movie = try FirstHourTests.randomFile(directory("alice"), name: "holiday.mov", size: 2 << 20, seed: 11)

        var listen: ChildProcess?
        var attachmentID = ""
        for (index, block) in blocks.enumerated() {
            // What a person does between the blocks: hand the invite over, look before fetching.
            if index == 1 {
                let mode =
                    try FileManager.default.attributesOfItem(atPath: directory("alice") + "/invite.txt")[
                        .posixPermissions] as? Int
                #expect(mode == 0o600, "invite -o writes the secret for its owner alone")
                try FileManager.default.copyItem(
                    atPath: directory("alice") + "/invite.txt", toPath: directory("bob") + "/invite.txt")
                // As it arrives by mail or chat: readable by others, until the quick start's chmod.
                chmod(directory("bob") + "/invite.txt", 0o644)
            }
            if index == 3 {
                try await waitUntil("bob lists the attachment", timeout: .seconds(30)) {
                    try await groupmesh("bob", ["attachments", "--json"]).stdout.contains(attachmentID)
                }
            }
            for command in block.commands {
                let line = command
                if line.hasSuffix("&") {
                    let argv = shell(block.machine, String(line.dropLast()).trimmingCharacters(in: .whitespaces))
                    let process = try ChildProcess(executable: argv[0], arguments: Array(argv.dropFirst()))
                    background.append(process)
                    if line.contains(" run ") {
                        try await waitUntil("\(block.machine)'s node answers", timeout: .seconds(30)) {
                            try await groupmesh(block.machine, ["status"]).status == 0
                        }
                        if block.machine == "bob" {
                            try await waitUntil("alice and bob meet", timeout: .seconds(30)) {
                                try await groupmesh("bob", ["status", "--json"]).stdout.components(
                                    separatedBy: #""state":"alive""#
                                ).count == 3
                            }
                        }
                    } else if line.contains(" listen") {
                        listen = process
                        try await waitUntil("listen is subscribed", timeout: .seconds(20)) {
                            process.standardError.contains("ready")
                        }
                    }
                    continue
                }
                let argv = shell(block.machine, line)
                let result = try ChildProcess.run(argv[0], Array(argv.dropFirst()), timeout: .seconds(60))
                #expect(result.status == 0, "\(block.machine): \(line): \(result.stderr)")
                if line.contains(" status") {
                    #expect(result.stdout.contains("alice") && result.stdout.contains("bob"), "\(result.stdout)")
                }
                if line.contains(" attach ") {
                    attachmentID = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                }
            }
        }
        let heard = try #require(listen, "the quick start starts a listen")
        try await waitUntil("bob's listen prints alice's message", timeout: .seconds(20)) {
            heard.standardOutput.contains("alice: hello, bob")
        }
        #expect(FileManager.default.contents(atPath: directory("bob") + "/holiday.mov") == movie.bytes)
        // The nodes leave as a person's Ctrl-C makes them (the defer kills whatever is left).
        for process in background { process.signal(SIGTERM) }
        try await waitUntil("the nodes and the listen end", timeout: .seconds(30)) {
            background.allSatisfy { !$0.isRunning }
        }
    }
}
