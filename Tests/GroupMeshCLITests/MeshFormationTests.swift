import Foundation
import MeshCore
import MeshTestKit
import Testing

/// Five real `groupmesh run` processes on loopback form one mesh from one invite and keep an
/// accurate view through a crash, a graceful stop and a restart.
@Suite("mesh formation with real processes", .serialized)
struct MeshFormationTests {
    @Test("5 nodes join through one invite; SIGKILL is seen dead, SIGTERM left, a restart alive again")
    func fiveNodes() async throws {
        try await withProcessMesh(names: (0..<5).map { "n\($0)" }) { mesh in
            let nodes = mesh.nodes
            var ids: [String] = []
            for node in nodes { ids.append(try await node.status().`self`.id) }

            // Each joiner is introduced by a member, and every node learns the same introducer
            // (the node that made the session is introduced by nobody).
            var introducers: [String: String] = [:]
            var foundings: Set<String> = []
            for node in nodes {
                let status = try await node.waitForStatus(timeout: .seconds(60), "every joiner introduced") { status in
                    ids.dropFirst().allSatisfy { id in status.members.first { $0.id == id }?.introducedBy != nil }
                }
                // Each takes the session's founding id from its door, and learns who founded it.
                let founding = try await node.waitForStatus(timeout: .seconds(60), "the founding known") {
                    $0.`self`.founding != nil && $0.`self`.founder != nil
                }
                #expect(founding.`self`.founder == ids[0], "\(founding.`self`.name) names another founder")
                foundings.insert(founding.`self`.founding ?? "")
                for member in status.members {
                    if member.id == ids[0] { #expect(member.introducedBy == nil, "the founder is introduced") }
                    guard let door = member.introducedBy else { continue }
                    #expect(door != member.id && ids.contains(door), "\(member.name) introduced by \(door)")
                    #expect(introducers[member.id, default: door] == door, "nodes disagree on \(member.name)'s door")
                    introducers[member.id] = door
                }
            }
            #expect(foundings.count == 1, "the nodes hold \(foundings.count) founding ids")

            // SIGKILL: the others see it dead within the lan profile's bound.
            let bound = MembershipSettings.lan.deadDetectionBound(memberCount: 5)
            nodes[4].signal(SIGKILL)
            try await nodes[4].waitForExit()
            for node in nodes[0..<4] {
                try await node.waitForStatus(timeout: bound, "n4 dead") { $0.state(of: ids[4]) == "dead" }
            }

            // SIGTERM: a graceful leave, seen as left.
            nodes[3].signal(SIGTERM)
            #expect(try await nodes[3].waitForExit() == 0)
            for node in nodes[0..<3] {
                try await node.waitForStatus(timeout: .seconds(20), "n3 left") { $0.state(of: ids[3]) == "left" }
            }

            // The killed node restarts from its data dir alone (no invite) and is alive everywhere.
            let restarted = try mesh.restart("n4")
            _ = try await restarted.waitForLine(prefix: "listening:")
            for node in nodes[0..<3] + [restarted] {
                try await node.waitForStatus(timeout: .seconds(60), "n4 alive again") {
                    $0.state(of: ids[4]) == "alive"
                }
            }
            // It kept its introduction: the same door, at once.
            let own = try await restarted.status().members.first { $0.id == ids[4] }
            #expect(own?.introducedBy == introducers[ids[4]], "n4 was introduced by another after its restart")
        }
    }

    @Test("invite, status and leave talk to the running node; without a node they fail in one line")
    func controlCommands() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        let printed = try await node.waitForLine(prefix: "invite:")
        let invite = try await NodeProcess.runCommand(["invite", "--data-dir", node.dataDirectory])
        #expect(invite.status == 0)
        #expect(invite.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == printed)

        let table = try await NodeProcess.runCommand(["status", "--data-dir", node.dataDirectory])
        #expect(table.status == 0)
        #expect(table.stdout.contains("alive"))
        // Watched into a pipe: snapshots a blank line apart, no screen-clearing escapes.
        let watch = try NodeProcess(
            ["status", "--watch"], dataDirectory: node.dataDirectory, ownsDataDirectory: false)
        try await waitUntil("two snapshots of status --watch", timeout: .seconds(15)) { watch.stdout.contains("\n\n") }
        watch.signal(SIGTERM)
        _ = try await watch.waitForExit()
        #expect(!watch.stdout.contains("\u{1B}"), "\(watch.stdout)")

        let leave = try await NodeProcess.runCommand(["leave", "--data-dir", node.dataDirectory])
        #expect(leave.status == 0)
        #expect(try await node.waitForExit() == 0)

        for command in [["status"], ["invite"], ["leave"], ["status", "--json"]] {
            let result = try await NodeProcess.runCommand(command + ["--data-dir", node.dataDirectory])
            #expect(result.status != 0)
            #expect(result.stderr.contains("no groupmesh node is running"), "\(command): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1)
        }
        // The advice follows what is there: never `run` where that would found a second session.
        let parent = NodeProcess.makeTemporaryDirectory("parent")
        defer { try? FileManager.default.removeItem(atPath: parent) }
        try FileManager.default.createSymbolicLink(
            atPath: parent + "/.groupmesh", withDestinationPath: node.dataDirectory)
        let nested = try await NodeProcess.runCommand(["status", "--data-dir", parent])
        #expect(
            nested.stderr.contains("\(parent)/.groupmesh does: --data-dir \(parent)/.groupmesh?"), "\(nested.stderr)")
        let empty = try await NodeProcess.runCommand(["status", "--data-dir", parent + "/.groupmesh/nothing-here"])
        #expect(empty.stderr.contains("which holds no session"), "\(empty.stderr)")
        FileManager.default.createFile(atPath: parent + "/file", contents: Data("x".utf8))
        let file = try await NodeProcess.runCommand(["status", "--data-dir", parent + "/file"])
        #expect(file.stderr.contains("it is a file"), "\(file.stderr)")
    }

    @Test("a data dir whose path is longer than a socket address allows still works")
    func longDataDirectory() async throws {
        var path = NodeProcess.makeTemporaryDirectory("long")
        while path.utf8.count < 150 { path += "/deeper-directory-name" }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: path)
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let status = try await node.waitForStatus(timeout: .seconds(30), "status over a long path") { _ in true }
        #expect(status.members.count == 1)
    }

    @Test("a control socket left behind by a killed node does not block a restart")
    func staleSocket() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        node.signal(SIGKILL)
        try await node.waitForExit()
        #expect(FileManager.default.fileExists(atPath: node.dataDirectory + "/control.sock"))
        let again = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: node.dataDirectory)
        defer { Task { await again.cleanUp(removeData: false) } }
        _ = try await again.waitForLine(prefix: "listening:")
        try await again.waitForStatus(timeout: .seconds(30), "status after restart") { $0.members.count == 1 }
    }

    @Test("IPv6 loopback: two nodes form a mesh over [::1]")
    func ipv6() async throws {
        try await withProcessMesh(names: ["first", "second"], listen: "[::1]:0") { mesh in
            let listening = try await mesh["first"].waitForLine(prefix: "listening:")
            #expect(listening.hasPrefix("[::1]:"))
        }
    }
}
