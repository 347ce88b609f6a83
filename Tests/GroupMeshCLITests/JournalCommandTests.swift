import Foundation
import MeshTestKit
import Testing

/// attach, attachments, get and remove between real processes on loopback.
@Suite("journal with real processes", .serialized)
struct JournalCommandTests {
    struct Listed: Decodable {
        var id: String; var content: String; var size: UInt64; var chunks: Int; var chunksHave: Int; var holders: Int;
        var metadata: String?
    }

    static func listed(_ node: NodeProcess) async throws -> [Listed] {
        let result = try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode([Listed].self, from: Data(result.stdout.utf8))
    }

    @Test("attach on one node; all list the same id; get is byte-identical; remove disappears everywhere")
    func attachGetRemove() async throws {
        try await withProcessMesh(names: ["first", "second", "third"], lazy: ["second", "third"]) { mesh in
            let nodes = mesh.nodes, first = try mesh["first"]
            let file = first.dataDirectory + "/../groupmesh-attach-\(UUID().uuidString.prefix(6)).bin"
            var state: UInt64 = 42
            let bytes = Data(
                (0..<900_000).map { _ in
                    state = state &* 6364136223846793005 &+ 1442695040888963407
                    return UInt8(truncatingIfNeeded: state >> 33)
                })
            try bytes.write(to: URL(fileURLWithPath: file))
            defer { try? FileManager.default.removeItem(atPath: file) }

            // Longer than any terminal line: a table piped to a script keeps it whole.
            let metadata = #"{"name":"demo","note":""# + String(repeating: "long ", count: 40) + #""}"#
            let attach = try await NodeProcess.runCommand([
                "attach", "--data-dir", first.dataDirectory, file, "--metadata", metadata,
            ])
            #expect(attach.status == 0, "\(attach.stderr)")
            let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(id.count == 32 && id.allSatisfy(\.isHexDigit))

            for node in nodes {
                try await waitUntil("listed everywhere") { try await Self.listed(node).map(\.id) == [id] }
            }
            let remote = try await Self.listed(nodes[2])[0]
            #expect(remote.size == 900_000)
            #expect(remote.chunksHave == 0, "lazy: nothing fetched before get")
            #expect(remote.metadata == metadata)
            let table = try await NodeProcess.runCommand(["attachments", "--data-dir", nodes[2].dataDirectory])
            #expect(table.stdout.contains(metadata), "cut in a pipe: \(table.stdout)")

            let output = nodes[2].dataDirectory + "/out.bin"
            let get = try await NodeProcess.runCommand([
                "get", "--data-dir", nodes[2].dataDirectory,
                String(id.prefix(10)), "--output", output,
            ])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == bytes)
            let status = try await nodes[2].status()
            #expect((status.counters["chunksFetched"]?.number ?? 0) >= 4)
            // The fetch's congestion control reports itself: a rate, a round trip measured, and
            // slowdown tests of which none can have found more flows than it ran.
            let downlink = try #require(status.downlink, "no downlink in status --json")
            #expect(downlink.rate > 0 && downlink.roundTripMs != nil, "\(downlink)")
            let slowdowns = try #require(downlink.slowdowns, "no slowdowns in status --json")
            let found = try #require(
                downlink.slowdownsFoundAnotherFlow,
                "no slowdownsFoundAnotherFlow in status --json")
            #expect(found <= slowdowns, "\(downlink)")
            #expect(downlink.lossyLine != nil, "no lossyLine in status --json")
            // Loopback carries more than Ethernet: the holder's path was probed past 1,472 bytes
            // (8,972 unless a probe was lost three times on a busy machine; PROTOCOL.md §1a); members
            // it pulled nothing from are not measured.
            let holderID = try await first.status().`self`.id
            let sized = try await nodes[2].waitForStatus(timeout: .seconds(10), "holder's path measured") { status in
                (status.members.first { $0.id == holderID }?.datagramSize ?? 0) > 1472
            }
            let bystander = try await nodes[1].status().`self`.id
            #expect(sized.members.first { $0.id == bystander }?.datagramSize == nil)

            let remove = try await NodeProcess.runCommand(["remove", "--data-dir", nodes[1].dataDirectory, id])
            #expect(remove.status == 0, "\(remove.stderr)")
            for node in nodes {
                try await waitUntil("removed everywhere") { try await Self.listed(node).isEmpty }
            }
        }
    }

    @Test(
        "errors a user can cause are one line: unknown id, file over the limit, missing file, bad metadata, a directory, a pipe, a device, an output over the node's own files"
    )
    func attachmentErrors() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let unknown = try await NodeProcess.runCommand([
            "get", "--data-dir", node.dataDirectory, "0123456789abcdef",
            "--output", node.dataDirectory + "/x",
        ])
        #expect(unknown.stderr.contains("unknown attachment"))
        let missing = try await NodeProcess.runCommand(["attach", "--data-dir", node.dataDirectory, "/no/such/file"])
        #expect(missing.stderr.contains("no such file"))
        let badJSON = try await NodeProcess.runCommand([
            "attach", "--data-dir", node.dataDirectory, "/etc/hostname",
            "--metadata", "{nope",
        ])
        #expect(badJSON.stderr.contains("not valid JSON"))
        // 100 MiB + 1 byte, sparse: the size is refused before anything is read.
        let big = node.dataDirectory + "/big.bin"
        _ = FileManager.default.createFile(atPath: big, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: big))
        try handle.truncate(atOffset: 100 * 1024 * 1024 + 1)
        try handle.close()
        let tooLarge = try await NodeProcess.runCommand(["attach", "--data-dir", node.dataDirectory, big])
        #expect(tooLarge.stderr.contains("over the limit"))
        let directory = try await NodeProcess.runCommand([
            "attach", "--data-dir", node.dataDirectory, node.dataDirectory,
        ])
        #expect(directory.stderr.contains("is a directory"), "\(directory.stderr)")
        // A pipe would block whoever opens it until a writer comes: the node must refuse it, not hang.
        let pipe = node.dataDirectory + "/pipe"
        #expect(mkfifo(pipe, 0o600) == 0)
        let fifo = try await NodeProcess.runCommand(
            ["attach", "--data-dir", node.dataDirectory, pipe], timeout: .seconds(20))
        #expect(fifo.stderr.contains("not a regular file"), "\(fifo.stderr)")
        let device = try await NodeProcess.runCommand(["attach", "--data-dir", node.dataDirectory, "/dev/zero"])
        #expect(device.stderr.contains("not a regular file"), "\(device.stderr)")
        // The node's own files are not a place to write an attachment to.
        _ = try await NodeProcess.runCommand(["attach", "--data-dir", node.dataDirectory, "/etc/hostname"])
        let ids = try await Self.listed(node).map(\.id)
        let journal = try Data(contentsOf: URL(fileURLWithPath: node.dataDirectory + "/journal.log"))
        let overwrite = try await NodeProcess.runCommand([
            "get", "--data-dir", node.dataDirectory, ids.first ?? "none",
            "--output", node.dataDirectory + "/journal.log",
        ])
        #expect(overwrite.stderr.contains("one of the node's own files"), "\(overwrite.stderr)")
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: node.dataDirectory + "/journal.log")) == journal,
            "the journal was overwritten")
        let short = try await NodeProcess.runCommand([
            "get", "--data-dir", node.dataDirectory, String(ids.first?.prefix(3) ?? "abc"),
            "--output", node.dataDirectory + "/x",
        ])
        #expect(short.stderr.contains("at least 4 characters"), "\(short.stderr)")
        for result in [unknown, missing, badJSON, tooLarge, directory, fifo, device, overwrite, short] {
            #expect(result.status != 0)
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
        #expect(ids.count == 1, "the node still answers, and only /etc/hostname was added")
    }

    @Test(
        "get --output replaces only a regular file: a pipe, a link, a device and a directory are refused and left alone; the file gets the user's umask"
    )
    func getWritesOnlyRegularFiles() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let source = node.dataDirectory + "/source.bin"
        let bytes = Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try bytes.write(to: URL(fileURLWithPath: source))
        let attached = try await NodeProcess.runCommand(["attach", "--data-dir", node.dataDirectory, source])
        let id = attached.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(attached.status == 0 && id.count == 32, "\(attached.stderr)")
        func get(_ output: String, force: Bool = false) async throws -> (status: Int32, stdout: String, stderr: String)
        {
            try await NodeProcess.runCommand(
                ["get", "--data-dir", node.dataDirectory, id, "--output", output] + (force ? ["--force"] : []),
                timeout: .seconds(30))
        }
        let outside = NodeProcess.makeTemporaryDirectory("outputs")
        // A named pipe: was replaced by a regular file (and a reader of the pipe never saw a byte).
        let pipe = outside + "/pipe"
        #expect(mkfifo(pipe, 0o600) == 0)
        let toPipe = try await get(pipe)
        #expect(toPipe.stderr.contains("is a named pipe"), "\(toPipe.stderr)")
        // A link (to a file its owner cares about): neither followed nor replaced.
        let precious = outside + "/precious"
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: precious))
        let link = outside + "/link"
        #expect(symlink(precious, link) == 0)
        let toLink = try await get(link)
        #expect(toLink.stderr.contains("is a symbolic link"), "\(toLink.stderr)")
        #expect(try String(contentsOfFile: precious, encoding: .utf8) == "keep me")
        let toDirectory = try await get(outside)
        #expect(toDirectory.stderr.contains("is a directory"), "\(toDirectory.stderr)")
        var refused = [toPipe, toLink, toDirectory]
        // A device of our own (as root: the old node replaced /dev/full with a regular file).
        let device = outside + "/null"
        // makedev(1, 3): the null device.
        if geteuid() == 0, mknod(device, S_IFCHR | 0o600, dev_t(1 << 8 | 3)) == 0 {
            let toDevice = try await get(device)
            #expect(toDevice.stderr.contains("is a device"), "\(toDevice.stderr)")
            refused.append(toDevice)
        }
        for (result, path) in zip(refused, [pipe, link, outside, device]) {
            #expect(result.status != 0)
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
            var info = stat()
            #expect(lstat(path, &info) == 0 && (info.st_mode & S_IFMT) != S_IFREG, "\(path) became a regular file")
        }
        #expect(!FileManager.default.fileExists(atPath: pipe + ".groupmesh-partial"))
        // A regular file is kept without --force, and replaced with it, with the mode our umask gives
        // (0640 under 027, not the node's 0644).
        let target = outside + "/copy.bin"
        try Data("old".utf8).write(to: URL(fileURLWithPath: target))
        let kept = try await get(target)
        #expect(kept.status == 65 && kept.stderr.contains("exists and was kept"), "\(kept.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: target)) == Data("old".utf8))
        let previous = umask(0o027)
        let replaced = try await get(target, force: true)
        umask(previous)
        #expect(replaced.status == 0, "\(replaced.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: target)) == bytes)
        #expect((try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int) == 0o640)
    }

    @Test("get of an attachment nobody reachable holds fails with unavailable after a timeout")
    func unavailable() async throws {
        try await withProcessMesh(names: ["first", "second"], lazy: ["second"]) { mesh in
            let (first, second) = (try mesh["first"], try mesh["second"])
            let file = first.dataDirectory + "/only-here.bin"
            try Data(repeating: 9, count: 300_000).write(to: URL(fileURLWithPath: file))
            let attach = try await NodeProcess.runCommand(["attach", "--data-dir", first.dataDirectory, file])
            let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            try await waitUntil("listed") { try await Self.listed(second).map(\.id) == [id] }
            first.signal(SIGKILL)
            try await first.waitForExit()
            let get = try await NodeProcess.runCommand(
                [
                    "get", "--data-dir", second.dataDirectory, id,
                    "--output", second.dataDirectory + "/x",
                ], timeout: .seconds(60))
            #expect(get.status != 0)
            #expect(get.stderr.contains("unavailable"), "\(get.stderr)")
            // Named as the user named it: by the attachment's id, not its content's hash.
            #expect(get.stderr.contains(String(id.prefix(16))), "\(get.stderr)")
            #expect(
                !FileManager.default.fileExists(atPath: second.dataDirectory + "/x.groupmesh-partial"),
                "a failed get leaves no partial file")
        }
    }
}

@Suite("journal durability and lifecycle with real processes", .serialized)
struct JournalLifecycleTests {
    @Test(
        "the journal survives a restart; killed, the uploader leaves the attachment to two replicas; a late joiner gets it whole"
    )
    func restartAndOutliveUploader() async throws {
        try await withProcessMesh(names: ["uploader", "replica", "second"]) { mesh in
            let (uploader, replica, second) = try (mesh["uploader"], mesh["replica"], mesh["second"])
            let file = uploader.dataDirectory + "/payload.bin"
            var state: UInt64 = 7
            let bytes = Data(
                (0..<2_000_000).map { _ in
                    state = state &* 6364136223846793005 &+ 1442695040888963407
                    return UInt8(truncatingIfNeeded: state >> 33)
                })
            try bytes.write(to: URL(fileURLWithPath: file))
            let id = try await NodeProcess.runCommand(["attach", "--data-dir", uploader.dataDirectory, file])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            // The replicas fetch it by themselves (replication is the default).
            for node in [replica, second] {
                try await waitUntil("replicated") {
                    try await JournalCommandTests.listed(node).first.map { $0.chunksHave == $0.chunks } ?? false
                }
            }

            // The replica is killed and restarted: its journal and chunks are still there.
            replica.signal(SIGKILL)
            try await replica.waitForExit()
            let restarted = try mesh.restart("replica")
            _ = try await restarted.waitForLine(prefix: "listening:")
            let listed = try await JournalCommandTests.listed(restarted)
            #expect(listed.map(\.id) == [id])
            #expect(listed.first.map { $0.chunksHave == $0.chunks } == true)

            // The uploader is killed; a late joiner still gets the attachment, from the replicas.
            uploader.signal(SIGKILL)
            try await uploader.waitForExit()
            let inviteFromReplica = try await NodeProcess.runCommand(["invite", "--data-dir", restarted.dataDirectory])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let late = try mesh.join("late", arguments: ["--lazy"], invite: inviteFromReplica)
            try await waitUntil("late joiner lists it") { try await JournalCommandTests.listed(late).map(\.id) == [id] }
            let output = late.dataDirectory + "/out.bin"
            let get = try await NodeProcess.runCommand([
                "get", "--data-dir", late.dataDirectory, id,
                "--output", output,
            ])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == bytes)
        }
    }
}
