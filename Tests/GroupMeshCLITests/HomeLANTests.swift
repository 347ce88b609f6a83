import Foundation
import MeshTestKit
import Testing

/// Two members in one home, behind a router that does not hairpin (Linux NAT: a datagram from
/// inside to the home's own public address is the router's, and reaches no host): each sees the
/// other's public address through the public member, which leads nowhere from inside. They must
/// meet at their private addresses, which their signed records carry.
@Suite("One home, two members, a router without hairpin (network namespaces)", .serialized)
struct HomeLANTests {
    @Test(
        "two hosts in one home behind a router that does not hairpin meet at their private addresses (LAN discovery off), nothing relayed; a message crosses both ways",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func twoMembersInOneHome() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.endpointIndependent], neighbours: [0]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let home = lab.homes[0]
        let neighbourAddress = try #require(home.neighbourAddress)
        let p = try nodes.run("p", on: .publicHost(0), lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        // LAN discovery would find the neighbour by itself: off, the records' own addresses must do.
        let a = try nodes.run("a", on: .home(0), invite: invite, extra: ["--no-lan-discovery"])
        let b = try nodes.run("b", on: .neighbour(0), invite: invite, extra: ["--no-lan-discovery"])
        try await [p, a, b].waitForMesh(alive: 3, timeout: .seconds(30))

        // The router does not hairpin: a socket of a's host mapped by a datagram out (to p), and
        // from b's host the mapping's public address reaches nobody.
        let inside = try lab.udpSocket(on: .neighbour(0), port: 0)
        let mapped = try lab.udpSocket(on: .home(0), port: 7947)
        defer { close(inside); close(mapped) }
        Self.send([0x01], from: mapped, to: lab.publicAddresses[0], port: 9)
        #expect(
            !PortMappingLabTests.send(from: inside, to: home.publicAddress, port: 7947, expectingAt: mapped),
            "the lab's router hairpins")

        func atPrivateAddress(_ status: NodeStatus, _ name: String, _ address: String) -> Bool {
            guard let member = NATLabTests.member(name, in: status) else { return false }
            return member.state == "alive" && (member.path == "direct" || member.path == "punched")
                && member.pathAddress?.hasPrefix(address + ":") == true
        }
        var last = ("", "")
        do {
            try await waitUntil(
                "a and b reach each other at their private addresses", timeout: .seconds(30),
                every: .milliseconds(200)
            ) {
                let (aView, bView) = (try await a.status(), try await b.status())
                last = (
                    NATLabTests.member("b", in: aView).map { "\($0.state)/\($0.path ?? "-") \($0.pathAddress ?? "-")" }
                        ?? "missing",
                    NATLabTests.member("a", in: bView).map { "\($0.state)/\($0.path ?? "-") \($0.pathAddress ?? "-")" }
                        ?? "missing"
                )
                return atPrivateAddress(aView, "b", neighbourAddress)
                    && atPrivateAddress(bView, "a", home.privateAddress)
            }
        } catch {
            Issue.record("b at a: \(last.0); a at b: \(last.1)")
            throw error
        }
        let listeners = (h1: try await nodes.listen(to: a), h2: try await nodes.listen(to: b))
        #expect(
            try await NATLabTests.exchange("inside one home", h1: a, h2: b, names: ("a", "b"), listeners: listeners))
        let pView = try await p.status()
        #expect(pView.relay("forwardedDatagrams") == 0, "the public member relayed between two hosts of one home")
    }

    static func send(_ bytes: [UInt8], from socket: Int32, to host: String, port: UInt16) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(socket, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }
}
