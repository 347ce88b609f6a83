import Foundation
import MeshTestKit
import Testing

/// `groupmesh end` between real processes: every member exits with a line saying who ended the
/// session, and no data dir of the session starts again (its invites no longer work).
@Suite("end with real processes", .serialized)
struct SessionEndCommandTests {
    @Test("end on one member: all three exit 0 saying so; every data dir then refuses to start")
    func endForEveryone() async throws {
        var nodes: [NodeProcess] = []
        defer { for node in nodes { Task { await node.cleanUp() } } }
        let alice = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "alice"])
        nodes.append(alice)
        let invite = try await alice.waitForLine(prefix: "invite:")
        for name in ["bob", "carol"] {
            nodes.append(try NodeProcess(["run", "--listen", "127.0.0.1:0", "--invite", invite, "--name", name]))
        }
        try await nodes.waitForMesh(alive: 3)
        let aliceID = try await alice.status().`self`.id

        let end = try await NodeProcess.runCommand(["end", "--data-dir", alice.dataDirectory])
        #expect(end.status == 0, "\(end.stderr)")
        #expect(end.stdout.contains("ended the session for every member"), "\(end.stdout)")
        for node in nodes {
            #expect(try await node.waitForExit() == 0, "\(node.stderr)")
        }
        for node in nodes.dropFirst() {
            #expect(node.stdout.contains("ended: the session was ended by alice (\(aliceID.prefix(12)))"), "\(node.stdout)")
        }
        for node in nodes {
            let again = try await NodeProcess.runCommand(["run", "--listen", "127.0.0.1:0", "--invite", invite,
                                                          "--data-dir", node.dataDirectory], timeout: .seconds(20))
            #expect(again.status == 69, "\(again.stdout)")
            #expect(again.stderr.contains("was ended by \(aliceID.prefix(12)); its invites no longer work"), "\(again.stderr)")
        }
    }
}
