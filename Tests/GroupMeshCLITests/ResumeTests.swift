import Foundation
import MeshCore
import MeshCrypto
import MeshStore
import MeshTestKit
import Testing

/// A node killed in the middle of a fetch keeps every verified chunk and, restarted, fetches
/// only the rest.
@Suite("resume after a crash with real processes", .serialized)
struct ResumeTests {
    /// Runs `body` with a mesh of one node, `holder`, holding `size` seeded random bytes as an
    /// attachment: the mesh, the attachment's id, the bytes.
    static func withHolder(
        size: Int, seed: UInt64, _ body: (ProcessMesh, String, Data) async throws -> Void
    )
        async throws
    {
        try await withProcessMesh(names: ["holder"]) { mesh in
            let holder = try mesh["holder"]
            let file = holder.dataDirectory + "/big.bin"
            var random = SeededGenerator(seed: seed)
            let bytes = try writeRandomFile(file, size: size, using: &random)
            let id = try await NodeProcess.runCommand(["attach", "--data-dir", holder.dataDirectory, file])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(id.count == 32)
            try await body(mesh, id, bytes)
        }
    }

    @Test("a joiner killed half way and restarted does not fetch again the chunks it had")
    func resumeAfterSIGKILL() async throws {
        try await Self.withHolder(size: 40 << 20, seed: 99) { mesh, id, bytes in
            // The joiner replicates by itself; it is killed once it holds part of the attachment.
            let joiner = try mesh.join("joiner")
            // Watched through its chunk store (cheap enough to look at every few milliseconds), it is
            // killed once a few chunks are on its disk. From a thread of its own: the whole fetch
            // takes a few tenths of a second, and a wait on the task pool, which every test shares,
            // came that late on a busy machine (the joiner had it all).
            let chunksDirectory = joiner.dataDirectory + "/chunks"
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                Thread.detachNewThread {
                    let deadline = ContinuousClock.now + .seconds(60)
                    while ChunkStore.survey(chunksDirectory).count < 6 && ContinuousClock.now < deadline {
                        usleep(1000)
                    }
                    joiner.signal(SIGKILL)
                    done.resume()
                }
            }
            try await joiner.waitForExit()
            // What survived the crash, counted before the restart (which replicates again at once, so
            // its own count may already include chunks fetched since).
            let chunkSize = Manifest.defaultChunkSize
            let chunks = Set(
                stride(from: 0, to: bytes.count, by: chunkSize).map {
                    SHA256Digest.hashing(Array(bytes[$0..<min(bytes.count, $0 + chunkSize)]))
                })
            let had = ChunkStore.survey(chunksDirectory).keys.filter(chunks.contains).count, total = chunks.count
            try #require(had > 0 && had < total, "the joiner was not caught half way (had \(had) of \(total))")
            let restarted = try mesh.restart("joiner")
            _ = try await restarted.waitForLine(prefix: "listening:")
            // Every chunk the store lists verifies (checked on restart): none is fetched again.
            let listed = try await JournalCommandTests.listed(restarted).first
            #expect(listed?.chunksHave ?? 0 >= had && listed?.chunks == total)

            let output = restarted.dataDirectory + "/out.bin"
            let get = try await NodeProcess.runCommand(
                [
                    "get", "--data-dir", restarted.dataDirectory, id,
                    "--output", output,
                ], timeout: .seconds(120))
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == bytes)
            let counters = try await restarted.status().counters
            let fetched = Int(counters["chunksFetched"]?.number ?? -1)
            // Only the rest was fetched (the end game may ask a few chunks twice).
            #expect(
                fetched >= total - had && fetched <= total - had + 4,
                """
                had \(had) of \(total) before the crash, fetched \(fetched) after; \
                rejected \(counters["chunksRejected"]?.number ?? -1), \
                dropped \(String(describing: counters["dropped"]))
                """)
        }
    }

    @Test(
        "a get whose node is killed or stopped half way fails in one line saying so; run again, it finishes",
        arguments: [SIGKILL, SIGTERM])
    func getOutlivesItsNode(signal: Int32) async throws {
        try await Self.withHolder(size: 24 << 20, seed: 5) { mesh, id, bytes in
            let joiner = try mesh.join("joiner", arguments: ["--lazy"])
            try await mesh.waitUntilAllSee()
            try await waitUntil("the joiner lists it") {
                try await JournalCommandTests.listed(joiner).map(\.id) == [id]
            }

            let output = joiner.dataDirectory + "/out.bin"
            let get = try mesh.client(["get", id, "--output", output], of: "joiner")
            try await waitUntil("the get under way", every: .milliseconds(2)) {
                ChunkStore.survey(joiner.dataDirectory + "/chunks").count > 1 || !get.process.isRunning
            }
            joiner.signal(signal)
            let status = try await get.waitForExit()
            if status == 0 {
                // The whole fetch beat the kill: nothing more to check on this machine.
                #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == bytes)
                return
            }
            try await waitUntil("get's error read", timeout: .seconds(5)) { get.stderr.contains("groupmesh: error:") }
            #expect(get.stderr.split(separator: "\n").last?.contains("stopped before") == true, "\(get.stderr)")
            #expect(!FileManager.default.fileExists(atPath: output))

            try await joiner.waitForExit()
            let restarted = try mesh.restart("joiner")
            try await mesh.waitUntilAllSee()
            let again = try await NodeProcess.runCommand(
                [
                    "get", "--data-dir", restarted.dataDirectory, id,
                    "--output", output,
                ], timeout: .seconds(120))
            #expect(again.status == 0, "\(again.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == bytes)
        }
    }
}
