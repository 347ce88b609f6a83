import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// LAN discovery (PROTOCOL.md §1e): the announcement's format and keys, when a node announces
/// and acts, and whole nodes behind one NAT box meeting on their LAN. Replay with `SIM_SEED=N`.
@Suite("LAN discovery")
struct LANDiscoveryTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)
    static let secret = try! SessionSecret(bytes: [UInt8](repeating: 7, count: 32))  // safe: 32 bytes
    static let node = NodeID(high: 0x0102_0304_0506_0708, low: 0x1112_1314_1516_1718)

    // MARK: the announcement

    @Test("an announcement decodes with its session's keys only; the tag names no secret")
    func anAnnouncementIsTheSessionsOnly() {
        let keys = LANAnnouncement.Keys(secret: Self.secret)
        let bytes = LANAnnouncement(node: Self.node, port: 7946).encoded(with: keys)
        #expect(bytes.count == LANAnnouncement.byteCount)
        #expect(LANAnnouncement(decoding: bytes, with: keys) == LANAnnouncement(node: Self.node, port: 7946))
        let other = LANAnnouncement.Keys(secret: .generate())
        #expect(LANAnnouncement(decoding: bytes, with: other) == nil, "another session's")
        #expect(!keys.tag.isEmpty && !Self.secret.bytes.starts(with: keys.tag))
        #expect(Array(bytes[4..<12]) == keys.tag)
        #expect(!Array(bytes).contains(subsequence: Self.secret.bytes.prefix(8)))
    }

    @Test("any flipped bit, any other length, a zero port: not an announcement")
    func damagedAnnouncementsAreRefused() {
        let keys = LANAnnouncement.Keys(secret: Self.secret)
        let bytes = LANAnnouncement(node: Self.node, port: 7946).encoded(with: keys)
        for index in bytes.indices {
            var damaged = bytes
            damaged[index] ^= 0x10
            #expect(LANAnnouncement(decoding: damaged, with: keys) == nil, "byte \(index)")
        }
        #expect(LANAnnouncement(decoding: Array(bytes.dropLast()), with: keys) == nil)
        #expect(LANAnnouncement(decoding: bytes + [0], with: keys) == nil)
        #expect(LANAnnouncement(decoding: [], with: keys) == nil)
        let zeroPort = LANAnnouncement(node: Self.node, port: 0).encoded(with: keys)
        #expect(LANAnnouncement(decoding: zeroPort, with: keys) == nil)
    }

    @Test("random bytes on the port never decode (and never crash)")
    func randomBytesAreNotAnnouncements() {
        var random = SeededGenerator(seed: 0x1A2B)
        let keys = LANAnnouncement.Keys(secret: Self.secret)
        for _ in 0..<2_000 {
            let count = Int(random.next(below: 80))
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if count >= 12, random.next(below: 2) == 0 {
                bytes.replaceSubrange(0..<12, with: LANAnnouncement.magic + keys.tag)
            }
            #expect(LANAnnouncement(decoding: bytes, with: keys) == nil)
        }
    }

    // MARK: when

    @Test("announces at start, a second later, then every interval; answers at most every answer interval")
    func theScheduleIsBounded() {
        let start = MeshInstant.zero + .seconds(100)
        var discovery = LANDiscovery(settings: .init(), now: start)
        func due(_ at: MeshInstant) -> Bool { discovery.announcementDue(now: at) }
        func answers(_ at: MeshInstant) -> Bool { discovery.mayAnswer(now: at) }
        #expect(due(start))
        #expect(!due(start + .milliseconds(999)))
        #expect(due(start + .seconds(1)))
        #expect(discovery.nextAnnouncement == start + .seconds(31))
        #expect(!due(start + .seconds(30)))
        #expect(answers(start + .seconds(10)))
        #expect(discovery.nextAnnouncement == start + .seconds(10), "an answer moves the next announcement up")
        #expect(!answers(start + .seconds(11)))
        #expect(due(start + .seconds(10)))
        var off = LANDiscovery(
            settings: {
                var s = LANDiscovery.Settings(); s.enabled = false; return s
            }(), now: start)
        let offActs =
            off.announcementDue(now: start) || off.mayAnswer(now: start) || off.mayAct(on: Self.node, now: start)
        #expect(!offActs)
    }

    @Test("one node is acted on at most every few seconds, and only so many nodes are tracked")
    func actingIsBoundedPerNodeAndInAll() {
        var settings = LANDiscovery.Settings()
        settings.maxTracked = 4
        let start = MeshInstant.zero
        var discovery = LANDiscovery(settings: settings, now: start)
        func acts(_ node: NodeID, _ at: MeshInstant) -> Bool { discovery.mayAct(on: node, now: at) }
        #expect(acts(Self.node, start))
        #expect(!acts(Self.node, start + .seconds(4)))
        #expect(acts(Self.node, start + .seconds(5)))
        let others = (1...10).map { NodeID(high: 9, low: UInt64($0)) }
        let taken = others.filter { acts($0, start + .seconds(6)) }
        #expect(taken.count == 3, "the table holds 4 nodes while they are fresh")
        #expect(acts(others[9], start + .seconds(20)), "stale entries make room")
    }

    // MARK: whole nodes

    static func lanConfiguration() -> SimNode.Configuration {
        var configuration = SimNode.Configuration()
        configuration.settings.lanDiscovery.enabled = true
        return configuration
    }

    @Test("a joiner whose invite names only a dead address joins through a member heard on its LAN", arguments: seeds)
    func aJoinerFindsAMemberOnItsLAN(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, configuration: Self.lanConfiguration())
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        // Nobody listens at n5: the address in the invite is stale (the member moved on its LAN).
        let joiner = mesh.addNode(joiningThrough: [SimAddress(5)], at: .zero + .seconds(2))
        mesh.simulator.addNAT(.masquerade, for: [first.address, joiner.address])
        let outcome = mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            joiner.membership.member(first.id)?.status == .alive && first.membership.member(joiner.id)?.status == .alive
        }
        #expect(outcome == .satisfied, "\(replay): joining \(joiner.core.phase)")
        #expect(joiner.core.counters.lan.announcementsHeard >= 1, "\(replay)")
        joiner.sendMessage([1], to: [first.id], mode: .reliable)
        mesh.simulator.run(for: .seconds(3))
        #expect(first.reliableReceived[joiner.id] == [[1]], "\(replay)")
    }

    @Test(
        "a member announced at another LAN address than its path is punched there; a punch nobody answers moves nothing",
        arguments: seeds)
    func anAnnouncedAddressIsPunchedNotTrusted(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, configuration: Self.lanConfiguration())
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let second = mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(100))
        mesh.simulator.addNAT(.masquerade, for: [first.address, second.address])
        // Past the early announcements (each member is acted on at most every 5 s).
        mesh.simulator.run(for: .seconds(10))
        #expect(first.core.pathAddress(of: second.id) == second.address.peerAddress, "\(replay)")
        // Made with the session's keys (a member's, or replayed), naming a port nobody listens on.
        let keys = LANAnnouncement.Keys(secret: mesh.session)
        let elsewhere = LANAnnouncement(node: second.id, port: 4000).encoded(with: keys)
        let strayBefore = mesh.simulator.statistics.dropped.unknownDestination
        mesh.simulator.injectMulticast(elsewhere, from: second.address)
        mesh.simulator.run(for: .seconds(5))
        #expect(first.core.counters.lan.membersMet == 1, "\(replay)")
        let punches = mesh.simulator.statistics.dropped.unknownDestination - strayBefore
        #expect(
            (1...40).contains(punches), "\(replay): \(punches) punches to port 4000 (a punch is at most 40 datagrams)")
        #expect(first.core.pathAddress(of: second.id) == second.address.peerAddress, "\(replay): the path moved")
        #expect(mesh.deaths.isEmpty, "\(replay)")
    }

    @Test("forged and stray datagrams on the LAN port are counted and change nothing", arguments: seeds)
    func forgedAnnouncementsAreIgnored(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, configuration: Self.lanConfiguration())
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let second = mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(100))
        mesh.simulator.addNAT(.masquerade, for: [first.address, second.address])
        mesh.simulator.run(for: .seconds(5))
        let other = LANAnnouncement.Keys(secret: .generate())
        let forged = LANAnnouncement(node: first.id, port: 4000).encoded(with: other)
        for _ in 0..<50 { mesh.simulator.injectMulticast(forged, from: second.address) }
        mesh.simulator.injectMulticast([1, 2, 3], from: second.address)
        mesh.simulator.run(for: .seconds(2))
        #expect(first.core.counters.lan.announcementsIgnored >= 51, "\(replay)")
        #expect(first.core.pathAddress(of: second.id) == second.address.peerAddress, "\(replay)")
    }
}

private extension Array where Element == UInt8 {
    func contains(subsequence: some Collection<UInt8>) -> Bool {
        let needle = Array(subsequence)
        guard !needle.isEmpty, needle.count <= count else { return false }
        return (0...(count - needle.count)).contains { Array(self[$0..<($0 + needle.count)]) == needle }
    }
}
