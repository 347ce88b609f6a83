import Foundation
import MeshCrypto
import MeshTestKit
import Testing

/// `groupmesh run` as a user meets it: real processes on loopback with temporary data dirs.
@Suite("groupmesh run", .serialized)
struct RunCommandTests {
    @Test("prints listening and a parseable invite, and keeps its keys private")
    func startsAndPrintsInvite() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        let listening = try await node.waitForLine(prefix: "listening:")
        let address = try PeerAddress(parsing: listening)
        #expect(address.isLoopback)
        #expect(address.port != 0)
        let invite = try InviteToken(parsing: try await node.waitForLine(prefix: "invite:"))
        #expect(invite.addresses == [address])

        for file in ["session.key", "identity.key"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: node.dataDirectory + "/" + file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(file) must be 0600")
        }
        let directory = try FileManager.default.attributesOfItem(atPath: node.dataDirectory)
        #expect((directory[.posixPermissions] as? Int) == 0o700)
        node.signal(SIGTERM)
        #expect(try await node.waitForExit() == 0)
    }

    @Test("a second run on a live data dir is refused with one line; after SIGKILL it starts again")
    func lockRefusesSecondNode() async throws {
        let first = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await first.cleanUp() } }
        let firstInvite = try await first.waitForLine(prefix: "invite:")

        let second = try await NodeProcess.runCommand([
            "run", "--listen", "127.0.0.1:0", "--data-dir", first.dataDirectory,
        ])
        #expect(second.status != 0)
        #expect(second.stderr.contains("another groupmesh node"))
        #expect(second.stderr.split(separator: "\n").count == 1, "one readable line: \(second.stderr)")

        first.signal(SIGKILL)
        try await first.waitForExit()
        let restarted = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: first.dataDirectory)
        defer { Task { await restarted.cleanUp(removeData: false) } }
        let restartedInvite = try await restarted.waitForLine(prefix: "invite:")
        // Same data dir, same session: the secret survives restarts.
        #expect(try InviteToken(parsing: restartedInvite).secret == InviteToken(parsing: firstInvite).secret)
        restarted.signal(SIGINT)
        #expect(try await restarted.waitForExit() == 0)
    }

    @Test("a second node on a live node's port is refused with one line; the first keeps its port")
    func portIsExclusive() async throws {
        let first = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await first.cleanUp() } }
        let address = try PeerAddress(parsing: try await first.waitForLine(prefix: "listening:"))
        // Another data dir, the same port: with SO_REUSEADDR this started and took part of the traffic.
        let second = try await NodeProcess.runCommand([
            "run", "--listen", "127.0.0.1:\(address.port)",
            "--data-dir", NodeProcess.makeTemporaryDirectory("second"),
        ])
        #expect(second.status != 0)
        #expect(second.stderr.contains("in use"), "\(second.stderr)")
        #expect(second.stderr.split(separator: "\n").count == 1, "one readable line: \(second.stderr)")
        #expect(!second.stdout.contains("listening:"))
        // The wildcard address on the same port is refused too.
        let wildcard = try await NodeProcess.runCommand([
            "run", "--listen", "0.0.0.0:\(address.port)",
            "--data-dir", NodeProcess.makeTemporaryDirectory("third"),
        ])
        #expect(wildcard.status != 0, "\(wildcard.stdout)")
        #expect(try await first.status().`self`.address == "\(address)")
        first.signal(SIGTERM)
        #expect(try await first.waitForExit() == 0)
    }

    @Test(
        "the UDP buffers reach 4 MiB past net.core.rmem_max when the node may raise them, and status says what they are"
    )
    func socketBuffersAreRaised() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "invite:")
        let buffers = try await node.status().`self`
        let receive = try #require(buffers.receiveBuffer), send = try #require(buffers.sendBuffer)
        if geteuid() == 0 {
            // getsockopt reports twice the size set.
            #expect(receive >= 8 << 20, "SO_RCVBUFFORCE was not applied")
            #expect(send >= 8 << 20, "SO_SNDBUFFORCE was not applied")
        } else {
            print("not root: only checking that the buffers are reported (\(receive) B, \(send) B)")
            #expect(receive > 0 && send > 0)
        }
    }

    @Test("status says what is known of the NAT: a node alone knows nothing yet, and its record gives where it listens")
    func natIsUnknownAlone() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        let address = try await node.waitForLine(prefix: "listening:")
        let me = try await node.status().`self`
        #expect(me.nat == "unknown")
        #expect(me.reflexiveAddress == nil)
        #expect(me.candidates == [address])
    }

    @Test(
        "two nodes on loopback see each other at their own addresses: run prints `nat: none` once told, status says so, and the path is direct"
    )
    func runPrintsTheNATOnceKnown() async throws {
        try await withProcessMesh(names: ["first", "second"], waitForMembership: false) { mesh in
            let (first, second) = (try mesh["first"], try mesh["second"])
            #expect(try await first.waitForLine(prefix: "nat:", timeout: .seconds(20)) == "none")
            #expect(try await second.waitForLine(prefix: "nat:", timeout: .seconds(20)) == "none")
            let status = try await second.status()
            #expect(status.`self`.nat == "none")
            // The path to the first node: direct, where its datagrams come from (its own address here).
            let first_ = try #require(status.members.first { $0.id != status.`self`.id })
            #expect(first_.path == "direct")
            #expect(first_.pathAddress == first_.address)
        }
    }

    @Test("datagrams the kernel dropped while the node could not read are counted in status")
    func kernelDropsAreShown() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        let address = try PeerAddress(parsing: try await node.waitForLine(prefix: "listening:"))
        // Stopped, the node reads nothing: 24 MB of datagrams overflow any receive buffer it has.
        node.signal(SIGSTOP)
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        #expect(fd >= 0)
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_port = address.port.bigEndian
        target.sin_addr.s_addr = inet_addr("127.0.0.1")
        let payload = [UInt8](repeating: 0x5A, count: 1_200)
        for _ in 0..<20_000 {
            _ = withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, payload, payload.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        close(fd)
        node.signal(SIGCONT)
        let status = try await node.waitForStatus(timeout: .seconds(30), "kernel drops in status") {
            ($0.counters["kernelReceiveDrops"]?.number ?? 0) > 0
        }
        #expect((status.counters["kernelReceiveDrops"]?.number ?? 0) >= 1_000)
        let table = try await NodeProcess.runCommand(["status", "--data-dir", node.dataDirectory])
        #expect(table.stdout.contains("dropped by the kernel (receive buffer full): "), "\(table.stdout)")
    }

    @Test("a node started from an invite joins that session")
    func joinsInvitedSession() async throws {
        try await withProcessMesh(names: ["inviter", "joiner"], waitForMembership: false) { mesh in
            let (invite, joiner) = (mesh.invite, try mesh["joiner"])
            let joinerInvite = try await joiner.waitForLine(prefix: "invite:")
            #expect(try InviteToken(parsing: joinerInvite).secret == InviteToken(parsing: invite).secret)

            // The same data dir cannot switch to another session.
            joiner.signal(SIGTERM)
            try await joiner.waitForExit()
            let other = InviteToken(secret: .generate(), addresses: [try PeerAddress(parsing: "127.0.0.1:9")]).text
            let refused = try await NodeProcess.runCommand([
                "run", "--listen", "127.0.0.1:0", "--invite", other,
                "--data-dir", joiner.dataDirectory,
            ])
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("another session"))
        }
    }

    @Test("an invite from a file, standard input or the environment joins, and stays off the command line")
    func invitesOffTheCommandLine() async throws {
        let inviter = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "inviter"])
        var nodes = [inviter]
        defer { for node in nodes { Task { await node.cleanUp() } } }
        let invite = try await inviter.waitForLine(prefix: "invite:")
        let file = NodeProcess.makeTemporaryDirectory("invite") + "/invite.txt"
        try ("  " + invite + "\n\n").write(toFile: file, atomically: true, encoding: .utf8)
        // Readable by others, it is refused as a key file would be (it holds the session's secret).
        let exposed = try await NodeProcess.runCommand([
            "run", "--listen", "127.0.0.1:0", "--invite-file", file,
            "--data-dir", NodeProcess.makeTemporaryDirectory("exposed"),
        ])
        #expect(
            exposed.status == 65 && exposed.stderr.contains("is readable by others")
                && exposed.stderr.contains("chmod 600 \(file)"),
            "\(exposed.stderr)")
        #expect(!exposed.stderr.contains(invite), "the secret is never quoted")
        chmod(file, 0o600)

        // The file wins over the environment, whose copy is removed all the same.
        let fromFile = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0", "--invite-file", file],
            launcher: ["/usr/bin/env", "GROUPMESH_INVITE=\(invite)"])
        nodes.append(fromFile)
        let fromStandardInput = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0", "--invite-file", "-"],
            launcher: ["/bin/sh", "-c", "exec \"$0\" \"$@\" < \(file)"])
        nodes.append(fromStandardInput)
        let fromEnvironment = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0"],
            launcher: ["/usr/bin/env", "GROUPMESH_INVITE=\(invite)"])
        nodes.append(fromEnvironment)
        try await nodes.waitForMesh(alive: 4, timeout: .seconds(60))
        for node in nodes.dropFirst() {
            let commandLine = (try? String(contentsOfFile: "/proc/\(node.pid)/cmdline", encoding: .utf8)) ?? ""
            #expect(!commandLine.isEmpty && !commandLine.contains(invite), "the invite is in \(commandLine)")
            let environment =
                FileManager.default.contents(atPath: "/proc/\(node.pid)/environ").map {
                    String(decoding: $0, as: UTF8.self)
                } ?? ""
            #expect(
                !environment.isEmpty && !environment.contains(invite),
                "the invite stays readable in /proc/\(node.pid)/environ")
        }

        for (arguments, message) in [
            (["--invite-file", file + ".missing"], "cannot read the invite from"),
            (["--invite-file", NodeProcess.makeTemporaryDirectory("invite-empty")], "cannot read the invite from"),
            (["--invite", invite, "--invite-file", file], "--invite or --invite-file, not both"),
        ] {
            let result = try await NodeProcess.runCommand(
                ["run", "--listen", "127.0.0.1:0"] + arguments
                    + ["--data-dir", NodeProcess.makeTemporaryDirectory("bad")])
            #expect(result.status != 0)
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
        }
        let garbage = NodeProcess.makeTemporaryDirectory("invite-bad") + "/invite.txt"
        try "gm1AAAA\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        chmod(garbage, 0o600)
        let bad = try await NodeProcess.runCommand([
            "run", "--listen", "127.0.0.1:0", "--invite-file", garbage,
            "--data-dir", NodeProcess.makeTemporaryDirectory("bad"),
        ])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains(garbage + ": bad invite"), "\(bad.stderr)")

        // A named pipe nobody writes to: given up in one line, not a hang.
        let pipe = NodeProcess.makeTemporaryDirectory("invite-pipe") + "/invite.fifo"
        try #require(mkfifo(pipe, 0o600) == 0)
        let silent = try await NodeProcess.runCommand(
            [
                "run", "--listen", "127.0.0.1:0", "--invite-file", pipe,
                "--data-dir", NodeProcess.makeTemporaryDirectory("bad"),
            ], timeout: .seconds(30))
        #expect(
            silent.status == 65 && silent.stderr.contains("nothing was written to the named pipe"), "\(silent.stderr)")
        #expect(silent.stderr.split(separator: "\n").count == 1)
    }

    @Test(
        "bad input is one readable line and a non-zero exit",
        arguments: [
            (["run", "--invite", "gm1AAAA"], "bad invite"),
            (["run", "--invite", "hello"], "bad invite"),
            (["run", "--listen", "nonsense"], "invalid address"),
            (["run", "--listen", "127.0.0.1:0", "--join", "300.1.1.1:1"], "invalid address"),
            // Numeric hosts only, as CLI.md says (getaddrinfo would take these).
            (["run", "--listen", "0x7f.1:0"], "invalid address"),
            (["run", "--listen", "localhost:0"], "invalid address"),
            (["run", "--listen", "127.1:0"], "invalid address"),
            (["run", "--listen", "127.0.0.1:65536"], "invalid address"),
            (["run", "--name", "two\nlines", "--listen", "127.0.0.1:0"], "control characters"),
            (["run", "--relay-budget", "20", "--listen", "127.0.0.1:0"], "is not a rate: give a number and a unit"),
            (["run", "--relay-budget", "1KiB/s", "--listen", "127.0.0.1:0"], "must be between 64KiB/s and 100GiB/s"),
            // A socket of one family cannot reach the other's addresses: said at start, not silence.
            (["run", "--listen", "127.0.0.1:0", "--join", "[::1]:9"], "reachable only over IPv6 ([::1]:9)"),
            (
                ["run", "--listen", "[::1]:0", "--join", "127.0.0.1:9", "--join", "10.0.0.1:9"],
                "reachable only over IPv4"
            ),
        ])
    func badInput(arguments: [String], message: String) async throws {
        let directory = NodeProcess.makeTemporaryDirectory("bad")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try await NodeProcess.runCommand(arguments + ["--data-dir", directory])
        #expect(result.status != 0)
        #expect(result.stderr.contains(message), "stderr: \(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "stderr: \(result.stderr)")
    }
}
