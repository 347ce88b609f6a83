import Foundation
import MeshCrypto
import MeshTestKit
import Testing

/// Port mapping with real routers: homes behind Linux NAT (`NATLab`) whose routers run
/// miniupnpd (UPnP IGD, NAT-PMP, PCP), and real `groupmesh` processes.
@Suite("Port mapping (network namespaces, miniupnpd)", .serialized)
struct PortMappingLabTests {
    /// `status --json`'s `portMapping`.
    struct Mapping: Decodable {
        var state: String
        var `protocol`: String?
        var externalAddress: String?
        var advertised: Bool
        var lifetime: Int?
        var expiresIn: Double?
        var reason: String?
        var requests: UInt64
        var answersIgnored: UInt64
        var answersRefused: UInt64
    }

    struct Report: Decodable {
        struct SelfInfo: Decodable { var candidates: [String] }
        var `self`: SelfInfo
        var portMapping: Mapping?
    }

    static func report(_ node: NodeProcess) async throws -> Report {
        let result = try await NodeProcess.runCommand(["status", "--json", "--data-dir", node.dataDirectory])
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8))
    }

    static func waitForMapping(
        _ node: NodeProcess, _ what: String, timeout: Duration = .seconds(20),
        _ condition: (Mapping) -> Bool
    ) async throws -> Mapping {
        var last: Mapping?
        do {
            try await waitUntil(what, timeout: timeout, every: .milliseconds(100)) {
                last = try await report(node).portMapping
                return last.map(condition) ?? false
            }
        } catch {
            throw NodeProcessError.timeout(
                "\(what): last \(String(describing: last)); log: "
                    + node.stderr.split(separator: "\n").suffix(5).joined(separator: " | "))
        }
        return try #require(last)
    }

    static let unavailable = NATLab.miniupnpdUnavailableReason

    /// The lab's routers as the other tests rely on them: natpmpc and upnpc on the home host get
    /// a mapping each, and a datagram from the internet to the router's public address and
    /// mapped port reaches the home host's socket through the home firewall.
    @Test(
        "lab self-test: miniupnpd maps through NAT-PMP and UPnP, and a datagram from outside reaches the home",
        .enabled(
            if: unavailable == nil && FileManager.default.isExecutableFile(atPath: "/usr/bin/natpmpc")
                && FileManager.default.isExecutableFile(atPath: "/usr/bin/upnpc"),
            Comment(rawValue: unavailable ?? "needs natpmpc and upnpc (apt-get install natpmpc miniupnpc); skipped")))
    func labSelfTest() async throws {
        let lab = try NATLab(publicHosts: 1, homes: [.endpointIndependent])
        defer { lab.tearDown() }
        let router = try lab.startMiniupnpd(home: 0)
        defer { router.stop() }
        let natpmp = try lab.run(
            on: .home(0), "/usr/bin/natpmpc", ["-g", router.gateway, "-a", "5000", "5000", "udp", "60"])
        #expect(natpmp.stdout.contains("Mapped public port 5000 protocol UDP to local port 5000"), "\(natpmp.stdout)")
        let url = try #require(router.descriptionURL)
        let upnp = try lab.run(
            on: .home(0), "/usr/bin/upnpc",
            ["-u", url, "-e", "lab", "-a", lab.address(.home(0)), "5001", "5001", "UDP"])
        #expect(upnp.stdout.contains("is redirected to internal \(lab.address(.home(0))):5001"), "\(upnp.stdout)")
        let redirections = try lab.redirections(home: 0)
        #expect(
            redirections.contains { $0.contains("dport 5000") } && redirections.contains { $0.contains("dport 5001") },
            "\(redirections)")
        for port: UInt16 in [5000, 5001] {
            let inside = try lab.udpSocket(on: .home(0), port: port)
            let outside = try lab.udpSocket(on: .publicHost(0), port: 0)
            defer { close(inside); close(outside) }
            #expect(
                Self.send(from: outside, to: lab.homes[0].publicAddress, port: port, expectingAt: inside),
                "a datagram to \(lab.homes[0].publicAddress):\(port) reaches the home host")
        }
    }

    /// Three homes, no public member: the first home's invite holds its router's mapping, and
    /// the others join through it.
    @Test(
        "three homes behind NAT, no public member: the invite holds the mapped address; all see each other, a message and a 20 MiB attachment cross",
        .enabled(if: unavailable == nil, Comment(rawValue: unavailable ?? "")))
    func threeHomesWithoutAPublicMember() async throws {
        let lab = try NATLab(publicHosts: 0, homes: [.endpointIndependent, .endpointIndependent, .endpointIndependent])
        var routers: [Miniupnpd] = []
        var nodes: [NodeProcess] = []
        defer {
            for node in nodes { node.signal(SIGKILL) }
            for node in nodes { Task { await node.cleanUp() } }
            for router in routers { router.stop() }
            lab.tearDown()
        }
        for index in lab.homes.indices { routers.append(try lab.startMiniupnpd(home: index)) }
        func run(_ name: String, home: Int, invite: String? = nil, lazy: Bool = false) throws -> NodeProcess {
            var arguments = ["run", "--listen", "0.0.0.0:7946", "--name", name, "--log-level", "info"]
            if let invite { arguments += ["--invite", invite] }
            if lazy { arguments.append("--lazy") }
            let node = try NodeProcess(arguments, launcher: lab.launcher(.home(home)))
            nodes.append(node)
            return node
        }
        let h1 = try run("h1", home: 0)
        // `run --print-invite` waits for the mapping: the invite printed holds it, first.
        let invite = try await h1.waitForLine(prefix: "invite:").trimmingCharacters(in: .whitespaces)
        let mapped = "\(lab.homes[0].publicAddress):7946"
        let addresses = try InviteToken(parsing: invite).addresses.map(\.description)
        #expect(addresses.first == mapped, "the invite's addresses: \(addresses)")
        let h1Mapping = try await Self.waitForMapping(h1, "h1 mapped") { $0.state == "mapped" }
        #expect(h1Mapping.protocol == "pcp" && h1Mapping.externalAddress == mapped && h1Mapping.advertised)
        #expect(h1Mapping.lifetime == 7200 && (h1Mapping.expiresIn ?? 0) > 7000)
        #expect(try await Self.report(h1).`self`.candidates.first == mapped)

        let h2 = try run("h2", home: 1, invite: invite, lazy: true)
        let h3 = try run("h3", home: 2, invite: invite, lazy: true)
        try await [h1, h2, h3].waitForMesh(alive: 3, timeout: .seconds(40))
        for (index, node) in [h2, h3].enumerated() {
            let mapping = try await Self.waitForMapping(node, "h\(index + 2) mapped") { $0.state == "mapped" }
            #expect(mapping.externalAddress == "\(lab.homes[index + 1].publicAddress):7946")
        }

        // A reliable message from h2 reaches h3.
        let listener = try NodeProcess(["listen", "--json"], dataDirectory: h3.dataDirectory, ownsDataDirectory: false)
        nodes.append(listener)
        _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
        let sent = try await NodeProcess.runCommand([
            "send", "--data-dir", h2.dataDirectory, "--to", "h3", "through the routers' mappings",
        ])
        #expect(sent.status == 0, "\(sent.stderr)")
        try await waitUntil("h3 heard h2", timeout: .seconds(20)) {
            NATLabTests.heard(listener).contains { $0.text == "through the routers' mappings" && $0.mode == "reliable" }
        }

        // 20 MiB attached at h1 (h2 and h3 are lazy: it comes from h1 only), fetched by h3.
        _ = try await NATLabTests.transfer(20 << 20, from: h1, to: h3)
    }

    /// A router with UPnP only: the mapping comes through UPnP IGD; deleted on the router (miniupnpd
    /// restarted), it is made again at the next renewal, and a member on the internet reaches the
    /// home through it.
    @Test(
        "UPnP only: mapped, deleted on the router, made again at the next renewal; reachable from outside; deleted at stop",
        .enabled(if: unavailable == nil, Comment(rawValue: unavailable ?? "")))
    func aDeletedMappingIsMadeAgain() async throws {
        let lab = try NATLab(publicHosts: 1, homes: [.endpointIndependent])
        var router = try lab.startMiniupnpd(home: 0, natpmp: false)
        var nodes: [NodeProcess] = []
        defer {
            for node in nodes { node.signal(SIGKILL) }
            for node in nodes { Task { await node.cleanUp() } }
            router.stop()
            lab.tearDown()
        }
        // A 6 s lease, renewed every 3 s (test-only: GROUPMESH_PORT_MAPPING_LIFETIME).
        let h1 = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "h1", "--log-level", "info"],
            launcher: lab.launcher(.home(0)) + ["/usr/bin/env", "GROUPMESH_PORT_MAPPING_LIFETIME=6"])
        nodes.append(h1)
        let mapped = "\(lab.homes[0].publicAddress):7946"
        let first = try await Self.waitForMapping(h1, "h1 mapped through UPnP") { $0.state == "mapped" }
        #expect(first.protocol == "upnp" && first.externalAddress == mapped && first.lifetime == 6, "\(first)")
        #expect(try lab.redirections(home: 0).contains { $0.contains("dport 7946") })

        // The router restarts: its redirections are gone (its chains are made anew), and only
        // h1's next renewal, asked of the new miniupnpd, brings the mapping back.
        router.stop()
        router = try lab.startMiniupnpd(home: 0, natpmp: false)
        try await waitUntil("h1's renewal maps again", timeout: .seconds(20), every: .milliseconds(100)) {
            try lab.redirections(home: 0).contains { $0.contains("dport 7946") }
        }
        #expect(router.log.contains("AddAnyPortMapping"), "the new miniupnpd was asked")
        let again = try await Self.waitForMapping(h1, "h1 still mapped") { $0.state == "mapped" }
        #expect(again.externalAddress == mapped)

        // A member on the internet joins through h1's invite, reaching it only through the mapping.
        let invite = try await h1.waitForLine(prefix: "invite:").trimmingCharacters(in: .whitespaces)
        let p = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "p", "--invite", invite, "--no-port-mapping"],
            launcher: lab.launcher(.publicHost(0)))
        nodes.append(p)
        try await [h1, p].waitForMesh(alive: 2, timeout: .seconds(30))
        let pMapping = try #require(try await Self.report(p).portMapping)
        #expect(pMapping.state == "disabled" && pMapping.reason?.contains("--no-port-mapping") == true, "\(pMapping)")

        // Stopped, h1 deletes its mapping on the way out.
        h1.signal(SIGTERM)
        #expect(try await h1.waitForExit(timeout: .seconds(20)) == 0)
        #expect(try !lab.redirections(home: 0).contains { $0.contains("dport 7946") }, "the mapping is deleted at stop")
    }

    /// A router without miniupnpd: the node says why it has no mapping, and runs on.
    @Test(
        "a router without port mapping: status says none and why, the node runs on; a public host asks nothing",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func aRouterWithoutPortMapping() async throws {
        let lab = try NATLab(publicHosts: 1, homes: [.endpointIndependent])
        var nodes: [NodeProcess] = []
        defer {
            for node in nodes { node.signal(SIGKILL) }
            for node in nodes { Task { await node.cleanUp() } }
            lab.tearDown()
        }
        let p = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "p"], launcher: lab.launcher(.publicHost(0)))
        nodes.append(p)
        let invite = try await p.waitForLine(prefix: "invite:").trimmingCharacters(in: .whitespaces)
        // On the internet itself there is no NAT to ask.
        let pMapping = try await Self.waitForMapping(p, "p needs none") { $0.state == "not-needed" }
        #expect(pMapping.requests == 0 && pMapping.reason?.contains("is public: no NAT to ask") == true, "\(pMapping)")
        let h1 = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "h1", "--invite", invite],
            launcher: lab.launcher(.home(0)))
        nodes.append(h1)
        let none = try await Self.waitForMapping(h1, "h1 gives up") { $0.state == "failed" }
        let reason = none.reason ?? ""
        #expect(reason.contains("pcp: no answer") && reason.contains("upnp: no answer to the SSDP search"), "\(reason)")
        #expect(none.externalAddress == nil && none.requests <= 16, "\(none)")
        let status = try await NodeProcess.runCommand(["status", "--data-dir", h1.dataDirectory])
        #expect(status.stdout.contains("port mapping: none (failed): pcp: no answer"), "\(status.stdout)")
        try await [p, h1].waitForMesh(alive: 2, timeout: .seconds(30))
    }

    /// Gateways that lie: one answers garbage, another nonce and impossible "successes" (lifetime
    /// 0, an external address of 127.0.0.1), one grants a mapping at a private address. Each lie
    /// is counted and logged once; nothing lied is advertised; the requests stay few; the nodes
    /// run on and meet.
    @Test(
        "gateways that lie (garbage, another nonce, lifetime 0, a loopback or private external address): counted, logged once, never advertised, requests bounded, the nodes run on",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func lyingGateways() async throws {
        let lab = try NATLab(publicHosts: 1, homes: [.endpointIndependent, .endpointIndependent])
        let impossible = try LyingGateway(lab: lab, home: 0, lie: .impossible)
        let privateExternal = try LyingGateway(lab: lab, home: 1, lie: .privateExternal)
        var nodes: [NodeProcess] = []
        defer {
            for node in nodes { node.signal(SIGKILL) }
            for node in nodes { Task { await node.cleanUp() } }
            impossible.stop()
            privateExternal.stop()
            lab.tearDown()
        }
        let p = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "p"], launcher: lab.launcher(.publicHost(0)))
        nodes.append(p)
        let invite = try await p.waitForLine(prefix: "invite:").trimmingCharacters(in: .whitespaces)
        let h1 = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "h1", "--invite", invite, "--log-level", "info"],
            launcher: lab.launcher(.home(0)))
        nodes.append(h1)
        let h2 = try NodeProcess(
            ["run", "--listen", "0.0.0.0:7946", "--name", "h2", "--invite", invite, "--log-level", "info"],
            launcher: lab.launcher(.home(1)))
        nodes.append(h2)

        // h1: every protocol fails, each for the lie it was told.
        let failed = try await Self.waitForMapping(h1, "h1 refuses every lie") { $0.state == "failed" }
        let reason = failed.reason ?? ""
        #expect(reason.contains("pcp: the gateway's success was none (lifetime 0"), "\(reason)")
        #expect(reason.contains("nat-pmp: the gateway mapped to 127.0.0.1, an address nobody can send to"), "\(reason)")
        #expect(failed.externalAddress == nil && !failed.advertised, "\(failed)")
        #expect(failed.answersRefused == 2 && failed.answersIgnored == 2, "\(failed)")
        // One round: a PCP request until the lie, two NAT-PMP requests, the SSDP searches.
        #expect(
            failed.requests <= 16 && impossible.requests <= 6,
            "\(failed.requests) requests, the gateway got \(impossible.requests)")
        #expect(Self.lines(h1.stderr, "port mapping: refused") == 2, "\(h1.stderr)")
        #expect(Self.lines(h1.stderr, "port mapping: ignored") == 2, "\(h1.stderr)")

        // h2: mapped, but at a private address: kept, not advertised, said why.
        let held = try await Self.waitForMapping(h2, "h2 holds the private mapping") { $0.state == "mapped" }
        #expect(held.externalAddress?.hasPrefix("10.200.0.7:") == true && !held.advertised, "\(held)")
        #expect(held.reason?.contains("is private") == true, "\(held)")

        try await [p, h1, h2].waitForMesh(alive: 3, timeout: .seconds(30))
        for node in [h1, h2] {
            let candidates = try await Self.report(node).`self`.candidates
            #expect(
                !candidates.contains {
                    $0.hasPrefix("127.") || $0.hasPrefix("10.200.") || $0.hasPrefix("198.51.100.250")
                },
                "a lie was advertised: \(candidates)")
        }
        for node in [h1, h2] {
            let invited = try await NodeProcess.runCommand(["invite", "--data-dir", node.dataDirectory])
            let line = invited.stdout.split(separator: "\n").first { $0.hasPrefix("gm") } ?? ""
            let addresses = try InviteToken(parsing: String(line)).addresses.map(\.description)
            #expect(
                !addresses.isEmpty && !addresses.contains { $0.hasPrefix("127.") || $0.hasPrefix("10.200.") },
                "an invite names a lie: \(addresses)")
        }
    }

    static func lines(_ text: String, _ fragment: String) -> Int {
        text.split(separator: "\n").count { $0.contains(fragment) }
    }

    /// Switched off by the flag or the config file's key, and off by itself on loopback.
    @Test("--no-port-mapping, the config file's \"port-mapping\" key, and a node on loopback ask for no mapping")
    func switchedOff() async throws {
        let configured = NodeProcess.makeTemporaryDirectory("port-mapping-off")
        try Data(#"{"port-mapping": false, "listen": "127.0.0.1:0"}"#.utf8).write(
            to: URL(fileURLWithPath: configured + "/config.json"))
        let off = try NodeProcess(["run"], dataDirectory: configured)
        let loopback = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--port-mapping"])
        defer { for node in [off, loopback] { Task { await node.cleanUp() } } }
        let offMapping = try await Self.waitForMapping(off, "off") { $0.state == "disabled" }
        #expect(
            offMapping.reason == "turned off (--no-port-mapping, or port-mapping false in config.json)"
                && offMapping.requests == 0)
        let loopbackMapping = try await Self.waitForMapping(loopback, "on loopback") { $0.state == "disabled" }
        #expect(loopbackMapping.reason?.contains("loopback") == true)
        let status = try await NodeProcess.runCommand(["status", "--data-dir", off.dataDirectory])
        #expect(
            status.stdout.contains(
                "port mapping: none (disabled): turned off (--no-port-mapping, or port-mapping false in config.json)"),
            "\(status.stdout)")

        let bad = NodeProcess.makeTemporaryDirectory("port-mapping-bad")
        defer { try? FileManager.default.removeItem(atPath: bad) }
        try Data(#"{"port-mapping": "no"}"#.utf8).write(to: URL(fileURLWithPath: bad + "/config.json"))
        let refused = try await NodeProcess.runCommand(["run", "--data-dir", bad])
        #expect(
            refused.status == 1 && refused.stderr.contains(#""port-mapping" in the config file"#), "\(refused.stderr)")
    }

    /// Sends one datagram from `socket` to `host:port`; true once `receiver` got it (a few tries).
    static func send(from socket: Int32, to host: String, port: UInt16, expectingAt receiver: Int32) -> Bool {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        for _ in 0..<5 {
            let byte: [UInt8] = [0x42]
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(socket, byte, 1, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            var poller = pollfd(fd: receiver, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 300) == 1 {
                var scratch = [UInt8](repeating: 0, count: 64)
                return recv(receiver, &scratch, scratch.count, 0) == 1 && scratch[0] == 0x42
            }
        }
        return false
    }
}
