import Foundation
import MeshCrypto
import MeshTestKit
import Testing

/// Two live nodes with one identity: before, both stayed "alive", outbid each
/// other's incarnation four times a second, and every member's view flipped between them.
@Suite("a copied data dir makes no second node with the same identity", .serialized)
struct IdentityConflictTests {
    @Test("the copy started later stops with one line; the first logs it and keeps its name and address")
    func copiedDataDirectory() async throws {
        try await withProcessMesh(names: ["first", "second"], timeout: .seconds(30)) { mesh in
            let (first, second) = (try mesh["first"], try mesh["second"])
            let secondID = try await second.status().`self`.id
            let secondAddress = try PeerAddress(parsing: try await second.waitForLine(prefix: "listening:"))

            // The twin must start in a later second than second did (boot ids begin with the start
            // time, and second printed `listening:` before now), so it is the one that stops.
            let startedBy = time(nil)
            try await waitUntil("the next second", timeout: .seconds(5)) { time(nil) > startedBy }
            // A copy of the live second's data dir, as `cp -r` makes it (the socket left out).
            let copy = NodeProcess.makeTemporaryDirectory("twin")
            let entries = try FileManager.default.contentsOfDirectory(atPath: second.dataDirectory)
            for entry in entries where entry != "control.sock" {
                try FileManager.default.copyItem(atPath: second.dataDirectory + "/" + entry, toPath: copy + "/" + entry)
            }
            let twin = mesh.track(
                try NodeProcess(
                    ["run", "--listen", "127.0.0.1:0", "--name", "twin"],
                    dataDirectory: copy))
            let status = try await twin.waitForExit(timeout: .seconds(60))
            #expect(status != 0)
            let line = twin.stderr.split(separator: "\n").last.map(String.init) ?? ""
            #expect(
                line.contains("another node with this node's identity runs at 127.0.0.1:\(secondAddress.port)"),
                "\(twin.stderr)")
            #expect(line.contains("a copied data dir?"), "\(line)")
            try await waitUntil("the first twin logged the conflict", timeout: .seconds(10)) {
                second.stderr.contains("another node with this node's identity runs, started later")
            }
            // The mesh settles on the node that was there first.
            try await first.waitForStatus(
                timeout: .seconds(30),
                "second alive at its own address, named second"
            ) { view in
                view.members.contains {
                    $0.id == secondID && $0.state == "alive" && $0.name == "second"
                        && $0.address == secondAddress.description
                }
            }
            #expect(second.process.isRunning)
        }
    }
}
