import Foundation
import MeshTestKit
import Testing

/// LAN discovery with real nodes on a LAN of our own (network namespaces on a private bridge):
/// an invite whose address no longer answers (the inviter's address changed) still gets its
/// holder in, through the member heard on the LAN.
@Suite("LAN discovery across hosts (network namespaces)", .serialized)
struct LANDiscoveryProcessTests {
    @Test(
        "a joiner whose invite names a dead address finds the inviter on its LAN; a message crosses; --no-lan-discovery stays silent",
        .enabled(if: NamespaceLab.isAvailable, Comment(rawValue: NamespaceLab.unavailableReason ?? "")))
    func aStaleInviteIsRescuedOnTheLAN() async throws {
        let lab = try NamespaceLab(hostCount: 3)
        defer { lab.tearDown() }
        var nodes: [NodeProcess] = []
        defer { for node in nodes { Task { await node.cleanUp() } } }
        // An address on the LAN nobody has: where the inviter was when it made the invite.
        let stale = lab.addresses[0].split(separator: ".").dropLast().joined(separator: ".") + ".200:7946"
        let inviter = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--advertise", stale, "--name", "inviter"],
            launcher: lab.launcher(0))
        nodes.append(inviter)
        let invite = try await inviter.waitForLine(prefix: "invite:")
        let joiner = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "joiner", "--invite", invite],
            launcher: lab.launcher(1))
        nodes.append(joiner)
        let silent = try NodeProcess(
            [
                "run", "--listen", "0.0.0.0:7946", "--name", "silent", "--invite", invite,
                "--no-lan-discovery",
            ], launcher: lab.launcher(2))
        nodes.append(silent)
        try await joiner.waitForStatus(timeout: .seconds(30), "the inviter alive") { status in
            status.members.contains { $0.name == "inviter" && $0.state == "alive" }
        }
        let joined = try await joiner.status()
        #expect((joined.lanDiscovery?.announcementsHeard ?? 0) >= 1)
        #expect(joined.lanDiscovery?.interfaces.isEmpty == false)
        let sent = try await NodeProcess.runCommand([
            "send", "--data-dir", joiner.dataDirectory, "--to", "inviter", "hello over the LAN",
        ])
        #expect(sent.status == 0, "\(sent.stdout)\(sent.stderr)")
        #expect(sent.stderr.contains("sent to 1 member"), "\(sent.stderr)")
        // The node without LAN discovery sends no announcement; it still hears the others', and
        // takes none of them (it has no LAN discovery to act on them).
        let quiet = try await silent.status()
        #expect(quiet.lanDiscovery == nil)
        #expect(quiet.joining != nil, "the only address it knows answers nobody")
    }
}
