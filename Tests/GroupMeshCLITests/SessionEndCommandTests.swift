import Foundation
import MeshTestKit
import Testing

/// `groupmesh end` between real processes: every member exits with a line saying who ended the
/// session, and no data dir of the session starts again (its invites no longer work); a member
/// that was down during the end learns it when a data dir that knows is started again.
@Suite("end with real processes", .serialized)
struct SessionEndCommandTests {
    @Test(
        "end on one member: all three exit 0 saying so, and so does a client following the events; every data dir then refuses to start, and tells a member that was down"
    )
    func endForEveryone() async throws {
        try await withProcessMesh(names: ["alice", "bob", "carol", "dave"]) { mesh in
            let alice = try mesh["alice"], dave = try mesh["dave"]
            let nodes = try ["alice", "bob", "carol"].map { try mesh[$0] }
            let aliceID = try await alice.status().`self`.id
            // Dave is down during the end (killed: a stopped process would read the end from its
            // socket's buffer when it wakes).
            let daveAddress = try await dave.status().`self`.address
            dave.signal(SIGKILL)
            _ = try? await dave.waitForExit()

            // A client following bob's events ends with the node, as it should: exit 0.
            let events = try mesh.client(["events"], of: "bob")
            _ = try await events.waitForLine(prefix: "events: following", onStderr: true)

            let end = try await NodeProcess.runCommand(["end", "--data-dir", alice.dataDirectory])
            #expect(end.status == 0, "\(end.stderr)")
            // Dave may still be taken for alive: his death is not seen yet.
            #expect(
                ["2", "3"].contains { end.stdout.contains("ended the session for every member: \($0) live now, told") },
                "\(end.stdout)")
            for node in nodes {
                #expect(try await node.waitForExit() == 0, "\(node.stderr)")
            }
            for node in nodes.dropFirst() {
                #expect(
                    node.stdout.contains("ended: the session was ended by alice (\(aliceID.prefix(12)))"),
                    "\(node.stdout)")
            }
            #expect(try await events.waitForExit() == 0, "\(events.stderr)")
            #expect(events.stdout.contains("session-ended alice"), "\(events.stdout)")
            #expect(events.stderr.contains("stopped: the session ended"), "\(events.stderr)")
            // Back on its old address after everyone left: it runs alone, as before.
            let daveAgain = try mesh.restart("dave", listen: daveAddress)
            _ = try await daveAgain.waitForStatus(timeout: .seconds(30), "dave runs again") { _ in true }
            for (index, node) in nodes.enumerated() {
                let again = try await NodeProcess.runCommand(
                    [
                        "run", "--listen", "127.0.0.1:0", "--invite", mesh.invite,
                        "--data-dir", node.dataDirectory,
                    ], timeout: .seconds(20))
                #expect(again.status == 69, "\(again.stdout)")
                // Alice's own dir is told it ended the session itself, not by an id to look up;
                // the others name her as their members.json remembers her.
                let ender = index == 0 ? "this node" : "alice (\(aliceID.prefix(12)))"
                #expect(
                    again.stderr.contains("was ended by \(ender); its invites no longer work"), "\(again.stderr)")
            }
            // A command on an ended data dir says so, rather than to start a node there.
            let status = try await NodeProcess.runCommand(["status", "--data-dir", nodes[1].dataDirectory])
            #expect(
                status.status == 69 && status.stderr.contains("the session was ended by alice (\(aliceID.prefix(12)))")
                    && !status.stderr.contains("start one with"), "\(status.stderr)")
            // Each refusing start told the members it remembers, dave among them: it leaves, saying so.
            #expect(try await daveAgain.waitForExit(timeout: .seconds(10)) == 0, "\(daveAgain.stderr)")
            #expect(
                daveAgain.stdout.contains("ended: the session was ended by alice (\(aliceID.prefix(12)))"),
                "\(daveAgain.stdout)")
        }
    }

    @Test("end on a node with no other member live says so, rather than that every member was told")
    func endAlone() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let end = try await NodeProcess.runCommand(["end", "--data-dir", node.dataDirectory])
        #expect(end.status == 0, "\(end.stderr)")
        #expect(end.stdout.contains("ended the session; no other member is live now"), "\(end.stdout)")
        #expect(try await node.waitForExit() == 0, "\(node.stderr)")
    }
}
