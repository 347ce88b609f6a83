import Foundation
import MeshTestKit
import Testing

/// A graceful leave strands nothing, with real processes: an uploader adds a file and leaves at
/// once while the only other member is `--lazy` (it fetches nothing by itself), twenty times
/// over; a member that joins after every uploader left loads each file byte for byte. Then
/// the last two leave in turn, and the very last one says what becomes unavailable.
@Suite("leave handover with real processes", .serialized)
struct LeaveHandoverTests {
    struct Listed: Decodable {
        var id: String
        var chunks: Int
        var chunksHave: Int
        var state: String
        var heldBy: [String]
    }

    static func listed(_ node: NodeProcess) async throws -> [Listed] {
        let result = try await NodeProcess.runCommand(["attachments", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode([Listed].self, from: Data(result.stdout.utf8))
    }

    static func bytes(seed: UInt64, count: Int) -> Data {
        var state = seed
        return Data(
            (0..<count).map { _ in
                state = state &* 6364136223846793005 &+ 1442695040888963407
                return UInt8(truncatingIfNeeded: state >> 33)
            })
    }

    @Test("add then leave at once, 20 times: a late joiner loads every file after its uploader is gone")
    func addThenLeave() async throws {
        try await withProcessMesh(names: ["keeper"], lazy: ["keeper", "joiner"]) { mesh in
            let keeper = try mesh["keeper"]
            let scratch = NodeProcess.makeTemporaryDirectory("files")
            var files: [String: Data] = [:]

            for run in 0..<20 {
                let uploader = try mesh.join("uploader-\(run)")
                try await mesh.waitUntilAllSee(["keeper", "uploader-\(run)"])
                let data = Self.bytes(seed: UInt64(run) + 1, count: 200_000 + run * 7_919)
                let path = scratch + "/file-\(run).bin"
                try data.write(to: URL(fileURLWithPath: path))
                let attach = try await NodeProcess.runCommand(["attach", "--data-dir", uploader.dataDirectory, path])
                #expect(attach.status == 0, "run \(run): \(attach.stderr)")
                let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                files[id] = data
                let leave = try await NodeProcess.runCommand(["leave", "--data-dir", uploader.dataDirectory])
                #expect(leave.status == 0, "run \(run): \(leave.stderr)")
                #expect(
                    leave.stdout.contains("left after other members took 1 attachment"),
                    "run \(run): \(leave.stdout) \(leave.stderr)")
                #expect(try await uploader.waitForExit() == 0, "run \(run)")
            }

            // The keeper alone holds each, whole, and says so.
            let held = try await Self.listed(keeper)
            let keeperID = try await keeper.status().`self`.id
            #expect(Set(held.map(\.id)) == Set(files.keys))
            for entry in held {
                #expect(
                    entry.state == "available" && entry.heldBy == [keeperID] && entry.chunksHave == entry.chunks,
                    "\(entry.id.prefix(12)): \(entry.state), held by \(entry.heldBy)")
            }

            let joiner = try mesh.join("joiner")
            try await mesh.waitUntilAllSee(["keeper", "joiner"])
            try await waitUntil("the joiner lists every attachment") {
                try await Self.listed(joiner).count == files.count
            }
            for (id, data) in files.sorted(by: { $0.key < $1.key }) {
                let output = scratch + "/\(id.prefix(12)).out"
                let get = try await NodeProcess.runCommand([
                    "get", "--data-dir", joiner.dataDirectory, id,
                    "--output", output,
                ])
                #expect(get.status == 0, "\(id.prefix(12)): \(get.stderr)")
                #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == data, "\(id.prefix(12)) differs")
            }

            // The joiner holds everything too: its leave strands nothing and waits for nobody.
            let joinerLeaves = try await NodeProcess.runCommand(["leave", "--data-dir", joiner.dataDirectory])
            #expect(
                joinerLeaves.status == 0
                    && joinerLeaves.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "left",
                "\(joinerLeaves.stdout) \(joinerLeaves.stderr)")
            #expect(!joinerLeaves.stderr.contains("leaving: waiting"), "\(joinerLeaves.stderr)")
            try await keeper.waitForStatus(timeout: .seconds(30), "the joiner left") { $0.aliveCount == 1 }
            // The last member says what nobody will hold once it is gone.
            let last = try await NodeProcess.runCommand(["leave", "--data-dir", keeper.dataDirectory])
            #expect(last.status == 0, "\(last.stderr)")
            #expect(
                last.stdout.contains(
                    "no other member is alive, so 20 attachment(s) only this node held are unavailable"),
                "\(last.stdout)")
        }
    }

    @Test("leave --now names what becomes unavailable and does not wait")
    func leaveNow() async throws {
        try await withProcessMesh(names: ["keeper", "uploader"], lazy: ["keeper"]) { mesh in
            let uploader = try mesh["uploader"]
            let path = uploader.dataDirectory + "/../leave-now-\(UUID().uuidString.prefix(6)).bin"
            try Self.bytes(seed: 7, count: 100_000).write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let attach = try await NodeProcess.runCommand(["attach", "--data-dir", uploader.dataDirectory, path])
            let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let leave = try await NodeProcess.runCommand(["leave", "--now", "--data-dir", uploader.dataDirectory])
            #expect(leave.status == 0, "\(leave.stderr)")
            #expect(
                leave.stdout.contains(
                    "1 attachment(s) only this node held are unavailable until it returns: \(id.prefix(16))"),
                "\(leave.stdout)")
            try await waitUntil("the keeper sees it unavailable") {
                try await Self.listed(mesh["keeper"]).first?.state == "unavailable"
            }
        }
    }
}
