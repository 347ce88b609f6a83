import Foundation
import MeshTestKit
import Testing

/// Three hosts of our own (network namespaces on a private bridge), each node listening on the
/// wildcard address and advertising its host's address, as on a real LAN.
@Suite("mesh across hosts (network namespaces)", .serialized)
struct NamespaceMeshTests {
    @Test(
        "three hosts form a mesh; a killed host is seen dead, a stopped one left",
        .enabled(if: NamespaceLab.isAvailable, Comment(rawValue: NamespaceLab.unavailableReason ?? "")))
    func threeHosts() async throws {
        let lab = try NamespaceLab(hostCount: 3)
        defer { lab.tearDown() }
        var nodes: [NodeProcess] = []
        defer { for node in nodes { Task { await node.cleanUp() } } }
        func start(_ index: Int, invite: String?) throws -> NodeProcess {
            var arguments = [
                "run", "--listen", "0.0.0.0:7946", "--advertise", "\(lab.addresses[index]):7946",
                "--name", "host\(index)",
            ]
            if let invite { arguments += ["--invite", invite] }
            return try NodeProcess(arguments, launcher: lab.launcher(index))
        }
        nodes.append(try start(0, invite: nil))
        let invite = try await nodes[0].waitForLine(prefix: "invite:")
        nodes.append(try start(1, invite: invite))
        nodes.append(try start(2, invite: invite))
        try await nodes.waitForMesh(alive: 3)
        var ids: [String] = []
        for node in nodes {
            let status = try await node.status()
            #expect(
                status.members.allSatisfy { member in lab.addresses.contains { member.address.hasPrefix($0 + ":") } })
            ids.append(status.`self`.id)
        }
        nodes[2].signal(SIGKILL)
        try await nodes[2].waitForExit()
        for node in nodes[0..<2] {
            try await node.waitForStatus(timeout: .seconds(30), "host2 dead") { $0.state(of: ids[2]) == "dead" }
        }
        nodes[1].signal(SIGTERM)
        #expect(try await nodes[1].waitForExit() == 0)
        try await nodes[0].waitForStatus(timeout: .seconds(20), "host1 left") { $0.state(of: ids[1]) == "left" }
    }
}
