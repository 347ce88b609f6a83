import Foundation
import MeshTestKit
import Testing

/// The NAT laboratory with real processes: homes behind Linux NAT routers (`NATLab`), each
/// home node joined with the invite of a member on the "internet".
@Suite("NAT laboratory (network namespaces, Linux NAT)", .serialized)
struct NATLabTests {
    struct Heard: Decodable { var fromName: String; var mode: String; var text: String? }

    static func heard(_ listener: NodeProcess) -> [Heard] {
        listener.stdout.split(separator: "\n").compactMap { try? JSONDecoder().decode(Heard.self, from: Data($0.utf8)) }
    }

    /// `name`'s entry in `status`.
    static func member(_ name: String, in status: NodeStatus) -> NodeStatus.MemberInfo? {
        status.members.first { $0.name == name }
    }

    /// Which of `publics` (name, id) carries our datagrams to `name`, while it is alive and relayed.
    static func relay(of name: String, in status: NodeStatus, publics: [(name: String, id: String)]) -> String? {
        guard let member = member(name, in: status), member.state == "alive", member.path == "relayed",
            let relay = member.relay
        else { return nil }
        return publics.first { $0.id == relay }?.name
    }

    static func punched(_ name: String, in status: NodeStatus) -> Bool {
        member(name, in: status).map { $0.state == "alive" && $0.path == "punched" } ?? false
    }

    static func counter(_ name: String, _ status: NodeStatus) -> Int {
        Int(status.counters[name]?.number ?? 0)
    }

    static func lines(_ text: String, containing fragment: String) -> Int {
        text.split(separator: "\n").count { $0.contains(fragment) }
    }

    /// Every router's UDP mappings, to explain a punch that failed.
    static func printMappings(_ lab: NATLab) {
        for index in lab.homes.indices {
            let entries = (try? lab.conntrackEntries(home: index)) ?? ["(conntrack -L failed)"]
            print(
                "natlab: router \(index) (\(lab.homes[index].publicAddress)) UDP mappings:\n  "
                    + entries.joined(separator: "\n  "))
        }
    }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.2f s", Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    /// One public member P (lazy: it holds no chunks, so the attachment can come only from h1) and
    /// two homes behind ordinary MASQUERADE: the homes reach each other only through a punched path.
    @Test(
        "two homes behind MASQUERADE: punched both ways, a message and a 50 MiB attachment cross; a flushed mapping heals, one that maps elsewhere is punched again; nobody dead; the path outlives the public member",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func twoHomesPunch() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.endpointIndependent, .endpointIndependent]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let p = try nodes.run("p", on: .publicHost(0), lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        let homesStarted = ContinuousClock.now
        let h1 = try nodes.run("h1", on: .home(0), invite: invite)
        let h2 = try nodes.run("h2", on: .home(1), invite: invite, lazy: true)

        // 1. A punched path each way, at the other home's router's public address.
        try await [p, h1, h2].waitForMesh(alive: 3, timeout: .seconds(30))
        let h1View: NodeStatus, h2View: NodeStatus
        do {
            h1View = try await h1.waitForStatus(timeout: .seconds(30), "h2 punched at h1") {
                Self.punched("h2", in: $0)
            }
            h2View = try await h2.waitForStatus(timeout: .seconds(30), "h1 punched at h2") {
                Self.punched("h1", in: $0)
            }
        } catch {
            Self.printMappings(lab)
            throw error
        }
        print(
            "natlab: both homes punched \(Self.seconds(ContinuousClock.now - homesStarted)) after the home nodes started"
        )
        #expect(
            Self.member("h2", in: h1View)?.pathAddress?.hasPrefix(lab.homes[1].publicAddress + ":") == true,
            "h1 reaches h2 at \(Self.member("h2", in: h1View)?.pathAddress ?? "-")")
        #expect(
            Self.member("h1", in: h2View)?.pathAddress?.hasPrefix(lab.homes[0].publicAddress + ":") == true,
            "h2 reaches h1 at \(Self.member("h1", in: h2View)?.pathAddress ?? "-")")
        // Each home hears its public address from two members (P and the other home): adopted.
        for (index, node) in [h1, h2].enumerated() {
            let status = try await node.waitForStatus(timeout: .seconds(20), "home \(index) adopts its public address")
            {
                $0.`self`.reflexiveAddress != nil
            }
            #expect(status.`self`.nat == "endpoint-independent", "home \(index): nat \(status.`self`.nat ?? "-")")
            #expect(
                status.`self`.reflexiveAddress?.hasPrefix(lab.homes[index].publicAddress + ":") == true,
                "home \(index): public address \(status.`self`.reflexiveAddress ?? "-")")
        }

        // 2. A reliable message from h1 reaches h2.
        let listener = try await nodes.listen(to: h2)
        let sent = try await NodeProcess.runCommand([
            "send", "--data-dir", h1.dataDirectory, "--to", "h2", "across two NATs",
        ])
        #expect(sent.status == 0, "\(sent.stderr)")
        try await waitUntil("h2 heard h1's message", timeout: .seconds(20)) {
            Self.heard(listener).contains { $0.text == "across two NATs" }
        }
        #expect(Self.heard(listener).filter { $0.text == "across two NATs" }.map(\.mode) == ["reliable"])

        // 3. 50 MiB attached at h1 (the only holder: P and h2 are lazy), fetched by h2 with get.
        let getTime = try await Self.transfer(50 << 20, from: h1, to: h2)
        print("natlab: get of 50 MiB across the punched path took \(Self.seconds(getTime))")
        let afterGet = try await h2.status()
        #expect(
            Self.punched("h1", in: afterGet),
            "h1's path at h2 after the get: \(Self.member("h1", in: afterGet).map { "\($0.state) \($0.path ?? "-")" } ?? "-")"
        )
        #expect(
            Self.counter("chunksFetched", afterGet) >= 50,
            "h2 fetched \(Self.counter("chunksFetched", afterGet)) chunks")
        // Punched, not relayed: the public member carried nothing for the homes.
        let pView = try await p.status()
        #expect(
            pView.relay("forwardedDatagrams") == 0 && afterGet.relay("receivedThroughRelays") == 0,
            "relayed: \(pView.relay("forwardedDatagrams")) datagrams through p")

        if let reason = NATLab.conntrackUnavailableReason {
            print("natlab: the expiring mappings (steps 4 and 5): \(reason)")
            return
        }
        // 4. h1's router forgets its mappings (conntrack -D). Linux gives the next datagram out
        // the same port again (it is free), so the path heals by itself: nothing to punch again,
        // and nobody is suspected or dead.
        let h1Listener = try await nodes.listen(to: h1)
        let h1Public = try #require(Self.member("h1", in: try await h2.status())?.pathAddress)
        var watch = PairWatch(lab: lab, h1: h1, h2: h2)
        try await watch.start()
        let flushed = try lab.flushConntrack(home: 0)
        #expect(flushed >= 2, "h1's router had \(flushed) UDP mappings (to P and to h2 at least)")
        try await watch.until("messages cross both ways after the flush", timeout: .seconds(30)) { one, two in
            guard Self.punched("h2", in: one), Self.member("h1", in: two)?.pathAddress == h1Public else { return false }
            return (try? await Self.exchange("after the flush", h1: h1, h2: h2, listeners: (h1Listener, listener)))
                == true
        }
        print("natlab: conntrack -D alone (\(flushed) mappings): \(watch.summary)")
        #expect(watch.deaths.isEmpty && watch.suspicionsRaised == (0, 0), "\(watch.summary)")
        #expect(watch.punchesAgain == 0, "a flush that gives the same port back needs no new punch: \(watch.summary)")

        // 5. The router maps elsewhere once its mappings are gone (a rebooted NAT): the homes
        // notice the silence, P introduces them again, and they punch the new mapping; nobody is
        // declared dead meanwhile.
        let newPort: UInt16 = 20_000
        try lab.mapToPort(home: 0, newPort)
        watch = PairWatch(lab: lab, h1: h1, h2: h2)
        try await watch.start()
        try lab.flushConntrack(home: 0)
        let moved = "\(lab.homes[0].publicAddress):\(newPort)"
        try await watch.until("punched again at h1's new mapping", timeout: .seconds(60)) { one, two in
            Self.punched("h2", in: one) && Self.punched("h1", in: two)
                && Self.member("h1", in: two)?.pathAddress == moved
        }
        print("natlab: conntrack -D, mapped elsewhere: \(watch.summary)")
        #expect(watch.punchesAgain > 0, "\(watch.summary)")
        // The path is gone for seconds here: a suspicion taken back is allowed (indirect probes
        // through P keep both alive; none was seen in this lab so far), a death is not.
        #expect(watch.deaths.isEmpty, "\(watch.summary)")
        #expect(try await Self.exchange("after the new mapping", h1: h1, h2: h2, listeners: (h1Listener, listener)))
        try await h1.waitForStatus(timeout: .seconds(30), "h1 adopts its new public address") {
            $0.`self`.reflexiveAddress == moved
        }

        // 6. The public member leaves: the punched path between the homes stays, and carries.
        let left = try await NodeProcess.runCommand(
            ["leave", "--now", "--data-dir", p.dataDirectory], timeout: .seconds(30))
        #expect(left.status == 0, "\(left.stderr)")
        for node in [h1, h2] {
            try await node.waitForStatus(timeout: .seconds(10), "p left") { Self.member("p", in: $0)?.state == "left" }
        }
        #expect(try await Self.exchange("without p", h1: h1, h2: h2, listeners: (h1Listener, listener)))
        let (one, two) = (try await h1.status(), try await h2.status())
        #expect(Self.punched("h2", in: one) && Self.punched("h1", in: two))
    }

    /// `size` random bytes attached at `holder`, fetched by `fetcher` with `get` (once it lists
    /// them) and compared; how long the `get` took.
    static func transfer(_ size: Int, from holder: NodeProcess, to fetcher: NodeProcess) async throws -> Duration {
        let file = NodeProcess.makeTemporaryDirectory("natlab-file") + "/attachment.bin"
        defer { try? FileManager.default.removeItem(atPath: (file as NSString).deletingLastPathComponent) }
        let bytes = try #require(FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: size))
        try bytes.write(to: URL(fileURLWithPath: file))
        let attach = try await NodeProcess.runCommand(
            ["attach", "--data-dir", holder.dataDirectory, file], timeout: .seconds(60))
        #expect(attach.status == 0, "\(attach.stderr)")
        let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try await waitUntil("the fetcher lists the attachment", timeout: .seconds(20), every: .milliseconds(50)) {
            let listed = try await NodeProcess.runCommand([
                "attachments", "--json", "--data-dir", fetcher.dataDirectory,
            ])
            return listed.stdout.contains(id)
        }
        let output = fetcher.dataDirectory + "/fetched.bin"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let started = ContinuousClock.now
        let get = try await NodeProcess.runCommand(
            ["get", "--data-dir", fetcher.dataDirectory, id, "--output", output],
            timeout: .seconds(120))
        let took = ContinuousClock.now - started
        #expect(get.status == 0, "\(get.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == bytes, "the fetched bytes differ")
        return took
    }

    /// A message each way (h1 → h2, h2 → h1), each heard within 10 s.
    static func exchange(
        _ text: String, h1: NodeProcess, h2: NodeProcess, names: (String, String) = ("h1", "h2"),
        listeners: (h1: NodeProcess, h2: NodeProcess)
    ) async throws -> Bool {
        for (from, to, listener) in [(h1, names.1, listeners.h2), (h2, names.0, listeners.h1)] {
            let sent = try await NodeProcess.runCommand([
                "send", "--data-dir", from.dataDirectory, "--to", to, "\(text) to \(to)",
            ])
            guard sent.status == 0 else { return false }
            try await waitUntil("\(to) heard '\(text)'", timeout: .seconds(10)) {
                heard(listener).contains { $0.text == "\(text) to \(to)" }
            }
        }
        return true
    }

    /// What h1 and h2 think of each other while a condition is awaited: every state and path
    /// seen (sampled every 100 ms), deaths, suspicions raised and punches begun meanwhile.
    struct PairWatch {
        let lab: NATLab
        let h1: NodeProcess
        let h2: NodeProcess
        var seen: [String: [String]] = ["h2 at h1": [], "h1 at h2": []]
        var suspicionsBefore = (0, 0), suspicionsRaised = (0, 0)
        var punchingBefore = (0, 0)
        var started = ContinuousClock.now, took: Duration = .zero

        init(lab: NATLab, h1: NodeProcess, h2: NodeProcess) { (self.lab, self.h1, self.h2) = (lab, h1, h2) }

        mutating func start() async throws {
            let (one, two) = (try await h1.status(), try await h2.status())
            suspicionsBefore = (
                NATLabTests.counter("suspicionsRaised", one), NATLabTests.counter("suspicionsRaised", two)
            )
            punchingBefore = (
                NATLabTests.lines(h1.stderr, containing: "punching"),
                NATLabTests.lines(h2.stderr, containing: "punching")
            )
            started = ContinuousClock.now
        }

        /// Punches begun by either since `start`.
        var punchesAgain: Int {
            NATLabTests.lines(h1.stderr, containing: "punching") - punchingBefore.0
                + NATLabTests.lines(h2.stderr, containing: "punching") - punchingBefore.1
        }

        var deaths: [String] {
            seen.flatMap { view, states in states.filter { $0.hasPrefix("dead") }.map { "\(view): \($0)" } }
        }

        var summary: String {
            "\(NATLabTests.seconds(took)); h1 raised \(suspicionsRaised.0) suspicions, h2 \(suspicionsRaised.1); "
                + "\(punchesAgain) punches begun; seen: \(seen.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.joined(separator: " → "))" }.joined(separator: "; "))"
        }

        /// Polls both statuses until `condition` holds (bounded), recording what they show.
        mutating func until(
            _ what: String, timeout: Duration,
            _ condition: (NodeStatus, NodeStatus) async -> Bool
        ) async throws {
            let deadline = ContinuousClock.now + timeout
            defer { took = ContinuousClock.now - started }
            while true {
                if let one = try? await h1.status(), let two = try? await h2.status() {
                    record("h2 at h1", NATLabTests.member("h2", in: one))
                    record("h1 at h2", NATLabTests.member("h1", in: two))
                    suspicionsRaised = (
                        NATLabTests.counter("suspicionsRaised", one) - suspicionsBefore.0,
                        NATLabTests.counter("suspicionsRaised", two) - suspicionsBefore.1
                    )
                    if await condition(one, two) { return }
                }
                guard ContinuousClock.now < deadline else {
                    NATLabTests.printMappings(lab)
                    throw NodeProcessError.timeout("\(what) within \(timeout): \(summary)")
                }
                try await Task.sleep(for: .milliseconds(100))
            }
        }

        private mutating func record(_ view: String, _ member: NodeStatus.MemberInfo?) {
            let state = member.map { "\($0.state)/\($0.path ?? "-") \($0.pathAddress ?? "-")" } ?? "missing"
            if seen[view]?.last != state { seen[view, default: []].append(state) }
        }
    }

    /// Two homes behind `MASQUERADE --random-fully` (s, h) and two public members (q0, q1, lazy
    /// like h: the attachment can come only from s). s knows its NAT is symmetric; s and h cannot
    /// punch, nor meet by a birthday round (each mapping is per destination on both sides; a
    /// symmetric home against an endpoint-independent one is `NATLabTests+Birthday`), so they talk
    /// through a public member, which carries sealed datagrams it cannot open; when that relay
    /// leaves they move to the other, and with none left they say unreachable.
    @Test(
        "two homes behind routers with no firewall of their own (MASQUERADE only): short-lived first punches open both mappings, the pair is punched, a message crosses, nothing relayed",
        .enabled(
            if: NATLab.isAvailable && NATLab.nftCommand != nil,
            Comment(rawValue: NATLab.unavailableReason ?? "the lab's ISP hop needs nft (apt-get install nftables)")))
    func routersWithoutAFirewallArePunched() async throws {
        let nodes = LabNodes(
            try NATLab(
                publicHosts: 1, homes: [.endpointIndependent, .endpointIndependent],
                routerInputFirewall: false))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let p = try nodes.run("p", on: .publicHost(0), lazy: true)
        let invite = try await p.waitForLine(prefix: "invite:")
        let h1 = try nodes.run("h1", on: .home(0), invite: invite)
        let h2 = try nodes.run("h2", on: .home(1), invite: invite)
        try await [p, h1, h2].waitForMesh(alive: 3, timeout: .seconds(30))
        do {
            _ = try await h1.waitForStatus(timeout: .seconds(40), "h2 punched at h1") { Self.punched("h2", in: $0) }
            _ = try await h2.waitForStatus(timeout: .seconds(40), "h1 punched at h2") { Self.punched("h1", in: $0) }
        } catch {
            Self.printMappings(lab)
            throw error
        }
        let listener = try await nodes.listen(to: h2)
        let sent = try await NodeProcess.runCommand([
            "send", "--data-dir", h1.dataDirectory, "--to", "h2", "no firewall",
        ])
        #expect(sent.status == 0, "\(sent.stderr)")
        try await waitUntil("h2 heard h1's message", timeout: .seconds(20)) {
            Self.heard(listener).contains { $0.text == "no firewall" }
        }
        let pView = try await p.status()
        #expect(pView.relay("forwardedDatagrams") == 0, "the public member relayed for the homes")
    }

    @Test(
        "a home behind two NATs (a carrier's and its own) and a home behind one, no public member, a STUN/TURN server: the home behind two learns the carrier's address, the pair meets and a message crosses both ways",
        .enabled(
            if: NATLab.isAvailable && LabCoturn.isAvailable,
            Comment(rawValue: NATLab.unavailableReason ?? LabCoturn.unavailableReason ?? "")))
    func doubleNAT() async throws {
        let nodes = LabNodes(
            try NATLab(
                publicHosts: 1, homes: [.endpointIndependent, .endpointIndependent],
                carrierNAT: [true, false]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let coturn = try await LabCoturn(lab: lab, publicHost: 0)
        defer { coturn.stop() }
        let servers = ["--stun", coturn.endpoint, "--turn", coturn.turnURL]
        let h1 = try nodes.run("h1", on: .home(0), extra: servers)
        let invite = try await h1.waitForLine(prefix: "invite:")
        let h2 = try nodes.run("h2", on: .home(1), invite: invite, extra: servers)
        try await [h1, h2].waitForMesh(alive: 2, timeout: .seconds(30))
        // The carrier's address, from the STUN server (the home router's own WAN address is private).
        _ = try await h1.waitForStatus(timeout: .seconds(20), "h1 learns the carrier's address") {
            $0.`self`.candidates?.contains { $0.hasPrefix(lab.homes[0].publicAddress + ":") } == true
        }
        let listeners = (h1: try await nodes.listen(to: h1), h2: try await nodes.listen(to: h2))
        #expect(try await Self.exchange("behind two NATs", h1: h1, h2: h2, listeners: listeners))
        let h2View = try await h2.status()
        print(
            "natlab: double NAT: h1 at h2 \(Self.member("h1", in: h2View).map { "\($0.path ?? "-") \($0.pathAddress ?? "-")" } ?? "-")"
        )
    }

    @Test(
        "two homes behind MASQUERADE --random-fully know their NAT is symmetric and are reached through a relay that cannot read it; the pair moves when the relay leaves",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func symmetricHomeIsRelayed() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 2, homes: [.symmetric, .symmetric]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let q0 = try nodes.run("q0", on: .publicHost(0), lazy: true)
        let invite = try await q0.waitForLine(prefix: "invite:")
        let q1 = try nodes.run("q1", on: .publicHost(1), invite: invite, lazy: true)
        let s = try nodes.run("s", on: .home(0), invite: invite)
        let h = try nodes.run("h", on: .home(1), invite: invite, lazy: true)
        try await [q0, q1, s, h].waitForMesh(alive: 4, timeout: .seconds(30))

        // 1. s knows its NAT: symmetric, no public address adopted (none would work).
        let status = try await s.waitForStatus(timeout: .seconds(30), "s knows its NAT is symmetric") {
            $0.`self`.nat == "symmetric"
        }
        #expect(status.`self`.reflexiveAddress == nil, "adopted \(status.`self`.reflexiveAddress ?? "-")")
        #expect(try await s.waitForLine(prefix: "nat:", timeout: .seconds(5), containing: "symmetric") == "symmetric")
        // Each public member reaches s where its own datagrams come from: the router, at two ports.
        let ports = try await [q0, q1].asyncMap { node in
            let status = try await node.waitForStatus(timeout: .seconds(10), "s reached at its router") {
                Self.member("s", in: $0)?.pathAddress?.hasPrefix(lab.homes[0].publicAddress + ":") == true
            }
            return Self.member("s", in: status)?.pathAddress ?? "-"
        }
        #expect(Set(ports).count == 2, "q0 and q1 reach s at \(ports)")

        // 2. s and h cannot punch: both are relayed, through one of the public members.
        let relayedStarted = ContinuousClock.now
        let publics = [("q0", q0), ("q1", q1)]
        let ids = try await publics.asyncMap { (name: $0.0, id: try await $0.1.status().`self`.id) }
        func relayed(_ name: String, in status: NodeStatus) -> String? {
            Self.relay(of: name, in: status, publics: ids)
        }
        let hView = try await h.waitForStatus(timeout: .seconds(60), "s relayed at h") { relayed("s", in: $0) != nil }
        _ = try await s.waitForStatus(timeout: .seconds(30), "h relayed at s") { relayed("h", in: $0) != nil }
        print("natlab: s and h relayed \(Self.seconds(ContinuousClock.now - relayedStarted)) after the mesh formed")
        let first = try #require(relayed("s", in: hView))

        // 3. Messages both ways, and 20 MiB from s (its only holder) fetched by h: all through relays.
        let hListener = try await nodes.listen(to: h)
        let sListener = try await nodes.listen(to: s)
        // The relays listen too: what they carry must never reach their own messengers.
        let relayListeners = try await publics.asyncMap { try await nodes.listen(to: $0.1) }
        #expect(try await Self.exchange("relayed", h1: s, h2: h, names: ("s", "h"), listeners: (sListener, hListener)))
        let size = 20 << 20
        let getTime = try await Self.transfer(size, from: s, to: h)
        print("natlab: get of 20 MiB through a relay took \(Self.seconds(getTime))")
        // The relays carried it sealed: their own stores, messengers and inner-datagram counters saw nothing.
        var carried = 0
        for (index, (name, node)) in publics.enumerated() {
            let view = try await node.status()
            carried += view.relay("forwardedBytes")
            #expect(view.relay("receivedThroughRelays") == 0 && Self.counter("chunksFetched", view) == 0, "\(name)")
            #expect(Self.heard(relayListeners[index]).isEmpty, "\(name) got a message it carried")
        }
        #expect(carried > size, "the relays carried \(carried) bytes")
        let hAfter = try await h.status()
        #expect(hAfter.relay("receivedThroughRelays") > 0 && hAfter.relay("sentThroughRelays") > 0)

        // 4. The relay leaves: the pair moves to the other public member within seconds.
        let (leavingName, leaving) = first == "q0" ? publics[0] : publics[1]
        let other = first == "q0" ? "q1" : "q0"
        let leaveStarted = ContinuousClock.now
        let left = try await NodeProcess.runCommand(
            ["leave", "--now", "--data-dir", leaving.dataDirectory], timeout: .seconds(30))
        #expect(left.status == 0, "\(leavingName): \(left.stderr)")
        try await h.waitForStatus(timeout: .seconds(10), "s relayed via \(other) at h") {
            relayed("s", in: $0) == other
        }
        try await s.waitForStatus(timeout: .seconds(10), "h relayed via \(other) at s") {
            relayed("h", in: $0) == other
        }
        print(
            "natlab: the pair moved to \(other) \(Self.seconds(ContinuousClock.now - leaveStarted)) after \(leavingName) left"
        )
        #expect(try await Self.exchange("moved", h1: s, h2: h, names: ("s", "h"), listeners: (sListener, hListener)))

        // 5. The last public member leaves: no relay is left, and h says so: s is unreachable, and
        // soon dead (nobody can probe it for h any more); either may be what a poll sees first.
        let (_, last) = first == "q0" ? publics[1] : publics[0]
        _ = try await NodeProcess.runCommand(
            ["leave", "--now", "--data-dir", last.dataDirectory], timeout: .seconds(30))
        let gone = try await h.waitForStatus(timeout: .seconds(10), "s unreachable or dead at h") {
            Self.member("s", in: $0).map { $0.path == "unreachable" || $0.state == "dead" } ?? false
        }
        let table = try await NodeProcess.runCommand(["status", "--data-dir", h.dataDirectory])
        let said = Self.member("s", in: gone)?.state == "dead" ? "dead" : "unreachable"
        #expect(table.stdout.contains("unreachable") || table.stdout.contains("dead"), "\(said): \(table.stdout)")
    }
}

extension NATLabTests {
    /// A public member without a default route (an offline LAN, a host with a broken uplink): a
    /// send to the home member's private address (its record's) fails with ENETUNREACH, which
    /// would close the node's UDP socket; the node must refuse that destination instead and go on.
    @Test(
        "a member with no route to another's private address keeps its socket: the mesh forms and messages cross",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func anUnroutableAddressDoesNotCloseTheSocket() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.endpointIndependent], defaultRoutes: false))
        defer { nodes.tearDown() }
        let p = try nodes.run("p", on: .publicHost(0))
        let invite = try await p.waitForLine(prefix: "invite:")
        let h = try nodes.run("h", on: .home(0), invite: invite)
        try await [p, h].waitForMesh(alive: 2, timeout: .seconds(30))
        let listener = try await nodes.listen(to: h)
        // Long enough for p to have tried h's record address (its first probes and gossip).
        try await p.waitForStatus(timeout: .seconds(10), "p refused a destination") {
            Self.counter("sendErrors", $0) > 0
        }
        let sent = try await NodeProcess.runCommand(["send", "--data-dir", p.dataDirectory, "--to", "h", "still here"])
        #expect(sent.status == 0, "\(sent.stderr)")
        try await waitUntil("h heard p", timeout: .seconds(10)) {
            Self.heard(listener).contains { $0.text == "still here" }
        }
        #expect(p.stderr.contains("not sending to 10.0.1.2:7946: no route to it"), "\(p.stderr.suffix(600))")
        #expect(try await p.status().members.contains { $0.name == "h" && $0.state == "alive" })
    }

    /// A public member whose firewall refuses what it sends to the home's private address (an
    /// outbound DROP rule: `sendmsg` fails with EPERM, which `connect` cannot foresee): NIO
    /// closes the socket, and the node opens it again on the same port and goes on.
    @Test(
        "a send an outbound firewall rule refuses closes the socket; the node reopens it on its port and the mesh goes on",
        .enabled(if: NATLab.isAvailable, Comment(rawValue: NATLab.unavailableReason ?? "")))
    func aSocketClosedByARefusedSendIsReopened() async throws {
        let nodes = LabNodes(try NATLab(publicHosts: 1, homes: [.endpointIndependent]))
        defer { nodes.tearDown() }
        let lab = nodes.lab
        let rule = try lab.run(
            on: .publicHost(0), NATLab.iptablesCommand ?? "iptables",
            ["-A", "OUTPUT", "-d", lab.homes[0].privateAddress, "-p", "udp", "-j", "DROP"])
        #expect(rule.status == 0, "\(rule.stderr)")
        let p = try nodes.run("p", on: .publicHost(0))
        let invite = try await p.waitForLine(prefix: "invite:")
        let h = try nodes.run("h", on: .home(0), invite: invite)
        try await [p, h].waitForMesh(alive: 2, timeout: .seconds(30))
        try await waitUntil("p reopened its socket", timeout: .seconds(15)) { p.stderr.contains("reopening it") }
        let listener = try await nodes.listen(to: h)
        let sent = try await NodeProcess.runCommand([
            "send", "--data-dir", p.dataDirectory, "--to", "h", "after the reopen",
        ])
        #expect(sent.status == 0, "\(sent.stderr)")
        try await waitUntil("h heard p", timeout: .seconds(10)) {
            Self.heard(listener).contains { $0.text == "after the reopen" }
        }
        let status = try await p.status()
        #expect(status.`self`.address.hasSuffix(":7946"), "\(status.`self`.address)")
        #expect(status.members.contains { $0.name == "h" && $0.state == "alive" })
    }
}

/// A lab and every process a test started in it: all killed, and the lab taken down, at the end.
final class LabNodes {
    let lab: NATLab
    private var processes: [NodeProcess] = []

    init(_ lab: NATLab) { self.lab = lab }

    /// `groupmesh run` on `host` at port 7946, logging at info (punches and relays are counted
    /// from its log).
    func run(
        _ name: String, on host: NATLab.Host, invite: String? = nil, lazy: Bool = false,
        extra: [String] = []
    ) throws -> NodeProcess {
        var arguments = ["run", "--listen", "0.0.0.0:7946", "--name", name, "--log-level", "info"] + extra
        if let invite { arguments += ["--invite", invite] }
        if lazy { arguments.append("--lazy") }
        let node = try NodeProcess(arguments, launcher: lab.launcher(host))
        processes.append(node)
        return node
    }

    /// `listen --json` on `node`'s data dir, once it is ready.
    func listen(to node: NodeProcess) async throws -> NodeProcess {
        let listener = try NodeProcess(
            ["listen", "--json"], dataDirectory: node.dataDirectory, ownsDataDirectory: false)
        processes.append(listener)
        _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
        return listener
    }

    func tearDown() {
        for process in processes { process.signal(SIGKILL) }
        for process in processes { Task { await process.cleanUp() } }
        lab.tearDown()
    }
}

private extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async throws -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
