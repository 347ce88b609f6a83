import Foundation
import MeshTestKit
import Testing

extension NATLabTests {
    /// A home whose line is down for longer than the dead are kept (its router drops every
    /// datagram both ways, as a dead uplink does): the public member and the home forget each
    /// other. Once the line is back, the home asks where the public member was, through a new
    /// mapping of its router, and both are members again, without an invite or a restart.
    /// (`--profile local`: the dead are forgotten after 30 s, not a minute.)
    @Test(
        "a home whose line was down until the members forgot each other is back in the session once the line is",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func homeBackAfterALongOutage() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.endpointIndependent]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let local = ["--profile", "local"]
        let q = try nodes.run("q", on: .publicHost(0), lazy: true, extra: local)
        let invite = try await q.waitForLine(prefix: "invite:")
        let h = try nodes.run("h", on: .home(0), invite: invite, lazy: true, extra: local)
        try await [q, h].waitForMesh(alive: 2, timeout: .seconds(30))

        let outage = ["FORWARD", "-p", "udp", "-j", "DROP"]
        func filter(_ arguments: [String]) throws {
            let result = try lab.run(in: lab.homes[0].router, NATLab.iptablesCommand ?? "iptables", arguments)
            try #require(result.status == 0, "iptables \(arguments): \(result.stderr)")
        }
        try filter(["-I"] + outage)
        for (node, other) in [(q, "h"), (h, "q")] {
            _ = try await node.waitForStatus(timeout: .seconds(90), "\(other) forgotten") {
                Self.member(other, in: $0) == nil
            }
        }
        try filter(["-D"] + outage)

        for (node, other) in [(q, "h"), (h, "q")] {
            _ = try await node.waitForStatus(timeout: .seconds(60), "\(other) alive again") {
                Self.member(other, in: $0)?.state == "alive"
            }
        }
        for (node, other) in [(h, "q"), (q, "h")] {
            let sent = try await NodeProcess.runCommand([
                "send", "--data-dir", node.dataDirectory, "--to", other, "back after the outage",
            ])
            #expect(sent.status == 0, "\(node) to \(other): \(sent.stderr)")
        }
    }
}
