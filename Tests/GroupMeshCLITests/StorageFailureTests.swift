import Foundation
import MeshTestKit
import Testing

/// A node whose disk fails under it: the change is refused in one line, nothing stored before is
/// lost, nothing half-made is left behind, and a restart sees exactly what was acknowledged.
@Suite("storage failures with real processes", .serialized)
struct StorageFailureTests {
    struct Listed: Decodable { var id: String }

    static func listed(_ node: NodeProcess) async throws -> Set<String> {
        let result = try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return Set(try JSONDecoder().decode([Listed].self, from: Data(result.stdout.utf8)).map(\.id))
    }

    @discardableResult
    static func writeFile(_ path: String, size: Int, seed: UInt64) throws -> Data {
        var random = SeededGenerator(seed: seed)
        return try writeRandomFile(path, size: size, using: &random)
    }

    static func attach(_ file: String, on node: NodeProcess) async throws -> (status: Int32, id: String, stderr: String)
    {
        let result = try await NodeProcess.runCommand(["attach", "--data-dir", node.dataDirectory, file])
        return (result.status, result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), result.stderr)
    }

    /// Stops the node gracefully and starts it again on its data dir (`node` is the new one as
    /// soon as it exists, so a caller's clean-up reaches it).
    static func restart(_ node: inout NodeProcess) async throws {
        node.signal(SIGTERM)
        try await node.waitForExit()
        node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: node.dataDirectory)
        _ = try await node.waitForLine(prefix: "listening:")
    }

    /// Runs `body` with a tmpfs of `size` mounted at a fresh directory, unmounted afterwards
    /// whatever happens (lazily, should a process still hold a file there). Nodes the body starts
    /// on it must be stopped by the body.
    static func withSmallDisk(_ size: String, _ body: (String) async throws -> Void) async throws {
        let mountPoint = NodeProcess.makeTemporaryDirectory("small-disk")
        defer { try? FileManager.default.removeItem(atPath: mountPoint) }
        try #require(
            run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", mountPoint]) == 0, "mount tmpfs failed")
        defer { _ = run("/bin/umount", ["-l", mountPoint]) }
        try await body(mountPoint)
    }

    static func kill(_ node: NodeProcess) {
        node.signal(SIGKILL)
        _ = node.process.waitUntilExit()
    }

    @Test(
        "a journal write that fails changes nothing: attach is refused in one line, the listing and a restart show only what was acknowledged"
    )
    func failedJournalWriteChangesNothing() async throws {
        let files = NodeProcess.makeTemporaryDirectory("storage-files")
        defer { try? FileManager.default.removeItem(atPath: files) }
        var node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { [node] in await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        for (name, seed) in [("a", 1), ("b", 2), ("c", 3)] as [(String, UInt64)] {
            try Self.writeFile("\(files)/\(name).bin", size: 600_000, seed: seed)
        }
        let first = try await Self.attach("\(files)/a.bin", on: node)
        #expect(first.status == 0, "\(first.stderr)")

        // The log cannot be opened: a directory stands where it was.
        let log = node.dataDirectory + "/journal.log"
        try FileManager.default.moveItem(atPath: log, toPath: log + ".saved")
        try FileManager.default.createDirectory(atPath: log, withIntermediateDirectories: false)
        let refused = try await Self.attach("\(files)/b.bin", on: node)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("journal.log"), "\(refused.stderr)")
        #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
        #expect(try await Self.listed(node) == [first.id], "a refused attach is listed")
        let removeRefused = try await NodeProcess.runCommand(["remove", "--data-dir", node.dataDirectory, first.id])
        #expect(removeRefused.status != 0, "remove acknowledged without its journal write")
        #expect(try await Self.listed(node) == [first.id], "a refused remove took effect")

        try FileManager.default.removeItem(atPath: log)
        try FileManager.default.moveItem(atPath: log + ".saved", toPath: log)
        let third = try await Self.attach("\(files)/c.bin", on: node)
        #expect(third.status == 0, "\(third.stderr)")
        #expect(try await Self.listed(node) == [first.id, third.id])

        try await Self.restart(&node)
        #expect(try await Self.listed(node) == [first.id, third.id])
    }

    @Test(
        "a full disk: attach, get and a journal append are refused in one line; nothing stored is lost or left half-made, through a restart",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs; skipped"))
    func fullDisk() async throws {
        let files = NodeProcess.makeTemporaryDirectory("storage-files")
        defer { try? FileManager.default.removeItem(atPath: files) }
        let small = try Self.writeFile("\(files)/small.bin", size: 300_000, seed: 4)
        try Self.writeFile("\(files)/big.bin", size: 8 << 20, seed: 5)
        try Self.writeFile("\(files)/medium.bin", size: 1 << 20, seed: 6)
        try await Self.withSmallDisk("4m") { mountPoint in
            var node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: mountPoint + "/node")
            defer { Self.kill(node) }
            _ = try await node.waitForLine(prefix: "listening:")
            let first = try await Self.attach("\(files)/small.bin", on: node)
            #expect(first.status == 0, "\(first.stderr)")

            // Chunks that do not fit: refused, and the space they took is given back.
            let freeBefore = Self.freeBytes(mountPoint)
            let refused = try await Self.attach("\(files)/big.bin", on: node)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("no space left"), "\(refused.stderr)")
            #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
            #expect(
                Self.freeBytes(mountPoint) + 64 * 1024 >= freeBefore,
                "the refused attach kept \(freeBefore - Self.freeBytes(mountPoint)) bytes")
            #expect(try await Self.listed(node) == [first.id])

            // The disk filled by someone else: get's output is refused before anything is written,
            // and a journal append fails cleanly.
            let filler = mountPoint + "/filler"
            Self.fill(filler, upTo: 8 << 20)
            let output = mountPoint + "/out.bin"
            let get = try await NodeProcess.runCommand([
                "get", "--data-dir", node.dataDirectory, first.id, "--output", output,
            ])
            #expect(get.status != 0)
            #expect(
                get.stderr.split(separator: "\n").last?.contains("not enough space for \(output)") == true,
                "\(get.stderr)")
            // -o - stages a copy in $TMPDIR: the refusal says so, and what to change.
            let streamed = try await FirstHourTests.shell(
                "TMPDIR='\(mountPoint)' exec '\(NodeProcess.executable)' get --data-dir '\(node.dataDirectory)' \(first.id) -o -"
            )
            #expect(
                streamed.status != 0 && streamed.stderr.contains("the copy -o - stages in \(mountPoint)")
                    && streamed.stderr.contains("set TMPDIR"), "\(streamed.stderr)")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: mountPoint).filter {
                $0.hasPrefix("out.bin")
            }
            #expect(leftovers.isEmpty, "a partial output was left: \(leftovers)")
            // The same file again, with 60 KB of metadata: its chunks are there, its journal record does not fit.
            let metadata = #"{"note":""# + String(repeating: "x", count: 60_000) + #""}"#
            let again = try await NodeProcess.runCommand([
                "attach", "--data-dir", node.dataDirectory, "\(files)/small.bin",
                "--metadata", metadata,
            ])
            #expect(again.status != 0)
            #expect(again.stderr.contains("no space left") && again.stderr.contains("journal.log"), "\(again.stderr)")
            try FileManager.default.removeItem(atPath: filler)

            let second = try await Self.attach("\(files)/medium.bin", on: node)
            #expect(
                second.status == 0,
                "fits once the refused attach gave its space back: \(second.stderr)\n\(Self.usage(mountPoint))")
            let copy = files + "/out.bin"
            let fetched = try await NodeProcess.runCommand([
                "get", "--data-dir", node.dataDirectory, first.id, "--output", copy,
            ])
            #expect(fetched.status == 0, "\(fetched.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: copy)) == small)

            // A record cut short by the full disk would hide the later one from the restarted node.
            try await Self.restart(&node)
            #expect(try await Self.listed(node) == [first.id, second.id])
        }
    }

    @Test(
        "a fetch into a data dir without room for it: get refuses before fetching, in one line saying so, and the node goes on",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs; skipped"))
    func fetchIntoFullDisk() async throws {
        let files = NodeProcess.makeTemporaryDirectory("storage-files")
        defer { try? FileManager.default.removeItem(atPath: files) }
        try Self.writeFile("\(files)/big.bin", size: 3 << 20, seed: 7)
        try await withProcessMesh(names: ["holder"], lazy: ["joiner"]) { mesh in
            let holder = try mesh["holder"]
            try await Self.withSmallDisk("1m") { mountPoint in
                let joiner = try mesh.join("joiner", dataDirectory: mountPoint + "/node")
                defer { Self.kill(joiner) }
                try await mesh.waitUntilAllSee()
                let attached = try await Self.attach("\(files)/big.bin", on: holder)
                #expect(attached.status == 0, "\(attached.stderr)")
                try await waitUntil("the joiner lists it") { try await Self.listed(joiner) == [attached.id] }

                let started = ContinuousClock.now
                let get = try await NodeProcess.runCommand([
                    "get", "--data-dir", joiner.dataDirectory, attached.id,
                    "--output", files + "/out.bin",
                ])
                #expect(get.status != 0)
                // Progress lines (`get: 3/12 chunks …`) may come first; the error is the one last line.
                let lines = get.stderr.split(separator: "\n")
                #expect(
                    lines.last?.contains("not enough space for the chunks the data dir") == true
                        && lines.last?.contains("nothing was fetched") == true, "\(get.stderr)")
                #expect(
                    lines.dropLast().allSatisfy { $0.hasPrefix("get: ") && $0.contains(" chunks") },
                    "\(get.stderr)")
                #expect(ContinuousClock.now - started < .seconds(8), "waited out the unavailable timeout instead")
                let status = try await joiner.status()
                #expect((status.counters["chunksFetched"]?.number ?? 0) == 0, "fetched before refusing")
                #expect(!FileManager.default.fileExists(atPath: files + "/out.bin"))
                #expect(try await Self.listed(joiner) == [attached.id], "the node goes on")
            }
        }
    }

    static func run(_ executable: String, _ arguments: [String]) -> Int32 {
        guard let process = try? ChildProcess(executable: executable, arguments: arguments) else { return -1 }
        return process.waitUntilExit()
    }

    /// Writes zeros to `file` until the disk is full or `limit` bytes are written, through a
    /// descriptor no child process inherits: a node another test starts meanwhile would otherwise
    /// hold the file open, and its space taken, after it is removed (seen: a 4 MiB disk still
    /// full once the filler was gone).
    static func fill(_ file: String, upTo limit: Int) {
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let block = [UInt8](repeating: 0, count: 64 * 1024)
        var written = 0
        while written < limit {
            let n = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            written += n
        }
    }

    /// Each file under `path` with its size and the disk it takes, and what is free: said when a test finds the disk fuller than it should be.
    static func usage(_ path: String) -> String {
        let files = (try? FileManager.default.subpathsOfDirectory(atPath: path)) ?? []
        let lines = files.sorted().compactMap { name -> String? in
            var info = stat()
            guard lstat(path + "/" + name, &info) == 0 else { return nil }
            return "\(name): \(info.st_size) bytes, \(Int(info.st_blocks) * 512) on disk"
        }
        return (lines + ["free: \(freeBytes(path))"]).joined(separator: "\n")
    }

    static func freeBytes(_ path: String) -> Int {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return 0 }
        return Int(stats.f_bavail) * Int(stats.f_frsize)
    }
}

/// A byte of a stored chunk flipped on disk: found when it is read, discarded, and fetched again
/// from a member that has it, so nothing is lost when that member leaves.
@Suite("damaged chunks with real processes", .serialized)
struct DamagedChunkTests {
    struct Held: Decodable { var id: String; var chunks: Int; var chunksHave: Int; var heldBy: [String] }

    static func held(_ node: NodeProcess) async throws -> [Held] {
        let result = try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode([Held].self, from: Data(result.stdout.utf8))
    }

    /// Flips one byte in the middle of every pack file under `directory` (past the header, inside
    /// a chunk's bytes: one record header is a few dozen bytes of a pack of megabytes).
    static func flipPackBytes(under directory: String) throws -> Int {
        var flipped = 0
        for path in (FileManager.default.subpaths(atPath: directory) ?? []) where path.hasSuffix(".pack") {
            let file = directory + "/" + path
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: file))
            defer { try? handle.close() }
            let size = try handle.seekToEnd()
            guard size > 64 * 1024 else { continue }
            let offset = size / 2 + 1_000
            try handle.seek(toOffset: offset)
            guard let byte = try handle.read(upToCount: 1)?.first else { continue }
            try handle.seek(toOffset: offset)
            try handle.write(contentsOf: Data([byte ^ 0x5A]))
            flipped += 1
        }
        return flipped
    }

    @Test(
        "one flipped byte in a pack: get fetches the damaged chunk again from the member that has it, and the attachment outlives that member"
    )
    func aDamagedChunkIsFetchedAgain() async throws {
        let files = NodeProcess.makeTemporaryDirectory("damaged-files")
        defer { try? FileManager.default.removeItem(atPath: files) }
        let original = try StorageFailureTests.writeFile("\(files)/photo.bin", size: 2 << 20, seed: 11)
        try await withProcessMesh(names: ["alice", "bob"]) { mesh in
            let alice = try mesh["alice"]
            var bob = try mesh["bob"]
            let attached = try await StorageFailureTests.attach("\(files)/photo.bin", on: alice)
            #expect(attached.status == 0, "\(attached.stderr)")
            try await waitUntil("bob holds it whole", timeout: .seconds(30)) {
                try await Self.held(bob).first.map { $0.chunksHave == $0.chunks } ?? false
            }
            // Damaged while bob is down (a restart also forgets which chunks it hashed lately).
            bob.signal(SIGTERM)
            try await bob.waitForExit()
            #expect(try Self.flipPackBytes(under: bob.dataDirectory) >= 1, "no pack file to damage")
            bob = try mesh.restart("bob", arguments: ["--name", "bob"])
            try await mesh.waitUntilAllSee()

            let get = try await NodeProcess.runCommand([
                "get", "--data-dir", bob.dataDirectory, attached.id,
                "--output", files + "/first.bin",
            ])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(
                FileManager.default.contents(atPath: files + "/first.bin") == original,
                "the file got is not the one attached")
            try await waitUntil("bob holds it whole again", timeout: .seconds(30)) {
                try await Self.held(bob).first.map { $0.chunksHave == $0.chunks } ?? false
            }
            // Alice leaves: bob, the only holder now, still has every chunk, verified.
            alice.signal(SIGTERM)
            try await alice.waitForExit()
            let again = try await NodeProcess.runCommand([
                "get", "--data-dir", bob.dataDirectory, attached.id,
                "--output", files + "/second.bin",
            ])
            #expect(again.status == 0, "\(again.stderr)")
            #expect(FileManager.default.contents(atPath: files + "/second.bin") == original)
        }
    }
}
