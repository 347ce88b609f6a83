import Foundation
import MeshTestKit
import Testing

/// `groupmesh ping` between real processes.
@Suite("ping with real processes", .serialized)
struct PingCommandTests {
    @Test(
        "ping answers over the member's address, takes -c3 as ping(8) does and sums up on Ctrl-C; an unknown member and a stopped one fail in one line"
    )
    func pingMember() async throws {
        try await withProcessMesh(names: ["alice", "bob"]) { mesh in
            let (alice, bob) = (try mesh["alice"], try mesh["bob"])
            let bobAddress = try await bob.status().`self`.address

            let ping = try await NodeProcess.runCommand([
                "ping", "--data-dir", alice.dataDirectory, "bob",
                "--count", "3", "--interval", "0.05",
            ])
            #expect(ping.status == 0, "\(ping.stderr)")
            let pongs = ping.stdout.split(separator: "\n").filter { $0.hasPrefix("pong from bob (") }
            #expect(pongs.count == 3 && pongs.allSatisfy { $0.contains("via \(bobAddress) in ") }, "\(ping.stdout)")
            #expect(ping.stdout.contains("3 sent, 3 answered, rtt min/avg/max"), "\(ping.stdout)")
            // The summary as JSON: the average to the microsecond, as the text line gives it.
            let json = try await NodeProcess.runCommand([
                "ping", "--data-dir", alice.dataDirectory, "bob", "--count", "3", "--interval", "0.05", "--json",
            ])
            let summary = try #require(json.stdout.split(separator: "\n").last.map(String.init))
            let average = try #require(summary.firstMatch(of: /"avgMs":\s*([0-9.]+)/)?.1, "\(json.stdout)")
            #expect((average.split(separator: ".").dropFirst().first?.count ?? 0) <= 3, "\(summary)")

            // As ping(8) spells it: values joined to -c and -i; Ctrl-C ends with the summary.
            let joined = try await NodeProcess.runCommand([
                "ping", "bob", "-c2", "-i0.05", "--data-dir", alice.dataDirectory,
            ])
            #expect(
                joined.status == 0 && joined.stdout.contains("2 sent, 2 answered"), "\(joined.stdout)\(joined.stderr)")
            let long = try mesh.client(["ping", "bob", "-c", "1000", "-i", "0.1"], of: "alice")
            _ = try await long.waitForLine(prefix: "pong from bob")
            long.signal(SIGINT)
            #expect(try await long.waitForExit() == 130, "\(long.stderr)")
            #expect(long.stdout.contains(" sent, ") && long.stdout.contains(" answered"), "\(long.stdout)")

            let unknown = try await NodeProcess.runCommand(["ping", "--data-dir", alice.dataDirectory, "nobody"])
            #expect(unknown.status == 65 && unknown.stderr.contains("unknown member 'nobody'"), "\(unknown.stderr)")

            bob.signal(SIGSTOP)
            defer { bob.signal(SIGCONT) }
            let silent = try await NodeProcess.runCommand([
                "ping", "--data-dir", alice.dataDirectory, "bob",
                "--count", "1",
            ])
            #expect(silent.status == 69, "\(silent.stdout)")
            #expect(
                silent.stdout.contains("no answer from bob") && silent.stdout.contains("1 sent, 0 answered"),
                "\(silent.stdout)")
        }
    }
}
