import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Hole punching with whole nodes behind the simulator's NAT boxes: two homes that
/// share only one member on the open network, which introduces them; they punch, the first
/// authenticated datagram fixes the path, keepalives hold it. Replay with `SIM_SEED=N`.
@Suite("Hole punching in simulation")
struct HolePunchingSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    /// One member on the open network (the rendezvous, n0) and two homes (n1, n2) behind NAT
    /// boxes 0 and 1, both joining through it.
    static func mesh(seed: UInt64, first: SimNAT.Configuration, second: SimNAT.Configuration) -> SimMesh {
        AddressDiscoverySimulationTests.mesh(seed: seed, publics: 1, homes: [first, second])
    }

    /// Both sides of the pair hold a punched path to each other.
    static func punched(_ a: SimNode, _ b: SimNode) -> Bool {
        a.core.paths.state(of: b.id) == .punched && b.core.paths.state(of: a.id) == .punched
    }

    @Test(
        "two homes behind MASQUERADE, one member between them: introduced, punched, messages cross, the path holds for minutes",
        arguments: seeds)
    func twoHomesArePunchedThroughTheMemberBetweenThem(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed: seed, first: .masquerade, second: .masquerade)
        let (a, b) = (mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        let publicA = SimAddress(natHost: 0, port: SimAddress.simulatedPort).peerAddress
        let publicB = SimAddress(natHost: 1, port: SimAddress.simulatedPort).peerAddress
        let outcome = mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(250)) { _ in Self.punched(a, b) }
        #expect(
            outcome == .satisfied,
            "\(replay): A→B \(a.core.paths.state(of: b.id)), B→A \(b.core.paths.state(of: a.id)) relayed \(a.core.counters.relayedSent)/\(b.core.counters.relayedSent) failed \(a.core.paths.punchesFailed)/\(b.core.paths.punchesFailed)"
        )
        #expect(
            a.core.pathAddress(of: b.id) == publicB, "\(replay): \(String(describing: a.core.pathAddress(of: b.id)))")
        #expect(b.core.pathAddress(of: a.id) == publicA, "\(replay)")
        #expect(a.core.paths.punchesSucceeded >= 1 && b.core.paths.punchesSucceeded >= 1, "\(replay)")

        a.sendMessage([1], to: [b.id], mode: .reliable)
        b.sendMessage([2], to: [a.id], mode: .reliable)
        // Minutes with no traffic of the application's: keepalives and probes hold the mappings
        // (30 s each) open.
        mesh.simulator.run(for: .seconds(180))
        #expect(b.reliableReceived[a.id] == [[1]], "\(replay)")
        #expect(a.reliableReceived[b.id] == [[2]], "\(replay)")
        #expect(Self.punched(a, b), "\(replay): the path did not hold")
        a.sendMessage([3], to: [b.id], mode: .reliable)
        mesh.simulator.run(for: .seconds(5))
        #expect(b.reliableReceived[a.id] == [[1], [3]], "\(replay)")
        #expect(mesh.deaths.count == 0, "\(replay): \(mesh.deaths.count) deaths")
        // Each home now has two members that see it at its public address: it adopted it.
        #expect(a.core.addressDiscovery.reflexive == publicA, "\(replay)")
        #expect(a.core.natBehaviour == .endpointIndependent, "\(replay)")
    }

    @Test(
        "a NAT that forgets its mappings (conntrack flushed) and maps again elsewhere: the pair falls silent, is introduced, punches again and talks, and nobody is declared dead",
        arguments: seeds)
    func aFlushedMappingIsPunchedAgain(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let moving = SimNAT.Configuration(preservesPort: false)
        let mesh = Self.mesh(seed: seed, first: moving, second: moving)
        let (a, b) = (mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        #expect(
            mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(250)) { _ in Self.punched(a, b) }
                == .satisfied,
            "\(replay)")
        let before = a.core.paths.punchesSucceeded + b.core.paths.punchesSucceeded
        let old = a.core.pathAddress(of: b.id)
        mesh.simulator.flushNAT(1)
        mesh.simulator.run(for: .seconds(40))
        // B's NAT mapped it elsewhere; A found it there through a new punch (or, until then, through
        // the member between them, which probes for both and may relay).
        let moved = a.core.pathAddress(of: b.id)
        #expect(
            moved != old && moved.flatMap(SimAddress.init(peerAddress:))?.isNATPublic == true,
            "\(replay): \(String(describing: old)) → \(String(describing: moved))")
        #expect(a.core.paths.punchesSucceeded + b.core.paths.punchesSucceeded > before, "\(replay): not punched again")
        #expect(a.membership.member(b.id)?.status == .alive && b.membership.member(a.id)?.status == .alive, "\(replay)")
        #expect(mesh.deaths.count == 0, "\(replay): \(mesh.deaths.count) deaths")
        // The lost path shortened the keepalives: the next mapping is held more often.
        #expect(a.core.paths.punchedPathsLost + b.core.paths.punchedPathsLost >= 1, "\(replay)")
        #expect(
            min(a.core.paths.keepaliveInterval, b.core.paths.keepaliveInterval) < a.core.paths.settings.keepalive,
            "\(replay)")
        a.sendMessage([7], to: [b.id], mode: .reliable)
        b.sendMessage([8], to: [a.id], mode: .reliable)
        mesh.simulator.run(for: .seconds(5))
        #expect(b.reliableReceived[a.id]?.last == [7], "\(replay)")
        #expect(a.reliableReceived[b.id]?.last == [8], "\(replay)")
    }

    @Test(
        "behind a symmetric NAT the punch fails within its budget, and nobody is declared dead",
        arguments: seeds)
    func aSymmetricNATDefeatsThePunchWithinItsBudget(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed: seed, first: .symmetric, second: .masquerade)
        let (a, b) = (mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        mesh.simulator.run(for: .seconds(60))
        #expect(a.core.paths.state(of: b.id) != .punched, "\(replay)")
        #expect(b.core.paths.state(of: a.id) != .punched, "\(replay)")
        let failed = a.core.paths.punchesFailed + b.core.paths.punchesFailed
        // Tries for a member at least 5 s apart, each 10 rounds to at most 4 addresses.
        #expect(failed >= 1 && failed <= 2 * 12, "\(replay): \(failed) punches failed")
        #expect(mesh.deaths.count == 0, "\(replay): \(mesh.deaths.count) deaths")
    }

    @Test(
        "a member that introduces others to a bogus address, again and again, neither moves a path nor floods it",
        arguments: seeds)
    func forgedIntroductionsMoveNoPath(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = AddressDiscoverySimulationTests.mesh(seed: seed, publics: 3, homes: [])
        let victim = mesh.node(SimAddress(1))
        let peer = mesh.node(SimAddress(2))
        let liar = mesh.node(SimAddress(0))
        let bogus = SimAddress(999).peerAddress  // nobody there
        for step in 0..<100 {
            liar.plan(at: .zero + .seconds(3) + .milliseconds(200 * step)) { node in
                node.inject(
                    [.punchIntroduction(PunchIntroduction(peer: peer.id, addresses: [bogus]))],
                    to: victim.address, member: victim.id)
            }
        }
        mesh.simulator.resetStatistics()
        mesh.simulator.run(for: .seconds(25))
        #expect(victim.core.pathAddress(of: peer.id) == peer.address.peerAddress, "\(replay)")
        // 100 introductions in 20 s: one punch of 10 datagrams per 5 s at most.
        let toBogus = mesh.simulator.statistics.dropped.unknownDestination
        #expect(toBogus > 0 && toBogus <= 5 * 10, "\(replay): \(toBogus) datagrams to the bogus address")
        victim.sendMessage([5], to: [peer.id], mode: .reliable)
        mesh.simulator.run(for: .seconds(5))
        #expect(peer.reliableReceived[victim.id] == [[5]], "\(replay)")
        #expect(mesh.deaths.count == 0, "\(replay)")
    }
}
