import Foundation
import MeshCore
import MeshCrypto
import MeshStore
import MeshTestKit
import Testing

/// SIGKILL at random moments while attachments are added, replicated and removed, many times
/// over. After every restart the node starts (its store and journal load), and nothing that was
/// acknowledged is lost: an acknowledged attach is listed whole and loads byte-identical, an
/// acknowledged remove stays removed. Random moments come from a printed seed.
@Suite("crash campaign with real processes", .serialized)
struct CrashCampaignTests {
    @Test("killed during attach, replication and remove, eight times: every acknowledged change survives")
    func killAtRandomMoments() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["GROUPMESH_TEST_SEED"] ?? "") ?? 0xc4a5
        var random = SplitMix64(seed: seed)
        let work = NodeProcess.makeTemporaryDirectory("crash-files")
        defer { try? FileManager.default.removeItem(atPath: work) }
        try await withProcessMesh(names: ["uploader", "replica"]) { mesh in
            var uploader = try mesh["uploader"], replica = try mesh["replica"]
            // Restarts reuse the address: both may die in one round, and each finds the other only
            // where it last was (members.json).
            let uploaderAddress = try await uploader.waitForLine(prefix: "listening:")
            let replicaAddress = try await replica.waitForLine(prefix: "listening:")

            var present: [String: Data] = [:]  // acknowledged adds not (acknowledged) removed
            var removed: Set<String> = []
            for round in 0..<8 {
                let context = "seed \(seed), round \(round)"
                // One change on the uploader: mostly adds, sometimes a remove.
                let change: Task<(status: Int32, stdout: String, stderr: String), any Error>
                var file: String?
                var removing: String?
                let directory = uploader.dataDirectory
                if round % 3 == 2, let victim = present.keys.sorted().first {
                    removing = victim
                    change = Task { try await NodeProcess.runCommand(["remove", "--data-dir", directory, victim]) }
                } else {
                    let path = work + "/file\(round).bin"
                    try writeRandomFile(path, size: (1 + Int(random.next() % 6)) << 19, using: &random)
                    file = path
                    change = Task { try await NodeProcess.runCommand(["attach", "--data-dir", directory, path]) }
                }
                // Kill the uploader or the replica (or both) a random moment later.
                try await Task.sleep(for: .milliseconds(Int(random.next() % 60)))
                let killUploader = random.next() % 3 != 0, killReplica = random.next() % 2 == 0
                if killUploader { uploader.signal(SIGKILL) }
                if killReplica { replica.signal(SIGKILL) }
                let result = try await change.value
                if result.status == 0 {
                    if let removing {
                        present[removing] = nil
                        removed.insert(removing)
                    } else if let file {
                        let added = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                        present[added] = try Data(contentsOf: URL(fileURLWithPath: file))
                    }
                }
                // Restart whatever died, from its data dir alone.
                if killUploader {
                    _ = try await uploader.waitForExit()
                    uploader = try mesh.restart("uploader", listen: uploaderAddress)
                    _ = try await uploader.waitForLine(prefix: "listening:")
                }
                if killReplica {
                    _ = try await replica.waitForExit()
                    replica = try mesh.restart("replica", listen: replicaAddress)
                    _ = try await replica.waitForLine(prefix: "listening:")
                }
                let listed = try await JournalCommandTests.listed(uploader)
                for id in present.keys {
                    let entry = listed.first { $0.id == id }
                    #expect(
                        entry.map { $0.chunksHave == $0.chunks } == true,
                        "\(context): acknowledged \(id.prefix(12)) lost")
                }
                for id in removed {
                    #expect(!listed.contains { $0.id == id }, "\(context): removed \(id.prefix(12)) is back")
                }
            }

            // Every acknowledged attachment loads byte-identical from the uploader, and the replica
            // converges to the same set, whole.
            for (id, bytes) in present {
                let output = work + "/out-\(id.prefix(8)).bin"
                let get = try await NodeProcess.runCommand([
                    "get", "--data-dir", uploader.dataDirectory, id,
                    "--output", output,
                ])
                #expect(get.status == 0, "seed \(seed): \(get.stderr)")
                #expect(
                    (try? Data(contentsOf: URL(fileURLWithPath: output))) == bytes,
                    "seed \(seed): \(id.prefix(12)) differs")
            }
            try await mesh.waitUntilAllSee()
            try await waitUntil("the replica holds the same, whole") {
                let listed = try await JournalCommandTests.listed(replica)
                return Set(listed.map(\.id)).isSuperset(of: present.keys)
                    && !listed.contains { removed.contains($0.id) }
                    && listed.filter { present[$0.id] != nil }.allSatisfy { $0.chunksHave == $0.chunks }
            }
            // What the kills left behind (an ingest whose add never reached the log, a remove whose
            // collect never ran) was collected when each node started again: no stored chunk is
            // outside the attachments listed.
            for node in [uploader, replica] {
                let listed = try await JournalCommandTests.listed(node).map(\.content)
                let stray = try Self.unreferencedChunks(node, attachments: listed)
                #expect(
                    stray.isEmpty,
                    "seed \(seed): \(stray.count) chunks no attachment uses in \(node.dataDirectory)")
            }
        }
    }

    /// Chunks of the node's chunk store that are neither the manifest nor a chunk of `attachments`.
    static func unreferencedChunks(_ node: NodeProcess, attachments: [String]) throws -> [String] {
        let stored = ChunkStore.survey(node.dataDirectory + "/chunks")
        var used = Set(attachments)
        for id in attachments {
            let bytes = try #require(SHA256Digest(hex: id).flatMap { stored[$0]?.bytes() }, "manifest \(id) is stored")
            used.formUnion(try Manifest(decoding: bytes).chunks.map(\.hex))
        }
        return stored.keys.map(\.hex).filter { !used.contains($0) }.sorted()
    }

    /// The disk blocks the files of a chunk store take.
    static func diskUsage(_ store: String) -> Int64 {
        let files = (try? FileManager.default.subpathsOfDirectory(atPath: store)) ?? []
        return files.reduce(0) { total, name in
            var info = stat()
            return total
                + (stat(store + "/" + name, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
                    ? Int64(info.st_blocks) * 512 : 0)
        }
    }

    @Test("killed while it attaches a large file: started again, it holds nothing that attach stored")
    func killDuringAttachLeavesNothing() async throws {
        var random = SplitMix64(seed: 0xa77ac4)
        let work = NodeProcess.makeTemporaryDirectory("crash-attach")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let file = work + "/large.bin"
        try writeRandomFile(file, size: 48 << 20, using: &random)
        var node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        var all = [node]
        defer { for node in all { Task { await node.cleanUp() } } }
        _ = try await node.waitForLine(prefix: "listening:")
        let directory = node.dataDirectory
        let attach = Task { try await NodeProcess.runCommand(["attach", "--data-dir", directory, file]) }
        // Killed once the ingest has written some chunks.
        let store = directory + "/chunks"
        try await waitUntil("the ingest wrote chunks", timeout: .seconds(60), every: .milliseconds(2)) {
            ChunkStore.survey(store).count > 3
        }
        node.signal(SIGKILL)
        let acknowledged = try await attach.value.status == 0
        _ = try await node.waitForExit()
        node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: directory, ownsDataDirectory: false)
        all.append(node)
        _ = try await node.waitForLine(prefix: "listening:")
        let listed = try await JournalCommandTests.listed(node).map(\.content)
        #expect(listed.count == (acknowledged ? 1 : 0))
        // Collected by the store's first request after the start (which runs beside the control socket).
        try? await waitUntil("the store collected", timeout: .seconds(30)) {
            try Self.unreferencedChunks(node, attachments: listed).isEmpty
        }
        let stray = try Self.unreferencedChunks(node, attachments: listed)
        #expect(
            stray.isEmpty,
            "\(stray.count) chunks left by the attach that never happened (acknowledged: \(acknowledged))")
        // And their disk space is free again (up to the edges of the freed ranges).
        let used = Self.diskUsage(store), kept: Int64 = acknowledged ? 48 << 20 : 0
        #expect(used <= kept + (4 << 20), "the store takes \(used) bytes of disk for \(kept) bytes of chunks")
    }

    @Test("a journal record torn by a crash does not hide the operations appended after it")
    func tornJournalRecord() async throws {
        var random = SplitMix64(seed: 7)
        let first = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await first.cleanUp() } }
        _ = try await first.waitForLine(prefix: "listening:")
        let directory = first.dataDirectory
        func attach(_ name: String) async throws -> String {
            let path = directory + "/" + name
            try writeRandomFile(path, size: 64 << 10, using: &random)
            let result = try await NodeProcess.runCommand(["attach", "--data-dir", directory, path])
            try #require(result.status == 0, "\(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func restart() async throws -> NodeProcess {
            let node = try NodeProcess(
                ["run", "--listen", "127.0.0.1:0"], dataDirectory: directory, ownsDataDirectory: false)
            _ = try await node.waitForLine(prefix: "listening:")
            return node
        }
        let before = try await attach("a.bin")
        first.signal(SIGKILL)
        _ = try await first.waitForExit()
        // What a crash in the middle of an append leaves: a length that promises more than follows.
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/journal.log"))
        try log.seekToEnd()
        try log.write(contentsOf: Data([0, 0, 1, 0x2c, 1, 0, 0, 0]))
        try log.close()

        let second = try await restart()
        let after = try await attach("b.bin")
        second.signal(SIGKILL)
        _ = try await second.waitForExit()
        let third = try await restart()
        defer { Task { await third.cleanUp(removeData: false) } }
        let listed = Set(try await JournalCommandTests.listed(third).map(\.id))
        #expect(listed == [before, after])
    }
}
