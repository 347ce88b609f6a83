import Foundation
import MeshCrypto
import MeshTestKit
import Testing

/// STUN and TURN with a real coturn on the lab's internet (PROTOCOL.md §1e): a home node with no
/// member learns its public address from STUN; two homes behind symmetric NATs, with no public
/// member and nothing else that could carry them, form a session through their TURN allocations.
@Suite("STUN and TURN (NAT laboratory, coturn)", .serialized)
struct StunTurnTests {
    /// The parts of `status --json` → traversal these tests read.
    struct Traversal: Decodable {
        struct Stun: Decodable { var address: String?; var state: String }
        struct Turn: Decodable {
            var state: String
            var reason: String?
            var relayedAddress: String?
            var permissions: Int
            var channels: Int
            var datagramsSent: UInt64
            var datagramsReceived: UInt64
            var bytesReceived: UInt64
        }
        var stun: Stun?
        var turn: Turn?
    }

    struct Report: Decodable {
        struct Me: Decodable { var candidates: [String] }
        var `self`: Me
        var traversal: Traversal?
    }

    static func report(_ node: NodeProcess) async throws -> Report {
        let result = try await NodeProcess.runCommand(["status", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8))
    }

    static func waitForReport(
        _ node: NodeProcess, _ what: String, timeout: Duration = .seconds(20),
        _ condition: (Report) -> Bool
    ) async throws -> Report {
        var last: Report?
        do {
            try await waitUntil(what, timeout: timeout, every: .milliseconds(100)) {
                last = try await report(node)
                return last.map(condition) ?? false
            }
        } catch {
            throw NodeProcessError.timeout(
                "\(what): last traversal status \(String(describing: last?.traversal)); stderr: \(node.stderr)")
        }
        // safe: the wait ended with a report that met the condition.
        return last!
    }

    /// The addresses of the node's invite (`groupmesh invite`).
    static func inviteAddresses(_ node: NodeProcess) async throws -> (text: String, addresses: [String]) {
        let result = try await NodeProcess.runCommand(["invite", "--data-dir", node.dataDirectory])
        #expect(result.status == 0, "\(result.stderr)")
        let text = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let token = try InviteToken(parsing: text)
        return (text, token.addresses.map(\.description))
    }

    @Test(
        "a malformed --stun or --turn is one line and exit 65, the password never quoted; a name that does not resolve is exit 69"
    )
    func badServersAreRefusedAtStart() async throws {
        for (arguments, message) in [
            (["--stun", "stun.example.org:port"], "--stun"),
            (["--turn", "turn:mesh@198.51.100.10:3478"], "no password"),
            (["--turn", "turns:mesh:hunter2@198.51.100.10:3478"], "expected turn:USER:PASS@HOST:PORT"),
            (["--turn", "turn:mesh:hunter2@198.51.100.10:3478?transport=tcp"], "only UDP"),
        ] {
            let directory = NodeProcess.makeTemporaryDirectory("bad-server")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let result = try await NodeProcess.runCommand(
                ["run", "--listen", "127.0.0.1:0", "--data-dir", directory] + arguments,
                timeout: .seconds(30))
            #expect(result.status == 65, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains(message) && !result.stderr.contains("hunter2"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
        let directory = NodeProcess.makeTemporaryDirectory("bad-server")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let unresolved = try await NodeProcess.runCommand(
            [
                "run", "--listen", "127.0.0.1:0", "--data-dir", directory,
                "--stun", "no-such-host.invalid:3478",
            ], timeout: .seconds(30))
        #expect(unresolved.status == 69, "\(unresolved.status) \(unresolved.stderr)")
        #expect(unresolved.stderr.contains("cannot resolve no-such-host.invalid"), "\(unresolved.stderr)")
    }

    @Test(
        "a home node with --stun and no member learns its public address: status, candidates and invite hold it; a wrong TURN password fails and says why",
        .enabled(if: LabCoturn.isAvailable, Comment(rawValue: LabCoturn.unavailableReason ?? "")))
    func stunWithoutMembers() async throws {
        let lab = try NATLab(publicHosts: 1, homes: [.endpointIndependent])
        let coturn = try await LabCoturn(lab: lab, publicHost: 0)
        let node = try NodeProcess(
            [
                "run", "--listen", "0.0.0.0:7946", "--name", "h", "--log-level", "info",
                "--stun", coturn.endpoint,
            ], launcher: lab.launcher(.home(0)))
        defer {
            node.signal(SIGKILL)
            coturn.stop()
            lab.tearDown()
        }
        _ = try await node.waitForLine(prefix: "listening:")
        // MASQUERADE keeps the inside port when it is free.
        let expected = "\(lab.homes[0].publicAddress):7946"
        let status = try await Self.waitForReport(node, "the STUN server's answer") {
            $0.traversal?.stun?.address != nil
        }
        #expect(status.traversal?.stun?.address == expected)
        #expect(status.traversal?.stun?.state == "answered")
        let withCandidate = try await Self.waitForReport(node, "the candidate") {
            $0.`self`.candidates.contains(expected)
        }
        #expect(withCandidate.`self`.candidates.first == expected, "candidates \(withCandidate.`self`.candidates)")
        let invite = try await Self.inviteAddresses(node)
        #expect(invite.addresses.contains(expected), "invite addresses \(invite.addresses)")
        let text = try await NodeProcess.runCommand(["status", "--data-dir", node.dataDirectory])
        #expect(text.stdout.contains("stun \(coturn.endpoint): public address \(expected)"), "\(text.stdout)")
        await node.cleanUp()

        // The same server as a TURN server, with a wrong password (from $GROUPMESH_TURN): failed,
        // and said why; the variable is gone from the node's environment.
        let wrong = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7947", "--name", "w", "--log-level", "info"],
            launcher: lab.launcher(.home(0))
                + ["/usr/bin/env", "GROUPMESH_TURN=turn:\(coturn.username):not-the-password@\(coturn.endpoint)"])
        defer { wrong.signal(SIGKILL) }
        let failed = try await Self.waitForReport(wrong, "the failed allocation") {
            $0.traversal?.turn?.state == "failed"
        }
        #expect(failed.traversal?.turn?.reason == "401 wrong credentials")
        #expect(failed.traversal?.turn?.relayedAddress == nil)
        _ = try await wrong.waitForLine(
            prefix: "", timeout: .seconds(5), onStderr: true,
            containing: "TURN: allocation on \(coturn.endpoint) failed: 401 wrong credentials")
        let environment =
            FileManager.default.contents(atPath: "/proc/\(wrong.pid)/environ").map {
                String(decoding: $0, as: UTF8.self)
            } ?? ""
        #expect(
            !environment.isEmpty && !environment.contains("not-the-password"),
            "the password stays in /proc/\(wrong.pid)/environ")
        await wrong.cleanUp()
    }

    @Test(
        "only TURN: two homes behind symmetric NATs, no public member, form a session through coturn; messages cross both ways, and an attachment",
        .enabled(if: LabCoturn.isAvailable, Comment(rawValue: LabCoturn.unavailableReason ?? "")))
    func onlyTurn() async throws {
        let lab = try NATLab(publicHosts: 1, homes: [.symmetric, .symmetric])
        let coturn = try await LabCoturn(lab: lab, publicHost: 0)
        var processes: [NodeProcess] = []
        defer {
            for process in processes { process.signal(SIGKILL) }
            coturn.stop()
            lab.tearDown()
        }
        // h1 with --turn on the command line; h2 with it in its config file (the password off
        // the command line).
        let h1 = try NodeProcess(
            [
                "run", "--listen", "0.0.0.0:7946", "--name", "h1", "--log-level", "info",
                "--turn", coturn.turnURL,
            ], launcher: lab.launcher(.home(0)))
        processes.append(h1)
        _ = try await h1.waitForLine(prefix: "listening:")
        let allocated = try await Self.waitForReport(h1, "h1's allocation") { $0.traversal?.turn?.state == "allocated" }
        let relayed = try #require(allocated.traversal?.turn?.relayedAddress)
        #expect(relayed.hasPrefix(coturn.address + ":"), "relayed address \(relayed)")
        let invite = try await Self.inviteAddresses(h1)
        #expect(invite.addresses.contains(relayed), "h1's invite: \(invite.addresses)")
        #expect(
            !(try await NodeProcess.runCommand(["status", "--data-dir", h1.dataDirectory])).stdout.contains(
                coturn.password))
        // Given on the command line, the password is gone from what ps shows once the node read it.
        let commandLine = (try? String(contentsOfFile: "/proc/\(h1.pid)/cmdline", encoding: .utf8)) ?? ""
        #expect(
            commandLine.contains("turn:\(coturn.username):") && !commandLine.contains(coturn.password), "\(commandLine)"
        )

        let h2Directory = NodeProcess.makeTemporaryDirectory("turn-h2")
        let config = try JSONSerialization.data(withJSONObject: ["turn": coturn.turnURL])
        FileManager.default.createFile(
            atPath: h2Directory + "/config.json", contents: config, attributes: [.posixPermissions: 0o600])
        let h2 = try NodeProcess(
            [
                "run", "--listen", "0.0.0.0:7946", "--name", "h2", "--log-level", "info",
                "--invite", invite.text,
            ], dataDirectory: h2Directory, launcher: lab.launcher(.home(1)))
        processes.append(h2)
        do {
            try await [h1, h2].waitForMesh(alive: 2, timeout: .seconds(40))
        } catch {
            print("stunturn: coturn log:\n\(coturn.log.suffix(4000))")
            throw error
        }
        // Each reaches the other at its relayed address (where the other's datagrams come from):
        // with nobody to introduce them, each punches the other's record, the relayed address too.
        for (node, other) in [(h1, "h2"), (h2, "h1")] {
            do {
                _ = try await node.waitForStatus(timeout: .seconds(30), "\(other) reached through coturn") { status in
                    status.members.contains {
                        $0.name == other && $0.state == "alive"
                            && $0.pathAddress?.hasPrefix(coturn.address + ":") == true
                    }
                }
            } catch {
                print("stunturn: h1:\n\(h1.stderr.suffix(6000))\nh2:\n\(h2.stderr.suffix(6000))")
                throw error
            }
        }

        var listeners: [NodeProcess] = []
        for node in [h1, h2] {
            let listener = try NodeProcess(
                ["listen", "--json"], dataDirectory: node.dataDirectory, ownsDataDirectory: false)
            processes.append(listener)
            _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
            listeners.append(listener)
        }
        #expect(try await NATLabTests.exchange("through TURN", h1: h1, h2: h2, listeners: (listeners[0], listeners[1])))
        _ = try await NATLabTests.transfer(3 << 20, from: h1, to: h2)

        for node in [h1, h2] {
            let turn = try #require(try await Self.report(node).traversal?.turn)
            #expect(turn.state == "allocated")
            #expect(
                turn.permissions >= 1 && turn.channels >= 1,
                "permissions \(turn.permissions), channels \(turn.channels)")
            #expect(turn.datagramsSent > 0 && turn.datagramsReceived > 0)
        }
        let fetcher = try #require(try await Self.report(h2).traversal?.turn)
        #expect(fetcher.bytesReceived > 3 << 20, "h2 received \(fetcher.bytesReceived) B through its allocation")
        for process in processes { await process.cleanUp() }
    }
}
