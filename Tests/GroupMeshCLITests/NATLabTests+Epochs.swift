import Foundation
import MeshTestKit
import Testing

extension NATLabTests {
    /// Two homes behind symmetric NATs reach each other only through a public member's relay.
    /// One home then sends nothing at all (its router drops what it sends: a drop on the host
    /// itself would fail its sends with `EPERM`, and the node would refuse those hosts for a
    /// minute, longer than the test means to stop it): it can catch up with a
    /// removal only by being handed the new epoch the way the others' datagrams reach it, by the
    /// author through the relay, or by the relay itself once it is past the epoch (whichever
    /// comes first: a relay in the new epoch drops the author's wrapping and hands on straight).
    /// Its record names only its private address, where nothing reaches it.
    /// Then the home hears nothing while another member is removed (its handover is lost), for
    /// so long that it holds every member dead: once it hears again, it catches up (its offers to
    /// the dead reach the public members, which check the address its NAT gives it and hand over).
    @Test(
        "a home behind a symmetric NAT is handed the new key epoch through its relay when it sends nothing, and catches up after hearing nothing",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func relayedHomeIsHandedTheNewEpoch() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 3, homes: [.symmetric, .symmetric]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let q0 = try nodes.run("q0", on: .publicHost(0), lazy: true)
        let invite = try await q0.waitForLine(prefix: "invite:")
        let q1 = try nodes.run("q1", on: .publicHost(1), invite: invite, lazy: true)
        let q2 = try nodes.run("q2", on: .publicHost(2), invite: invite, lazy: true)
        let s = try nodes.run("s", on: .home(0), invite: invite, lazy: true)
        let h = try nodes.run("h", on: .home(1), invite: invite, lazy: true)
        try await [q0, q1, q2, s, h].waitForMesh(alive: 5, timeout: .seconds(30))

        let publics = [
            (name: "q0", id: try await q0.status().`self`.id), (name: "q1", id: try await q1.status().`self`.id),
            (name: "q2", id: try await q2.status().`self`.id),
        ]
        func relay(of name: String, in status: NodeStatus) -> String? {
            Self.relay(of: name, in: status, publics: publics)
        }
        let hView = try await h.waitForStatus(timeout: .seconds(60), "s relayed at h") { relay(of: "s", in: $0) != nil }
        _ = try await s.waitForStatus(timeout: .seconds(30), "h relayed at s") { relay(of: "h", in: $0) != nil }
        let relayName = try #require(relay(of: "s", in: hView))
        let others = publics.map(\.name).filter { $0 != relayName }
        let iptables = NATLab.iptablesCommand ?? "iptables"
        func filter(_ arguments: [String], in space: String? = nil) throws {
            let result = try lab.run(in: space ?? lab.namespace(.home(0)), iptables, arguments)
            try #require(result.status == 0, "iptables \(arguments): \(result.stderr)")
        }

        // 1. Nothing s sends leaves its home; what comes to it still passes its router.
        let sessionBefore = try await s.status().`self`.session
        let silence = ["FORWARD", "-s", lab.homes[0].privateAddress, "-p", "udp", "-j", "DROP"]
        try filter(["-I"] + silence, in: lab.homes[0].router)
        let removal = try await NodeProcess.runCommand([
            "remove-member", "--data-dir", h.dataDirectory, "--keep-introduced", others[0],
        ])
        #expect(removal.status == 0, "\(removal.stderr)")
        let firstSession = try await h.status().`self`.session
        #expect(firstSession != sessionBefore)
        let sView = try await s.waitForStatus(timeout: .seconds(30), "s on h's new epoch") {
            $0.`self`.session == firstSession
        }
        #expect(sView.`self`.keyEpoch == 1)
        #expect(Self.member(others[0], in: sView)?.state != "alive", "s still holds \(others[0]) alive")
        try filter(["-D"] + silence, in: lab.homes[0].router)

        // 2. Nothing reaches s while h removes another member, and until s holds every member
        // dead (its paths and the relay's are gone); then it hears again.
        try filter(["-A", "INPUT", "-p", "udp", "-j", "DROP"])
        let second = try await NodeProcess.runCommand([
            "remove-member", "--data-dir", h.dataDirectory, "--keep-introduced", others[1],
        ])
        #expect(second.status == 0, "\(second.stderr)")
        let secondSession = try await h.status().`self`.session
        _ = try await s.waitForStatus(timeout: .seconds(90), "s holding every member dead") { status in
            let others = status.members.filter { $0.id != status.`self`.id }
            return others.allSatisfy { $0.state != "alive" && $0.state != "suspect" }
                && others.filter { $0.state == "dead" }.count >= 3
        }
        try filter(["-D", "INPUT", "-p", "udp", "-j", "DROP"])
        let caughtUp: NodeStatus
        do {
            caughtUp = try await s.waitForStatus(timeout: .seconds(60), "s on the second epoch") {
                $0.`self`.session == secondSession
            }
        } catch {
            // What each side saw, for the next reader of a failure.
            for node in [q0, q1, q2, s, h] {
                let status = try? await NodeProcess.runCommand(["status", "--json", "--data-dir", node.dataDirectory])
                print("status of \(node):", status?.stdout ?? "-")
            }
            print("log of s:", s.stderr.suffix(8000))
            throw error
        }
        #expect(caughtUp.`self`.keyEpoch == 2)
        let relayNode = [q0, q1, q2][publics.firstIndex { $0.name == relayName } ?? 0]
        _ = try await relayNode.waitForStatus(timeout: .seconds(30), "s alive again at its relay") {
            Self.member("s", in: $0)?.state == "alive"
        }
    }
}
