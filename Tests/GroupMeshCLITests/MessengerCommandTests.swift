import Foundation
import MeshTestKit
import Testing

/// `groupmesh send` and `listen` between real processes on loopback.
@Suite("send and listen with real processes", .serialized)
struct MessengerCommandTests {
    struct Heard: Decodable {
        var from: String; var fromName: String; var mode: String; var text: String?; var type: String
    }

    static func heard(_ listener: NodeProcess) -> [Heard] {
        listener.stdout.split(separator: "\n").compactMap { try? JSONDecoder().decode(Heard.self, from: Data($0.utf8)) }
    }

    @Test("a send reaches listen --json on three others exactly once; --to reaches only that member")
    func sendAndListen() async throws {
        try await withProcessMesh(names: ["sender", "r1", "r2", "r3"]) { mesh in
            let sender = try mesh["sender"]
            var listeners: [NodeProcess] = []
            for name in ["r1", "r2", "r3"] {
                let listener = try mesh.client(["listen", "--json"], of: name)
                listeners.append(listener)
                _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
            }

            let all = try await NodeProcess.runCommand(["send", "--data-dir", sender.dataDirectory, "hello, mesh"])
            #expect(all.status == 0, "\(all.stderr)")
            #expect(all.stderr.contains("sent to 3 members"))
            let one = try await NodeProcess.runCommand([
                "send", "--data-dir", sender.dataDirectory, "--to", "r2",
                "only r2",
            ])
            #expect(one.status == 0, "\(one.stderr)")

            try await waitUntil("everyone heard hello") {
                listeners.allSatisfy { Self.heard($0).contains { $0.text == "hello, mesh" } }
            }
            try await waitUntil("r2 heard its message") { Self.heard(listeners[1]).contains { $0.text == "only r2" } }
            for (index, listener) in listeners.enumerated() {
                let messages = Self.heard(listener)
                #expect(messages.filter { $0.text == "hello, mesh" }.count == 1, "listener \(index): \(messages)")
                #expect(messages.allSatisfy { $0.fromName == "sender" && $0.mode == "reliable" && $0.type == "data" })
                #expect(
                    messages.filter { $0.text == "only r2" }.count == (index == 1 ? 1 : 0),
                    "listener \(index): \(messages)")
            }
        }
    }

    @Test("send fails in one line: unknown member, file over the limit, no node")
    func sendErrors() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let unknown = try await NodeProcess.runCommand([
            "send", "--data-dir", node.dataDirectory, "--to", "nobody", "hi",
        ])
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("unknown member 'nobody'"))
        let big = node.dataDirectory + "/big.bin"
        try Data(count: 256 * 1024 + 1).write(to: URL(fileURLWithPath: big))
        let tooLarge = try await NodeProcess.runCommand(["send", "--data-dir", node.dataDirectory, "--file", big])
        #expect(tooLarge.status != 0)
        #expect(tooLarge.stderr.contains("over the 256 KiB message limit"))
        for result in [unknown, tooLarge] { #expect(result.stderr.split(separator: "\n").count == 1) }
        node.signal(SIGKILL)
        try await node.waitForExit()
        let none = try await NodeProcess.runCommand(["send", "--data-dir", node.dataDirectory, "hi"])
        #expect(none.stderr.contains("no groupmesh node is running"))
    }
}
