import Foundation
import MeshTestKit
import Testing

extension NATLabTests {
    /// Two homes behind symmetric NATs reach each other only through a public member's relay.
    /// One home then sends nothing at all (its host drops its own UDP): it can catch up with a
    /// removal only by being handed the new epoch the way the others' datagrams reach it, by the
    /// author through the relay, or by the relay itself once it is past the epoch (whichever
    /// comes first: a relay in the new epoch drops the author's wrapping and hands on straight).
    /// Its record names only its private address, where nothing reaches it.
    @Test(
        "a home behind a symmetric NAT that sends nothing is handed the new key epoch through its relay when a member is removed",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func relayedHomeIsHandedTheNewEpoch() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 2, homes: [.symmetric, .symmetric]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let q0 = try nodes.run("q0", on: .publicHost(0), lazy: true)
        let invite = try await q0.waitForLine(prefix: "invite:")
        let q1 = try nodes.run("q1", on: .publicHost(1), invite: invite, lazy: true)
        let s = try nodes.run("s", on: .home(0), invite: invite, lazy: true)
        let h = try nodes.run("h", on: .home(1), invite: invite, lazy: true)
        try await [q0, q1, s, h].waitForMesh(alive: 4, timeout: .seconds(30))

        let publics = [
            (name: "q0", id: try await q0.status().`self`.id), (name: "q1", id: try await q1.status().`self`.id),
        ]
        func relay(of name: String, in status: NodeStatus) -> String? {
            Self.relay(of: name, in: status, publics: publics)
        }
        let hView = try await h.waitForStatus(timeout: .seconds(60), "s relayed at h") { relay(of: "s", in: $0) != nil }
        _ = try await s.waitForStatus(timeout: .seconds(30), "h relayed at s") { relay(of: "h", in: $0) != nil }
        let relayName = try #require(relay(of: "s", in: hView))
        let removed = publics.map(\.name).first { $0 != relayName } ?? "q1"
        let iptables = NATLab.iptablesCommand ?? "iptables"
        func filter(_ arguments: [String]) throws {
            let result = try lab.run(on: .home(0), iptables, arguments)
            try #require(result.status == 0, "iptables \(arguments): \(result.stderr)")
        }

        // Nothing s sends leaves its host; what comes to it still passes its router.
        let sessionBefore = try await s.status().`self`.session
        try filter(["-A", "OUTPUT", "-p", "udp", "-j", "DROP"])
        let removal = try await NodeProcess.runCommand(["remove-member", "--data-dir", h.dataDirectory, removed])
        #expect(removal.status == 0, "\(removal.stderr)")
        let newSession = try await h.status().`self`.session
        #expect(newSession != sessionBefore)
        let sView = try await s.waitForStatus(timeout: .seconds(30), "s on h's new epoch") {
            $0.`self`.session == newSession
        }
        #expect(sView.`self`.keyEpoch == 1)
        #expect(Self.member(removed, in: sView)?.state != "alive", "s still holds \(removed) alive")
    }
}
