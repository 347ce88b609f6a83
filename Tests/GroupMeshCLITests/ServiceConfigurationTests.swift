import Foundation
import MeshCrypto
import MeshTestKit
import Testing

/// `groupmesh run` as a service runs it: settings from a config file, the invite from systemd's
/// credentials directory, and no session secret in output that goes to a log.
@Suite("groupmesh run as a service", .serialized)
struct ServiceConfigurationTests {
    /// `status --json` as a dictionary, for the fields `NodeStatus` does not decode.
    private static func rawStatus(_ node: NodeProcess) async throws -> [String: Any] {
        let result = try await NodeProcess.runCommand(["status", "--json", "--data-dir", node.dataDirectory])
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    private static func relayEnabled(_ status: [String: Any]) -> Bool? {
        ((status["counters"] as? [String: Any])?["relay"] as? [String: Any])?["enabled"] as? Bool
    }

    /// Private, as systemd hands credentials over (0400) and as an invite file must be.
    private static func write(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
    }

    @Test("the data dir's config.json sets listen, name, profile and relay")
    func configFileTakesEffect() async throws {
        let directory = NodeProcess.makeTemporaryDirectory("config")
        try Self.write(
            #"{"listen": "127.0.0.1:0", "name": "from-file", "profile": "local", "relay": false}"#,
            to: directory + "/config.json")
        // No --listen, no --name: what the node does comes from the file alone.
        let node = try NodeProcess(["run"], dataDirectory: directory)
        defer { Task { await node.cleanUp() } }
        let listening = try await node.waitForLine(prefix: "listening:")
        #expect(listening.hasPrefix("127.0.0.1:"), "the file's listen address: \(listening)")
        let status = try await node.status()
        #expect(status.`self`.name == "from-file")
        #expect(status.`self`.address == listening)
        let raw = try await Self.rawStatus(node)
        #expect((raw["self"] as? [String: Any])?["profile"] as? String == "local")
        #expect(Self.relayEnabled(raw) == false)
        node.signal(SIGTERM)
        #expect(try await node.waitForExit() == 0)
    }

    @Test("a flag wins over the file, --config reads another file, and what the flags leave is the file's")
    func flagWinsOverFile() async throws {
        let file = NodeProcess.makeTemporaryDirectory("config-elsewhere") + "/node.json"
        try Self.write(#"{"listen": "127.0.0.1:0", "name": "from-file", "profile": "wan", "relay": false}"#, to: file)
        let node = try NodeProcess(["run", "--config", file, "--name", "from-flag", "--relay"])
        defer { Task { await node.cleanUp() } }
        let listening = try await node.waitForLine(prefix: "listening:")
        #expect(listening.hasPrefix("127.0.0.1:"), "the file's listen address: \(listening)")
        #expect(try await node.status().`self`.name == "from-flag")
        let raw = try await Self.rawStatus(node)
        #expect((raw["self"] as? [String: Any])?["profile"] as? String == "wan")
        #expect(Self.relayEnabled(raw) == true, "--relay undoes the file's \"relay\": false")
        // Unset and unknown figures are there, null: a script reads them without asking first.
        let relay = (raw["counters"] as? [String: Any])?["relay"] as? [String: Any] ?? [:]
        for key in ["budgetSetting", "cpuMillisecondsPerMiB"] {
            #expect(relay[key] is NSNull, "\(key): \(relay)")
        }
    }

    @Test("--relay-budget shows in status --json and its text; the file's \"relay-budget\": \"off\" relays nothing")
    func relayBudgetIsShown() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--relay-budget", "100Mbit"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let relay = try #require(
            (try await Self.rawStatus(node)["counters"] as? [String: Any])?["relay"] as? [String: Any])
        #expect(relay["budgetSetting"] as? Int == 12_500_000 && relay["budget"] as? Int == 12_500_000, "\(relay)")
        #expect(relay["enabled"] as? Bool == true && relay["measuredCapacity"] as? Int == 0, "\(relay)")
        let text = try await NodeProcess.runCommand(["status", "--data-dir", node.dataDirectory])
        #expect(text.stdout.contains("relay budget: 11.9 MiB/s (--relay-budget 11.9 MiB/s)"), "\(text.stdout)")

        let directory = NodeProcess.makeTemporaryDirectory("config-budget")
        try Self.write(#"{"listen": "127.0.0.1:0", "relay-budget": "off"}"#, to: directory + "/config.json")
        let off = try NodeProcess(["run"], dataDirectory: directory)
        defer { Task { await off.cleanUp() } }
        _ = try await off.waitForLine(prefix: "listening:")
        #expect(Self.relayEnabled(try await Self.rawStatus(off)) == false)
    }

    @Test(
        "an unknown key, malformed JSON, a wrong type, a bad value or a missing --config file: one line, exit 1, nothing started"
    )
    func badConfigFilesAreRefused() async throws {
        let cases: [(file: String, message: String)] = [
            (#"{"listen": "127.0.0.1:0", "lisen": "127.0.0.1:0"}"#, #"unknown key "lisen""#),
            (
                "{\n  \"name\": \"x\"\n  \"listen\": \"127.0.0.1:0\"\n}",
                "is not valid JSON: Invalid value at line 3, column 3"
            ),
            (#"{"name": "x""#, "is not valid JSON"),
            (#"["listen", "127.0.0.1:0"]"#, "must hold one JSON object"),
            ("null", "must hold one JSON object"),
            ("\n", "is empty; write {} in it"),
            (#"{"lazy": "yes"}"#, #""lazy" in the config file"#),
            (#"{"profile": "moon"}"#, #""profile" in the config file"#),
            (#"{"listen": "localhost:7946"}"#, "invalid address"),
            (#"{"name": "two\nlines", "listen": "127.0.0.1:0"}"#, "control characters"),
            (#"{"event-handler-timeout": 0}"#, "0.1 to 3600"),
            (#"{"relay-budget": "fast"}"#, #""relay-budget" in the config file"#),
        ]
        for (text, message) in cases {
            let directory = NodeProcess.makeTemporaryDirectory("bad-config")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let path = directory + "/config.json"
            try Self.write(text, to: path)
            let result = try await NodeProcess.runCommand(["run", "--data-dir", directory])
            #expect(result.status == 1, "\(text): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(text): \(result.stderr)")
            #expect(result.stderr.contains(path), "the error names the file: \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
            #expect(!result.stdout.contains("listening:"))
        }
        let missing = NodeProcess.makeTemporaryDirectory("no-config") + "/absent.json"
        let result = try await NodeProcess.runCommand([
            "run", "--config", missing, "--listen", "127.0.0.1:0",
            "--data-dir", NodeProcess.makeTemporaryDirectory("bad-config"),
        ])
        #expect(result.status == 1)
        #expect(result.stderr.contains(missing) && result.stderr.contains("No such file"), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
        let directory = NodeProcess.makeTemporaryDirectory("config-directory")
        let notAFile = try await NodeProcess.runCommand([
            "run", "--config", directory, "--listen", "127.0.0.1:0",
            "--data-dir", NodeProcess.makeTemporaryDirectory("bad-config"),
        ])
        #expect(notAFile.status == 1)
        #expect(notAFile.stderr.contains("\(directory) is a directory"), "\(notAFile.stderr)")
    }

    @Test(
        "the invite in $CREDENTIALS_DIRECTORY/groupmesh-invite joins, before $GROUPMESH_INVITE; a bad one names the file"
    )
    func credentialInviteJoins() async throws {
        let inviter = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "inviter"])
        var nodes = [inviter]
        defer { for node in nodes { Task { await node.cleanUp() } } }
        let invite = try await inviter.waitForLine(prefix: "invite:")
        let credentials = NodeProcess.makeTemporaryDirectory("credentials")
        defer { try? FileManager.default.removeItem(atPath: credentials) }
        try Self.write(invite + "\n", to: credentials + "/groupmesh-invite")

        // Were the environment read first, this invite (not one) would stop the node.
        let joiner = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0", "--name", "joiner"],
            launcher: [
                "/usr/bin/env", "CREDENTIALS_DIRECTORY=\(credentials)",
                "GROUPMESH_INVITE=not-an-invite",
            ])
        nodes.append(joiner)
        try await nodes.waitForMesh(alive: 2, timeout: .seconds(60))
        #expect(try await joiner.status().`self`.session == inviter.status().`self`.session)

        let bad = NodeProcess.makeTemporaryDirectory("credentials-bad")
        defer { try? FileManager.default.removeItem(atPath: bad) }
        try Self.write("gm1-not-a-token\n", to: bad + "/groupmesh-invite")
        let refused = try ChildProcess.run(
            "/usr/bin/env",
            [
                "CREDENTIALS_DIRECTORY=\(bad)", NodeProcess.executable, "run", "--listen", "127.0.0.1:0",
                "--data-dir", NodeProcess.makeTemporaryDirectory("credentials-refused"),
            ])
        #expect(refused.status == 65, "a bad invite is bad input")
        #expect(refused.stderr.contains(bad + "/groupmesh-invite"), "\(refused.stderr)")
        #expect(refused.stderr.split(separator: "\n").count == 1, "one line: \(refused.stderr)")
    }

    @Test("with stdout not a terminal run prints no invite, only how to get one; groupmesh invite prints it")
    func noSecretOnAPipe() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], printInvite: false)
        defer { Task { await node.cleanUp() } }
        let listening = try await node.waitForLine(prefix: "listening:")
        let hint = try await node.waitForLine(prefix: "invite:")
        #expect(!hint.hasPrefix("gm1"), "\(hint)")
        #expect(hint.contains("groupmesh invite --data-dir \(node.dataDirectory)"), "\(hint)")
        #expect((try? InviteToken(parsing: hint)) == nil)

        let printed = try await NodeProcess.runCommand(["invite", "--data-dir", node.dataDirectory])
        #expect(printed.status == 0, "\(printed.stderr)")
        let token = try InviteToken(parsing: printed.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(token.addresses == [try PeerAddress(parsing: listening)])
        // Nothing the node wrote holds the token, nor any token.
        node.signal(SIGTERM)
        #expect(try await node.waitForExit() == 0)
        try await waitUntil("the node's output read to its end", timeout: .seconds(5)) { node.process.outputIsComplete }
        for output in [node.stdout, node.stderr] {
            #expect(!output.contains("gm1"), "\(output)")
            #expect(!output.contains(token.text))
        }
    }

    @Test("contrib/groupmesh.service passes systemd-analyze verify, where that tool exists")
    func systemdUnitVerifies() async throws {
        let candidates: [String] = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        let tool = candidates.first { access($0, X_OK) == 0 }
        guard let tool else {
            print("systemd-analyze not found: the unit is not checked here")
            return
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let unit = try String(contentsOf: root.appendingPathComponent("contrib/groupmesh.service"), encoding: .utf8)
        #expect(unit.contains("LoadCredential=groupmesh-invite:"))
        #expect(unit.contains("KillSignal=SIGTERM"))
        // The binary need not be installed, nor the man page: those lines are swapped out.
        let lines: [String] = unit.components(separatedBy: "\n").filter { !$0.hasPrefix("Documentation=") }
        let checked = lines.joined(separator: "\n")
            .replacingOccurrences(of: "/usr/local/bin/groupmesh", with: NodeProcess.executable)
        let directory = NodeProcess.makeTemporaryDirectory("unit")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Self.write(checked, to: directory + "/groupmesh.service")
        let result = try ChildProcess.run(tool, ["verify", directory + "/groupmesh.service"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "systemd-analyze found something: \(result.stderr)")
    }
}
