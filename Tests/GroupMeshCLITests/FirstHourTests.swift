import Foundation
import MeshCore
import MeshTestKit
import Testing

/// What a new user and their scripts meet first: the version, exit statuses, `--json` results,
/// `get`'s output name and its refusal to overwrite, and events that say what is true.
@Suite("the first hour with real processes", .serialized)
struct FirstHourTests {
    struct Listed: Decodable {
        var id: String
        var chunks: Int
        var chunksHave: Int
        var metadata: String?
        var fetching: Bool?
    }

    static func listed(_ node: NodeProcess) async throws -> [Listed] {
        let result = try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode([Listed].self, from: Data(result.stdout.utf8))
    }

    static func randomFile(
        _ directory: String, name: String, size: Int, seed: UInt64
    ) throws -> (path: String, bytes: Data) {
        var state = seed
        let bytes = Data(
            (0..<size).map { _ in
                state = state &* 6364136223846793005 &+ 1442695040888963407
                return UInt8(truncatingIfNeeded: state >> 33)
            })
        let path = directory + "/" + name
        try bytes.write(to: URL(fileURLWithPath: path))
        return (path, bytes)
    }

    /// `groupmesh ARGUMENTS` run in `directory` (where `get` without -o writes).
    static func run(
        in directory: String, _ arguments: [String]
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        let quoted = ([NodeProcess.executable] + arguments).map {
            "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'"
        }
        return try await Self.shell("cd '\(directory)' && exec " + quoted.joined(separator: " "))
    }

    static func shell(_ script: String) async throws -> (status: Int32, stdout: String, stderr: String) {
        try ChildProcess.run("/bin/sh", ["-c", script], timeout: .seconds(60))
    }

    @Test(
        "--version names the release, the protocol and the build; the exit statuses tell usage, bad input and no node apart"
    )
    func versionAndExitStatuses() async throws {
        let version = try await NodeProcess.runCommand(["--version"])
        #expect(version.status == 0)
        #expect(
            version.stdout.hasPrefix("groupmesh ") && version.stdout.contains("protocol \(ProtocolVersion.current), ")
                && version.stdout.contains("speaks \(ProtocolVersion.oldestSpoken)–\(ProtocolVersion.current)")
                && version.stdout.contains("build"),
            "\(version.stdout)")

        let usage = try await NodeProcess.runCommand(["ping", "--count", "-1", "someone"])
        #expect(usage.status == 64, "\(usage.stderr)")
        #expect(
            usage.stderr.contains("--count must be 1 to 1000"), "a negative count is a value to refuse: \(usage.stderr)"
        )

        let directory = NodeProcess.makeTemporaryDirectory("no-node")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let noNode = try await NodeProcess.runCommand(["status", "--data-dir", directory])
        #expect(noNode.status == 69, "\(noNode.stderr)")
        #expect(noNode.stderr.split(separator: "\n").count == 1 && noNode.stderr.contains("groupmesh run --data-dir"))

        let badInvite = try await NodeProcess.runCommand([
            "run", "--listen", "127.0.0.1:0", "--invite", "gm1nonsense",
            "--data-dir", directory,
        ])
        #expect(badInvite.status == 65, "\(badInvite.stderr)")
        #expect(badInvite.stderr.split(separator: "\n").count == 1)
    }

    @Test(
        "--json on every command that prints a result; get writes the attached name, keeps what is there without --force, and -o - writes to standard output"
    )
    func jsonResultsAndGetOutputs() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "solo"])
        defer { Task { await node.cleanUp() } }
        let invite = try await node.waitForLine(prefix: "invite:")
        let work = NodeProcess.makeTemporaryDirectory("first-hour")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let (file, bytes) = try Self.randomFile(work, name: "holiday photos.bin", size: 700_000, seed: 7)
        let data = ["--data-dir", node.dataDirectory]

        let inviteJSON = try await NodeProcess.runCommand(["invite", "--json"] + data)
        #expect(try JSONDecoder().decode([String: String].self, from: Data(inviteJSON.stdout.utf8))["invite"] == invite)

        let attach = try await NodeProcess.runCommand(["attach", "--json", file] + data)
        let id = try #require(
            try JSONDecoder().decode([String: String].self, from: Data(attach.stdout.utf8))["id"], "\(attach.stderr)")
        let listed = try #require(try await Self.listed(node).first)
        #expect(listed.metadata == #"{"name":"holiday photos.bin"}"#, "attach keeps the file's name")

        // Into an empty directory under the attached name, then refused there without --force.
        let out = work + "/out"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let first = try await Self.run(in: out, ["get", String(id.prefix(8))] + data)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(FileManager.default.contents(atPath: out + "/holiday photos.bin") == bytes)
        #expect(first.stderr.contains("holiday photos.bin"), "the summary names what was written: \(first.stderr)")
        try Data("mine".utf8).write(to: URL(fileURLWithPath: out + "/holiday photos.bin"))
        let again = try await Self.run(in: out, ["get", String(id.prefix(8))] + data)
        #expect(again.status == 65 && again.stderr.contains("exists and was kept; give --force"), "\(again.stderr)")
        #expect(
            FileManager.default.contents(atPath: out + "/holiday photos.bin") == Data("mine".utf8),
            "nothing overwritten")
        let forced = try await Self.run(in: out, ["get", "--force", "--json", String(id.prefix(8))] + data)
        #expect(forced.status == 0, "\(forced.stderr)")
        struct Summary: Decodable { var id: String; var path: String; var size: UInt64 }
        let summary = try JSONDecoder().decode(Summary.self, from: Data(forced.stdout.utf8))
        #expect(summary.id == id && summary.size == 700_000 && summary.path == "holiday photos.bin")
        #expect(FileManager.default.contents(atPath: out + "/holiday photos.bin") == bytes)

        // -o -: the bytes on standard output, nothing left in TMPDIR, also when the reader goes early.
        let temporary = work + "/tmp"
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        let get = "TMPDIR='\(temporary)' '\(NodeProcess.executable)' get \(id) -o - --data-dir '\(node.dataDirectory)'"
        let viaShell = try await Self.shell("\(get) | cmp - '\(file)'")
        #expect(viaShell.status == 0, "get -o - wrote other bytes: \(viaShell.stdout) \(viaShell.stderr)")
        let early = try await Self.shell("\(get) | head -c 1 >/dev/null")
        #expect(early.status == 0, "\(early.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary).isEmpty, "-o - left its copy behind")
        #expect(!FileManager.default.fileExists(atPath: work + "/-"), "no file named '-'")
        let nowhere = try await NodeProcess.runCommand(["get", id, "-o", work + "/no/such/dir/x"] + data)
        #expect(nowhere.status == 65 && nowhere.stderr.contains("does not exist; create it first"), "\(nowhere.stderr)")

        // Another member chose the name: only a plain file name in this directory is written.
        // A "/" before a combining mark is one Character but two scalars: split as scalars, the
        // name stays in this directory.
        for (name, written) in [
            ("../escaped.bin", "escaped.bin"), ("../../.bashrc", nil), ("bin/\u{301}x", "\u{301}x"),
            ("a\u{202E}nib.exe", nil),
        ] as [(String, String?)] {
            let metadata = String(decoding: try JSONEncoder().encode(["name": name]), as: UTF8.self)
            let added = try await NodeProcess.runCommand(["attach", "--json", file, "--metadata", metadata] + data)
            let named = try #require(
                try JSONDecoder().decode([String: String].self, from: Data(added.stdout.utf8))["id"])
            let result = try await Self.run(in: out, ["get", named] + data)
            if let written {
                #expect(
                    result.status == 0 && FileManager.default.fileExists(atPath: out + "/" + written),
                    "\(name): \(result.stderr)")
            } else {
                #expect(result.status == 65 && result.stderr.contains("has no file name"), "\(name): \(result.stderr)")
            }
        }
        #expect(
            Set(try FileManager.default.contentsOfDirectory(atPath: out)) == [
                "escaped.bin", "holiday photos.bin", "\u{301}x",
            ])

        let unknown = try await NodeProcess.runCommand(["get", "ffff0000", "-o", work + "/x"] + data)
        #expect(unknown.status == 65 && unknown.stderr.contains("unknown attachment"), "\(unknown.stderr)")

        let send = try await NodeProcess.runCommand(["send", "--json", "hello"] + data)
        #expect(
            send.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"sentTo":0}"#,
            "\(send.stdout) \(send.stderr)")
        let remove = try await NodeProcess.runCommand(["remove", "--json", id] + data)
        #expect(
            remove.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"removed":"\#(id)"}"#,
            "\(remove.stdout)")
        let leave = try await NodeProcess.runCommand(["leave", "--json"] + data)
        struct Left: Decodable { var alone: Bool; var handedOver: [String]; var unavailable: [String] }
        #expect(try JSONDecoder().decode(Left.self, from: Data(leave.stdout.utf8)).alone, "\(leave.stdout)")
    }

    @Test(
        "events say what is true: an ordinary upload raises no attachment-unavailable; a lost attachment is unavailable, then available when its holder is back"
    )
    func truthfulAttachmentEvents() async throws {
        try await withProcessMesh(names: ["uploader", "watcher"], lazy: ["watcher"]) { mesh in
            let (uploader, watcher) = (try mesh["uploader"], try mesh["watcher"])
            let events = try mesh.client(["events", "--json"], of: "watcher")
            struct Event: Decodable { var type: String }
            func types() -> [String] {
                events.stdout.split(separator: "\n").compactMap {
                    try? JSONDecoder().decode(Event.self, from: Data($0.utf8)).type
                }
            }
            // Subscribed before the upload.
            _ = try await events.waitForLine(prefix: "events: following", onStderr: true)

            let work = NodeProcess.makeTemporaryDirectory("events")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let (file, _) = try Self.randomFile(work, name: "notes.bin", size: 300_000, seed: 3)
            let attach = try await NodeProcess.runCommand(["attach", file, "--data-dir", uploader.dataDirectory])
            #expect(attach.status == 0, "\(attach.stderr)")
            try await waitUntil("the watcher sees it added", timeout: .seconds(30)) {
                types().contains("attachment-added")
            }
            try await waitUntil("the watcher knows its holder", timeout: .seconds(30)) {
                try await NodeProcess.runCommand(["status", "--json", "--data-dir", watcher.dataDirectory]).stdout
                    .contains(#""holders":1"#)
            }
            #expect(!types().contains("attachment-unavailable"), "an ordinary upload: \(types())")

            // The only holder stops answering: once it is dead, the attachment is lost; back, it is not.
            uploader.signal(SIGSTOP)
            try await waitUntil("unavailable once its holder is dead", timeout: .seconds(60)) {
                types().contains("attachment-unavailable")
            }
            uploader.signal(SIGCONT)
            try await waitUntil("available again", timeout: .seconds(60)) { types().contains("attachment-available") }
            #expect(types().filter { $0 == "attachment-unavailable" }.count == 1, "\(types())")
        }
    }

    /// A 300 kB file of random bytes attached by `uploader`, once `fetcher` lists it: its id.
    static func attach(
        _ work: String, name: String, seed: UInt64, by uploader: NodeProcess, knownTo fetcher: NodeProcess
    ) async throws -> String {
        let (file, _) = try randomFile(work, name: name, size: 300_000, seed: seed)
        let attach = try await NodeProcess.runCommand(["attach", file, "--data-dir", uploader.dataDirectory])
        let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(attach.status == 0, "\(attach.stderr)")
        try await waitUntil("the fetcher knows it", timeout: .seconds(30)) {
            try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", fetcher.dataDirectory])
                .stdout.contains(id)
        }
        return id
    }

    @Test(
        "a get of an attachment whose only holder is gone says, while it waits, that it waits for a holder; then it fails in one line and writes nothing"
    )
    func getWithNoHolderSaysWhatItWaitsFor() async throws {
        try await withProcessMesh(names: ["uploader", "fetcher"], lazy: ["fetcher"]) { mesh in
            let (uploader, fetcher) = (try mesh["uploader"], try mesh["fetcher"])
            let work = NodeProcess.makeTemporaryDirectory("no-holder")
            defer { try? FileManager.default.removeItem(atPath: work) }
            _ = try await Self.attach(work, name: "held.bin", seed: 6, by: uploader, knownTo: fetcher)
            uploader.signal(SIGKILL)
            _ = try? await uploader.waitForExit()
            let output = work + "/out.bin"
            let get = try mesh.client(["get", "held.bin", "-o", output], of: "fetcher")
            #expect(try await get.waitForExit(timeout: .seconds(60)) == 69, "\(get.stderr)")
            let lines = get.stderr.split(separator: "\n")
            // Piped: a plain line every 2 s while it waits, then the error alone on the last line.
            #expect(
                lines.dropLast().contains {
                    $0.hasPrefix("get: ") && $0.contains("waiting for a member that holds it")
                },
                "\(get.stderr)")
            #expect(
                lines.last?.hasPrefix("groupmesh: error: unavailable: no reachable member holds") == true,
                "\(get.stderr)")
            #expect(!FileManager.default.fileExists(atPath: output), "a partial file was left")
        }
    }

    @Test("a get whose attachment is removed while it waits fails in one line that says so, and writes nothing")
    func removedDuringGet() async throws {
        try await withProcessMesh(names: ["uploader", "fetcher"], lazy: ["fetcher"]) { mesh in
            let (uploader, fetcher) = (try mesh["uploader"], try mesh["fetcher"])
            let work = NodeProcess.makeTemporaryDirectory("removed-during-get")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let id = try await Self.attach(work, name: "gone.bin", seed: 5, by: uploader, knownTo: fetcher)
            // Its only holder stops answering: the get waits, fetching.
            uploader.signal(SIGSTOP)
            defer { uploader.signal(SIGCONT) }
            let output = work + "/out.bin"
            let get = try mesh.client(["get", String(id.prefix(8)), "-o", output], of: "fetcher")
            try await waitUntil("the get is under way", timeout: .seconds(30)) {
                try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", fetcher.dataDirectory])
                    .stdout.contains(#""fetching":true"#)
            }
            let removed = try await NodeProcess.runCommand(["remove", id, "--data-dir", fetcher.dataDirectory])
            #expect(removed.status == 0, "\(removed.stderr)")
            #expect(try await get.waitForExit(timeout: .seconds(30)) == 69, "\(get.stderr)")
            #expect(
                get.stderr.contains(
                    "attachment \(id.prefix(16)) was removed from the session while it was being fetched"),
                "\(get.stderr)")
            #expect(!FileManager.default.fileExists(atPath: output), "a partial file was left")
        }
    }
}
