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

    /// An outbound firewall rule on the public member that holds for a moment (a VPN's kill
    /// switch while it reconnects) refuses its sends to the home (`EPERM`): the home goes dead to
    /// it. Once the rule is gone, the member sends there again within seconds (a scratch socket
    /// tries the host every few seconds), not after the minute a refused host used to wait.
    @Test(
        "a firewall rule that refused a member's sends for a moment costs seconds once it is gone, not a minute",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func briefFirewallRuleCostsSeconds() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.endpointIndependent]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let p = try nodes.run("p", on: .publicHost(0), lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        let h = try nodes.run("h", on: .home(0), invite: invite, lazy: true)
        try await [p, h].waitForMesh(alive: 2, timeout: .seconds(30))

        let rule = ["OUTPUT", "-d", lab.homes[0].publicAddress, "-p", "udp", "-j", "DROP"]
        func firewall(_ arguments: [String]) throws {
            let result = try lab.run(on: .publicHost(0), NATLab.iptablesCommand ?? "iptables", arguments)
            try #require(result.status == 0, "iptables \(arguments): \(result.stderr)")
        }
        try firewall(["-I"] + rule)
        _ = try await h.waitForStatus(timeout: .seconds(60), "p dead to h") {
            Self.member("p", in: $0)?.state == "dead"
        }
        #expect(p.stderr.contains("firewall rule?"), "\(p.stderr.suffix(600))")
        try firewall(["-D"] + rule)
        // Well inside the minute a refused host used to wait (a retest every 5 s, then
        // membership's own round trips).
        for (node, other) in [(p, "h"), (h, "p")] {
            _ = try await node.waitForStatus(timeout: .seconds(40), "\(other) alive again") {
                Self.member(other, in: $0)?.state == "alive"
            }
        }
    }
}
