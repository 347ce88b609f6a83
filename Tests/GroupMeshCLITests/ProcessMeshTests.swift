import Foundation
import MeshTestKit
import Testing

/// `withProcessMesh`, the fixture of the end-to-end tests: what it starts is gone afterwards,
/// also when the body throws.
@Suite("the process mesh fixture", .serialized)
struct ProcessMeshTests {
    struct Thrown: Error {}

    @Test("a body that throws: every node, restart and client is killed and the data dirs are removed")
    func tearsDownWhenTheBodyThrows() async throws {
        var processes: [NodeProcess] = []
        var directories: [String] = []
        do {
            try await withProcessMesh(names: ["alice", "bob"]) { mesh in
                let (alice, bob) = (try mesh["alice"], try mesh["bob"])
                #expect(try await alice.status().members.contains { $0.name == "bob" && $0.state == "alive" })
                bob.signal(SIGKILL)
                try await bob.waitForExit()
                let restarted = try mesh.restart("bob")
                let listener = try mesh.client(["listen"], of: "alice")
                _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
                #expect(try mesh["bob"] === restarted && mesh.nodes.count == 2)
                processes = [alice, bob, restarted, listener]
                directories = [alice.dataDirectory, bob.dataDirectory]
                throw Thrown()
            }
            Issue.record("the body's error was not passed on")
        } catch is Thrown {}
        #expect(processes.count == 4 && processes.allSatisfy { !$0.process.isRunning })
        #expect(directories.count == 2 && directories.allSatisfy { !FileManager.default.fileExists(atPath: $0) })
    }
}
