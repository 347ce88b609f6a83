import Foundation
import GroupMesh
import MeshTestKit
import Testing

/// An app that takes its sessions from `SessionOffers.sessions()` (as one written against
/// GroupActivities' `sessions()` does), meeting real `groupmesh` processes on loopback.
@Suite("sessions() with real processes", .serialized)
struct SessionOffersProcessTests {
    struct Heard: Decodable { var fromName: String; var text: String? }

    @Test("an invite file handed to the app opens a waiting session; joined, it talks both ways with a groupmesh node")
    func appJoinsThroughSessions() async throws {
        let host = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "host"])
        defer { Task { await host.cleanUp() } }
        let invite = try await host.waitForLine(prefix: "invite:")
        let listener = try NodeProcess(
            ["listen", "--json"], dataDirectory: host.dataDirectory, ownsDataDirectory: false)
        defer { Task { await listener.cleanUp(removeData: false) } }
        _ = try await listener.waitForLine(prefix: "ready", onStderr: true)

        var template = NodeConfiguration(dataDirectory: DataDirectory(path: "unused"))
        template.listenHost = "127.0.0.1"
        template.listenPort = 0
        template.name = "app"
        let root = NodeProcess.makeTemporaryDirectory("offers-app")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let offers = try SessionOffers(root: root, configuration: template)

        // The app, as it would be written against GroupActivities.
        let app = Task { () throws -> String in
            for await session in await offers.sessions() {
                let messenger = Messenger(session: session)
                let inbound = await messenger.messages(of: Data.self)
                try await session.join()
                let fromHost = try await waitForActive(session, count: 2)
                messenger.send(Data("hello from the app".utf8), to: .only(fromHost)) { error in
                    if let error { print("app send failed: \(error)") }
                }
                for await (data, context) in inbound where context.source == fromHost {
                    await session.leave(waitingForReplication: false)
                    return String(decoding: data, as: UTF8.self)
                }
            }
            return ""
        }
        defer { app.cancel() }

        // The invite is handed over as a file: written beside the inbox, renamed in.
        let staging = root + "/invite.txt"
        try Data((invite + "\n").utf8).write(to: URL(fileURLWithPath: staging))
        try FileManager.default.moveItem(atPath: staging, toPath: offers.inbox + "/invite.txt")

        try await [host].waitForMesh(alive: 2)
        try await waitUntil("the host's listen heard the app") {
            listener.stdout.split(separator: "\n").contains { line in
                let heard = try? JSONDecoder().decode(Heard.self, from: Data(line.utf8))
                return heard?.fromName == "app" && heard?.text == "hello from the app"
            }
        }
        let reply = try await NodeProcess.runCommand([
            "send", "--data-dir", host.dataDirectory, "--to", "app", "hello, app",
        ])
        #expect(reply.status == 0, "\(reply.stderr)")
        let heardByApp = try await withThrowingTaskGroup(of: String?.self) { group in
            group.addTask { try await app.value }
            group.addTask {
                try await Task.sleep(for: .seconds(30)); return nil
            }
            let first = try await group.next() ?? nil
            group.cancelAll()
            return first
        }
        #expect(heardByApp == "hello, app")
        #expect(try FileManager.default.contentsOfDirectory(atPath: offers.inbox).isEmpty, "the invite file was taken")
    }

    /// The one other active participant, once the session sees `count` of them.
    func waitForActive(_ session: MeshSession, count: Int) async throws -> Participant {
        let me = await session.localParticipant
        for await participants in await session.activeParticipantUpdates() where participants.count >= count {
            if let other = participants.first(where: { $0 != me }) { return other }
        }
        throw GroupMeshError.notRunning
    }
}
