import Foundation
import MeshTestKit
import Testing

extension NATLabTests {
    /// A home behind `MASQUERADE --random-fully` (s) and one behind ordinary MASQUERADE with a
    /// firewall (h), no port mapping, two public members (lazy) that tell each home what its NAT
    /// is. Ordinary punches cannot work (s's router maps each destination elsewhere), so the pair
    /// starts relayed; a birthday round (s opens many sockets towards h, h probes s's router at
    /// random ports) finds one of s's mappings, and the pair is punched, with no relay between.
    @Test(
        "a symmetric home and a port-restricted home, no port mapping: relayed at first, a birthday round punches the pair, a message crosses both ways",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func symmetricAgainstPortRestrictedIsPunchedByBirthday() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 2, homes: [.symmetric, .endpointIndependent]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let q0 = try nodes.run("q0", on: .publicHost(0), lazy: true)
        let invite = try await q0.waitForLine(prefix: "invite:")
        let q1 = try nodes.run("q1", on: .publicHost(1), invite: invite, lazy: true)
        let s = try nodes.run("s", on: .home(0), invite: invite)
        let h = try nodes.run("h", on: .home(1), invite: invite)
        try await [q0, q1, s, h].waitForMesh(alive: 4, timeout: .seconds(30))
        let formed = ContinuousClock.now
        do {
            // A round hits about 98 times in 100; the next one comes 30 s later: time for two.
            _ = try await h.waitForStatus(timeout: .seconds(80), "s punched at h") { Self.punched("s", in: $0) }
            _ = try await s.waitForStatus(timeout: .seconds(10), "h punched at s") { Self.punched("h", in: $0) }
        } catch {
            Self.printMappings(lab)
            for (name, node) in [("s", s), ("h", h)] {
                let lines = node.stderr.split(separator: "\n").filter { !$0.contains("port mapping") }
                print("natlab: \(name): " + lines.suffix(40).joined(separator: "\n  "))
            }
            throw error
        }
        print("natlab: birthday: s and h punched \(Self.seconds(ContinuousClock.now - formed)) after the mesh formed")
        let (sView, hView) = (try await s.status(), try await h.status())
        for (name, view, node) in [("s", sView, s), ("h", hView, h)] {
            let lines = node.stderr.split(separator: "\n").filter { $0.contains("birthday") }.map { $0.suffix(160) }
            let keys = [
                "roundsTried", "roundsSucceeded", "probesSent", "socketsOpened", "socketsFailed", "socketsHit",
                "routes",
            ]
            print(
                "natlab: birthday: \(name): " + keys.map { "\($0) \(view.birthday($0))" }.joined(separator: ", ")
                    + "\n  " + lines.joined(separator: "\n  "))
        }
        #expect(sView.birthday("roundsSucceeded") >= 1 && hView.birthday("roundsSucceeded") >= 1)
        // s is the hard side (its NAT is symmetric): it opened sockets, h probed. (Usually one of
        // s's sockets is hit; about once in 257 rounds a probe lands first on the mapping s's own
        // socket made towards h, which is as good.)
        #expect(sView.birthday("socketsOpened") >= 1 && sView.birthday("probesSent") == 0)
        #expect(
            hView.birthday("probesSent") > 0
                && hView.birthday("probesSent") <= 1024 * max(1, hView.birthday("roundsTried")))
        #expect(
            Self.member("s", in: hView)?.pathAddress?.hasPrefix(lab.homes[0].publicAddress + ":") == true,
            "\(Self.member("s", in: hView)?.pathAddress ?? "-")")
        #expect(Self.member("h", in: sView)?.pathAddress?.hasPrefix(lab.homes[1].publicAddress + ":") == true)
        let listeners = (h1: try await nodes.listen(to: s), h2: try await nodes.listen(to: h))
        let relayedBefore = hView.relay("receivedThroughRelays")
        #expect(try await Self.exchange("birthday", h1: s, h2: h, names: ("s", "h"), listeners: listeners))
        let after = try await h.status()
        #expect(Self.punched("s", in: after), "\(Self.member("s", in: after).map { "\($0.path ?? "-")" } ?? "-")")
        #expect(after.relay("receivedThroughRelays") - relayedBefore <= 2, "the messages came through a relay")
    }
}

extension NATLabTests {
    /// The same pair with no public member: they meet through a real coturn (STUN and TURN), the
    /// leader's punch for a direct path fails 35 s later, and a birthday round through TURN
    /// punches the pair. About 45 s: run only with `NATLAB_SLOW=1`.
    @Test(
        "a symmetric home and a port-restricted home, no public member, coturn: from TURN to punched by a birthday round",
        .enabled(
            if: NATLab.isAvailable && LabCoturn.isAvailable
                && ProcessInfo.processInfo.environment["NATLAB_SLOW"] == "1",
            Comment(rawValue: NATLab.unavailableReason ?? LabCoturn.unavailableReason ?? "NATLAB_SLOW=1 runs it")))
    func symmetricAgainstPortRestrictedThroughTurnIsPunchedByBirthday() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.symmetric, .endpointIndependent]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let coturn = try await LabCoturn(lab: lab, publicHost: 0)
        defer { coturn.stop() }
        let servers = ["--stun", coturn.endpoint, "--turn", coturn.turnURL]
        let h = try nodes.run("h", on: .home(1), extra: servers + ["--print-invite"])
        let invite = try await h.waitForLine(prefix: "invite:")
        let s = try nodes.run("s", on: .home(0), invite: invite, extra: servers + ["--print-invite"])
        try await [s, h].waitForMesh(alive: 2, timeout: .seconds(30))
        let formed = ContinuousClock.now
        do {
            // Punched at the other's router: a path still on the TURN server is not what this is about.
            _ = try await h.waitForStatus(timeout: .seconds(70), "s punched at h") {
                Self.punched("s", in: $0)
                    && Self.member("s", in: $0)?.pathAddress?.hasPrefix(coturn.address + ":") == false
            }
            _ = try await s.waitForStatus(timeout: .seconds(10), "h punched at s") {
                Self.punched("h", in: $0)
                    && Self.member("h", in: $0)?.pathAddress?.hasPrefix(coturn.address + ":") == false
            }
        } catch {
            Self.printMappings(lab)
            for (name, node) in [("s", s), ("h", h)] {
                if let view = try? await node.status() {
                    let keys = [
                        "roundsTried", "probesSent", "socketsOpened", "socketsFailed", "socketsHit", "strayDatagrams",
                    ]
                    print(
                        "natlab: \(name): nat \(view.`self`.nat ?? "-") "
                            + keys.map { "\($0) \(view.birthday($0))" }.joined(separator: ", "))
                }
                let lines = node.stderr.split(separator: "\n").filter { !$0.contains("port mapping") }
                print("natlab: \(name): " + lines.suffix(40).joined(separator: "\n  "))
            }
            throw error
        }
        print(
            "natlab: birthday through TURN: punched \(Self.seconds(ContinuousClock.now - formed)) after the mesh formed"
        )
        let (sView, hView) = (try await s.status(), try await h.status())
        #expect(sView.birthday("roundsSucceeded") >= 1 && hView.birthday("roundsSucceeded") >= 1)
        // Where each sends to the other now: the other's router, not the TURN server.
        #expect(
            Self.member("s", in: hView)?.pathAddress?.hasPrefix(lab.homes[0].publicAddress + ":") == true,
            "\(Self.member("s", in: hView)?.pathAddress ?? "-")")
        #expect(
            Self.member("h", in: sView)?.pathAddress?.hasPrefix(lab.homes[1].publicAddress + ":") == true,
            "\(Self.member("h", in: sView)?.pathAddress ?? "-")")
    }
}
