import MeshCore
import MeshTestKit
import Testing

/// The simulated NAT box: its mappings, filters and timeouts alone (`SimNAT`), then in the
/// simulated network (`Simulator.addNAT`).
@Suite struct SimNATTests {
    static let inside = SimAddress(0)
    static let peer = SimAddress(1)
    static let other = SimAddress(2)

    // MARK: the box alone

    @Test func masqueradeKeepsOnePublicPortForEveryDestination() {
        var nat = SimNAT(number: 0, configuration: .masquerade, seed: 1)
        let first = nat.outbound(from: Self.inside, to: Self.peer, now: .zero)
        let second = nat.outbound(from: Self.inside, to: Self.other, now: .ms(10))
        #expect(first == second)
        #expect(first.isNATPublic)
        // MASQUERADE keeps the inside port when it is free.
        #expect(first.port == Self.inside.port)
        // A second inside host with the same port gets another one.
        let neighbour = nat.outbound(from: SimAddress(3), to: Self.peer, now: .ms(20))
        #expect(neighbour.port != first.port)
    }

    @Test func aMappingMadeAgainMovesWhenThePortIsNotPreserved() {
        var nat = SimNAT(number: 0, configuration: .init(preservesPort: false), seed: 1)
        let first = nat.outbound(from: Self.inside, to: Self.peer, now: .zero)
        #expect(first.port != Self.inside.port)
        nat.flush()
        let again = nat.outbound(from: Self.inside, to: Self.peer, now: .ms(10))
        #expect(again != first)
        #expect(nat.inbound(from: Self.peer, toPort: first.port, now: .ms(20)) == nil)
    }

    @Test func symmetricMappingTakesANewPortPerDestination() {
        var nat = SimNAT(number: 0, configuration: .symmetric, seed: 1)
        let first = nat.outbound(from: Self.inside, to: Self.peer, now: .zero)
        let second = nat.outbound(from: Self.inside, to: Self.other, now: .ms(10))
        let again = nat.outbound(from: Self.inside, to: Self.peer, now: .ms(20))
        #expect(first != second)
        #expect(first == again, "one destination keeps its mapping while it lives")
        #expect(
            nat.inbound(from: Self.peer, toPort: second.port, now: .ms(30)) == nil,
            "a mapping made for one destination lets only that destination in")
        #expect(nat.inbound(from: Self.other, toPort: second.port, now: .ms(30)) == Self.inside)
    }

    @Test func filteringLetsInOnlyWhereTheInsideHostSent() {
        var nat = SimNAT(number: 0, configuration: .masquerade, seed: 1)
        let mapped = nat.outbound(from: Self.inside, to: Self.peer, now: .zero)
        #expect(nat.inbound(from: Self.peer, toPort: mapped.port, now: .ms(1)) == Self.inside)
        #expect(nat.inbound(from: Self.other, toPort: mapped.port, now: .ms(1)) == nil, "never sent to")
        #expect(
            nat.inbound(from: Self.peer.with(port: 9999), toPort: mapped.port, now: .ms(1)) == nil,
            "the same host from another port is another endpoint")
        #expect(nat.inbound(from: Self.peer, toPort: mapped.port &+ 1, now: .ms(1)) == nil, "no such mapping")

        var open = SimNAT(number: 0, configuration: .init(filtering: .endpointIndependent), seed: 1)
        let port = open.outbound(from: Self.inside, to: Self.peer, now: .zero).port
        #expect(
            open.inbound(from: Self.other, toPort: port, now: .ms(1)) == Self.inside,
            "a full cone lets anyone in once the mapping exists")
    }

    @Test func mappingsExpireUnlessOutboundTrafficRefreshesThem() {
        var nat = SimNAT(number: 0, configuration: .init(mappingTimeout: .seconds(30)), seed: 1)
        let mapped = nat.outbound(from: Self.inside, to: Self.peer, now: .zero)
        // Inbound traffic does not refresh it…
        #expect(nat.inbound(from: Self.peer, toPort: mapped.port, now: .ms(29_000)) == Self.inside)
        #expect(nat.inbound(from: Self.peer, toPort: mapped.port, now: .ms(30_000)) == nil)
        #expect(nat.mappedPorts(now: .ms(30_000)).isEmpty)
        // …outbound traffic does.
        let renewed = nat.outbound(from: Self.inside, to: Self.peer, now: .ms(31_000))
        _ = nat.outbound(from: Self.inside, to: Self.peer, now: .ms(55_000))
        #expect(nat.inbound(from: Self.peer, toPort: renewed.port, now: .ms(80_000)) == Self.inside)
        #expect(nat.inbound(from: Self.peer, toPort: renewed.port, now: .ms(85_000)) == nil)
    }

    @Test func aDestinationNotSentToLatelyIsFilteredWhileTheMappingLives() {
        var nat = SimNAT(number: 0, configuration: .init(mappingTimeout: .seconds(30)), seed: 1)
        let mapped = nat.outbound(from: Self.inside, to: Self.peer, now: .zero)
        _ = nat.outbound(from: Self.inside, to: Self.other, now: .ms(20_000))
        #expect(nat.inbound(from: Self.other, toPort: mapped.port, now: .ms(40_000)) == Self.inside)
        #expect(
            nat.inbound(from: Self.peer, toPort: mapped.port, now: .ms(40_000)) == nil,
            "the peer's permission is 40 s old")
    }

    @Test(arguments: SimulationSeeds.from(defaultCount: 2))
    func symmetricPortsFollowTheSeed(seed: UInt64) {
        func ports(_ seed: UInt64) -> [UInt16] {
            var nat = SimNAT(number: 0, configuration: .symmetric, seed: seed)
            return (1...20).map { nat.outbound(from: Self.inside, to: SimAddress($0), now: .zero).port }
        }
        let run = ports(seed)
        #expect(run == ports(seed), "\(SimulationSeeds.replay(seed))")
        #expect(Set(run).count == run.count, "\(SimulationSeeds.replay(seed)): a port per destination")
        #expect(run != ports(seed &+ 1000), "\(SimulationSeeds.replay(seed)): random ports")
    }

    // MARK: in the network

    @Test func aNodeBehindANATIsAnsweredAtItsPublicAddressAndUnreachableAtItsOwn() {
        let sim = Simulator(seed: 1)
        let home = EchoProcess(echoes: false)
        let public_ = EchoProcess()
        let homeNode = sim.addNode(home)
        let publicNode = sim.addNode(public_)
        let stranger = EchoProcess(echoes: false)
        let strangerNode = sim.addNode(stranger)
        let nat = sim.addNAT(.masquerade, for: [homeNode])

        sim.inject([1], from: homeNode, to: publicNode)
        sim.run(for: .milliseconds(10))
        let seen = public_.received.map(\.from)
        #expect(seen.count == 1)
        #expect(seen.first?.isNATPublic == true, "the public node sees the NAT's address, \(seen)")
        #expect(home.received.map(\.bytes) == [[1]], "the echo came back through the mapping")
        #expect(home.received.first?.from == publicNode)

        // The private address means nothing outside; the mapping lets in only the public node.
        sim.inject([2], from: strangerNode, to: homeNode)
        sim.inject([3], from: strangerNode, to: seen[0])
        sim.run(for: .milliseconds(10))
        #expect(home.received.count == 1)
        #expect(sim.statistics.dropped.nat == 2)
        #expect(sim.nat(nat).mappedPorts(now: sim.now) == [seen[0].port])
    }

    @Test func nodesBehindOneNATTalkDirectly() {
        let sim = Simulator(seed: 2)
        let first = EchoProcess(echoes: false)
        let second = EchoProcess(echoes: false)
        let a = sim.addNode(first)
        let b = sim.addNode(second)
        let nat = sim.addNAT(.symmetric, for: [a, b])
        sim.inject([1], from: a, to: b)
        sim.run(for: .milliseconds(10))
        #expect(second.received.map(\.from) == [a])
        #expect(sim.nat(nat).mappedPorts(now: sim.now).isEmpty, "nothing left the home")
    }

    @Test func simultaneousSendsOpenAPathThroughTwoMasqueradingNATs() {
        let sim = Simulator(seed: 3)
        let first = EchoProcess(echoes: false)
        let second = EchoProcess(echoes: false)
        let a = sim.addNode(first)
        let b = sim.addNode(second)
        let natA = sim.addNAT(.masquerade, for: [a])
        let natB = sim.addNAT(.masquerade, for: [b])
        // Endpoint-independent mapping keeps the inside port: the public addresses are predictable.
        let publicA = SimAddress(natHost: natA, port: a.port)
        let publicB = SimAddress(natHost: natB, port: b.port)
        // The first datagram each way meets a filter that has not seen the other side yet,
        // unless the other's own datagram left before it arrived.
        sim.inject([1], from: a, to: publicB)
        sim.run(for: .milliseconds(10))
        #expect(second.received.isEmpty, "b's NAT has not seen b send to a")
        sim.inject([2], from: b, to: publicA)
        sim.run(for: .milliseconds(10))
        #expect(first.received.map(\.bytes) == [[2]], "a's own datagram opened a's NAT to b")
        #expect(first.received.first?.from == publicB)
        sim.inject([3], from: a, to: publicB)
        sim.run(for: .milliseconds(10))
        #expect(second.received.map(\.bytes) == [[3]])
    }

    @Test func aSymmetricNATDefeatsThePunchThatMasqueradeAllows() {
        let sim = Simulator(seed: 4)
        let first = EchoProcess(echoes: false)
        let second = EchoProcess(echoes: false)
        let rendezvous = EchoProcess(echoes: false)
        let a = sim.addNode(first)
        let b = sim.addNode(second)
        let c = sim.addNode(rendezvous)
        sim.addNAT(.symmetric, for: [a])
        let natB = sim.addNAT(.masquerade, for: [b])
        // What c sees of a is a port for c only.
        sim.inject([0], from: a, to: c)
        sim.run(for: .milliseconds(10))
        let seenByC = rendezvous.received[0].from
        sim.inject([1], from: b, to: seenByC)
        sim.inject([2], from: a, to: SimAddress(natHost: natB, port: b.port))
        sim.run(for: .milliseconds(10))
        sim.inject([3], from: b, to: seenByC)
        sim.run(for: .milliseconds(10))
        #expect(first.received.isEmpty, "a's mapping toward b has another port than the one c saw")
        #expect(sim.statistics.dropped.nat >= 2)
    }

    @Test func anExpiredMappingDropsWhatArrivesAfterIt() {
        let sim = Simulator(seed: 5)
        let home = EchoProcess(echoes: false)
        let outside = EchoProcess(echoes: false)
        let a = sim.addNode(home)
        let b = sim.addNode(outside)
        sim.addNAT(.init(mappingTimeout: .seconds(30)), for: [a])
        sim.inject([1], from: a, to: b)
        sim.run(for: .milliseconds(10))
        let mapped = outside.received[0].from
        sim.inject([2], from: b, to: mapped)
        sim.run(for: .seconds(31))
        sim.inject([3], from: b, to: mapped)
        sim.run(for: .milliseconds(10))
        #expect(home.received.map(\.bytes) == [[2]])
        #expect(sim.statistics.dropped.nat == 1)
    }

    @Test(arguments: SimulationSeeds.from(defaultCount: 2))
    func aRunWithNATsReplaysExactly(seed: UInt64) {
        func run() -> UInt64 {
            let sim = Simulator(
                seed: seed,
                defaultLink: LinkConditions(
                    delay: .milliseconds(5), jitter: .milliseconds(3),
                    lossProbability: 0.1),
                trace: .digest)
            let nodes = (0..<4).map { _ in sim.addNode(EchoProcess()) }
            sim.addNAT(.symmetric, for: [nodes[0]])
            sim.addNAT(.masquerade, for: [nodes[1], nodes[2]])
            for round in 0..<20 {
                for from in nodes {
                    for to in nodes where to != from { sim.inject([UInt8(round)], from: from, to: to) }
                }
                sim.run(for: .milliseconds(50))
            }
            return sim.traceDigest
        }
        #expect(run() == run(), "\(SimulationSeeds.replay(seed))")
    }
}
