import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Address discovery with whole nodes behind the simulator's NAT boxes: members echo
/// where a member's datagrams come from, the member adopts a public address two of them agree
/// on, signs it into its record, and is reached there; one member's forged observations move
/// nothing. Replay a failing seed with `SIM_SEED=N`.
@Suite("Address discovery in simulation")
struct AddressDiscoverySimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)
    static let link = LinkConditions(delay: .milliseconds(5), jitter: .milliseconds(2), lossProbability: 0.02)

    /// `publics` members on the open network (the first founds the session), then one member
    /// behind a NAT box of its own per configuration in `homes`, all joining through the first.
    /// Birthday rounds are off unless `birthday`: against a symmetric NAT a probe could land by luck
    /// on the one mapping its node made towards the other home, and punch a pair a test expects not to be.
    static func mesh(seed: UInt64, publics: Int, homes: [SimNAT.Configuration], birthday: Bool = false) -> SimMesh {
        let mesh = SimMesh(seed: seed, link: link)
        var configuration = mesh.configuration
        configuration.settings.birthday.enabled = birthday
        for index in 0..<(publics + homes.count) {
            mesh.addNode(
                joiningThrough: index == 0 ? [] : [SimAddress(0)], at: .zero + .milliseconds(100 * index),
                configuration: configuration)
        }
        for (offset, nat) in homes.enumerated() { mesh.simulator.addNAT(nat, for: [SimAddress(publics + offset)]) }
        return mesh
    }

    /// Every node sees every other alive, at the address `address(node)` gives.
    static func converged(_ mesh: SimMesh, address: (SimNode) -> PeerAddress) -> Bool {
        mesh.all.allSatisfy { viewer in
            mesh.all.allSatisfy { node in
                node === viewer
                    || viewer.membership.member(node.id).map {
                        $0.status == .alive && $0.address == address(node)
                    } == true
            }
        }
    }

    @Test(
        "behind a MASQUERADE NAT: two members agree on the public address, it is signed in first, and messages reach it",
        arguments: seeds)
    func masqueradedMemberIsReachedAtItsPublicAddress(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed: seed, publics: 3, homes: [.masquerade])
        let home = mesh.node(SimAddress(3))
        // MASQUERADE keeps the inside port: the public side of NAT 0 at the node's own port.
        let expected = SimAddress(natHost: 0, port: SimAddress.simulatedPort).peerAddress
        let outcome = mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            Self.converged(mesh) { $0 === home ? expected : $0.address.peerAddress }
        }
        #expect(
            outcome == .satisfied,
            "\(replay): the views never agreed on where the home member is: \(home.membership.me.addresses)")
        #expect(home.core.addressDiscovery.reflexive == expected, "\(replay)")
        #expect(home.membership.me.addresses == [expected, home.address.peerAddress], "\(replay)")
        #expect(home.core.natBehaviour == .endpointIndependent, "\(replay)")
        #expect(home.natDetections == [.endpointIndependent], "\(replay): \(home.natDetections)")
        for index in 0..<3 {
            let node = mesh.node(SimAddress(index))
            #expect(
                node.core.natBehaviour == NATBehaviour.none, "\(replay): \(node.address) says \(node.core.natBehaviour)"
            )
            #expect(node.membership.me.addresses == [node.address.peerAddress], "\(replay)")
        }

        // Reliable messages both ways, once the path is known.
        let sender = mesh.node(SimAddress(1))
        sender.sendMessage([1, 2, 3], to: [home.id], mode: .reliable)
        home.sendMessage([4, 5], to: [sender.id], mode: .reliable)
        mesh.simulator.run(for: .seconds(5))
        #expect(home.reliableReceived[sender.id]?.contains([1, 2, 3]) == true, "\(replay)")
        #expect(sender.reliableReceived[home.id]?.contains([4, 5]) == true, "\(replay)")
        let deaths = mesh.deaths
        #expect(deaths.isEmpty, "\(replay): \(deaths.count) deaths")
    }

    @Test(
        "behind a symmetric NAT: members see different ports; the node says symmetric and adopts none of them",
        arguments: seeds)
    func symmetricNATIsDetected(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed: seed, publics: 3, homes: [.symmetric])
        let home = mesh.node(SimAddress(3))
        let outcome = mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            home.core.natBehaviour == .symmetric
        }
        #expect(outcome == .satisfied, "\(replay): \(home.core.addressDiscovery.observations)")
        let seen = Set(home.core.addressDiscovery.observations.values)
        #expect(
            seen.count >= 2 && seen.allSatisfy { SimAddress(peerAddress: $0)?.isNATPublic == true },
            "\(replay): \(seen)")
        #expect(home.core.addressDiscovery.reflexive == nil, "\(replay)")
        #expect(home.membership.me.addresses == [home.address.peerAddress], "\(replay)")
    }

    @Test(
        "one member's forged observations, again and again, move no address and break nothing",
        arguments: seeds)
    func forgedObservationsMoveNothing(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        // Three open members and one behind MASQUERADE; the third open member lies to everyone.
        let mesh = Self.mesh(seed: seed, publics: 3, homes: [.masquerade])
        let liar = mesh.node(SimAddress(2))
        let forged = PeerAddress(ipv4: [198, 51, 100, 66], port: 4000)
        for step in 0..<40 {
            liar.plan(at: .zero + .seconds(2) + .milliseconds(500 * step)) { node in
                for target in mesh.nodes where target != node.address {
                    let victim = mesh.node(target)
                    // To the victim's public address when it has one: the liar reaches it there.
                    let address =
                        node.membership.member(victim.id)?.address.flatMap(SimAddress.init(peerAddress:)) ?? target
                    node.inject([.observedAddress(ObservedAddress(address: forged))], to: address, member: victim.id)
                }
            }
        }
        mesh.simulator.run(for: .seconds(25))
        let home = mesh.node(SimAddress(3))
        let expected = SimAddress(natHost: 0, port: SimAddress.simulatedPort).peerAddress
        #expect(home.core.addressDiscovery.reflexive == expected, "\(replay): the two honest members decide")
        #expect(home.membership.me.addresses.first == expected, "\(replay)")
        for index in [0, 1] {
            let node = mesh.node(SimAddress(index))
            #expect(node.core.addressDiscovery.observations[liar.id] == forged, "\(replay): the lie arrived")
            #expect(node.core.addressDiscovery.reflexive == nil, "\(replay)")
            #expect(node.membership.me.addresses == [node.address.peerAddress], "\(replay)")
            #expect(node.core.natBehaviour == NATBehaviour.none, "\(replay): \(node.core.natBehaviour)")
        }
        #expect(Self.converged(mesh) { $0 === home ? expected : $0.address.peerAddress }, "\(replay)")
        let sender = mesh.node(SimAddress(0))
        sender.sendMessage([9], to: mesh.all.filter { $0 !== sender }.map(\.id), mode: .reliable)
        mesh.simulator.run(for: .seconds(5))
        for node in mesh.all where node !== sender {
            #expect(node.reliableReceived[sender.id]?.contains([9]) == true, "\(replay): \(node.address) got nothing")
        }
        let deaths = mesh.deaths
        #expect(deaths.isEmpty, "\(replay): \(deaths.count) deaths")
    }

    @Test(
        "a late joiner behind MASQUERADE among five members, with the whole workload: every invariant holds",
        arguments: seeds)
    func lateJoinerBehindANAT(seed: UInt64) {
        let mesh = WholeNodeSimulationTests.run(seed: seed) { mesh, _ in
            mesh.simulator.addNAT(.masquerade, for: [SimAddress(5)])
        }
        WholeNodeSimulationTests.expectInvariants(mesh, seed)
        let home = mesh.node(SimAddress(5))
        #expect(home.core.natBehaviour == .endpointIndependent, "\(SimulationSeeds.replay(seed))")
        #expect(
            home.membership.me.addresses.first?.port == SimAddress.simulatedPort
                && SimAddress(peerAddress: home.membership.me.addresses[0])?.isNATPublic == true,
            "\(SimulationSeeds.replay(seed)): \(home.membership.me.addresses)")
    }
}
