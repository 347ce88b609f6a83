import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The bound on introductions (PROTOCOL.md §3, "Introductions"): one member introduces a bounded
/// number of live members, a joiner refused or left unanswered asks the next member, and a
/// member that lost its introduction gets back the one the others hold. The bound is 2 here
/// (16 by default) so that a few nodes reach it.
///
///     SIM_SEED=N swift test --filter IntroductionBound
@Suite("Introduction bounds in simulation")
struct IntroductionBoundSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)
    static let perDoor = 2

    static var configuration: SimNode.Configuration {
        var configuration = SimNode.Configuration()
        configuration.settings.introductions.perDoor = perDoor
        return configuration
    }

    /// Over the lossy links of the other introduction tests.
    static func mesh(_ seed: UInt64) -> SimMesh {
        SimMesh(seed: seed, link: IntroductionSimulationTests.link(seed), configuration: configuration)
    }

    /// Over calm links: where a test needs the joiner to come in through the member it names.
    static func calmMesh(_ seed: UInt64) -> SimMesh {
        SimMesh(
            seed: seed, link: LinkConditions(delay: .milliseconds(3), jitter: .milliseconds(2)),
            configuration: configuration)
    }

    /// Over calm links: a founder, a door it introduced, and a joiner starting through the door.
    static func joinerThroughDoor(_ seed: UInt64) -> (SimMesh, founder: SimNode, door: SimNode, joiner: SimNode) {
        let mesh = calmMesh(seed)
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let door = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(50))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            founder.core.introduction(of: door.id) != nil
        }
        let joiner = mesh.addNode(joiningThrough: [door.address], at: mesh.simulator.now + .milliseconds(10))
        return (mesh, founder, door, joiner)
    }

    /// `joinerThroughDoor`, run until the founder holds the joiner's introduction (nil: it never came).
    static func introducedJoiner(
        _ seed: UInt64
    ) -> (
        SimMesh, founder: SimNode, door: SimNode, joiner: SimNode, held: Introduction?
    ) {
        let (mesh, founder, door, joiner) = joinerThroughDoor(seed)
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            founder.core.introduction(of: joiner.id) != nil
        }
        return (mesh, founder, door, joiner, founder.core.introduction(of: joiner.id))
    }

    /// `node` started again on its disk in a second, given `seeds` (by default what it had).
    static func restart(_ node: SimNode, in mesh: SimMesh, seeds: [SimAddress]? = nil) -> SimNode {
        let restartAt = mesh.simulator.now + .seconds(1)
        mesh.restart(node.address, at: restartAt, seeds: seeds)
        mesh.simulator.run(until: restartAt + .milliseconds(1))
        return mesh.node(node.address)
    }

    /// The most members `node` holds as introduced by one door.
    static func mostByOneDoor(seenBy node: SimNode, among members: [SimNode]) -> Int {
        var byDoor: [NodeID: Int] = [:]
        for member in members {
            if let door = node.core.introduction(of: member.id)?.door { byDoor[door, default: 0] += 1 }
        }
        return byDoor.values.max() ?? 0
    }

    @Test(
        "a door past its bound refuses, and each joiner it refused is introduced by the next member", arguments: seeds)
    func aFullDoorSendsJoinersToTheNextMember(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed)
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let joiners = (1...5).map {
            mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(300 * Int64($0)))
        }
        let nodes = [founder] + joiners
        func own(_ node: SimNode) -> NodeID? { node.core.introduction(of: node.id)?.door }
        func agreed() -> Bool {
            nodes.allSatisfy { node in joiners.allSatisfy { node.core.introduction(of: $0.id)?.door == own($0) } }
        }
        var most = 0
        mesh.simulator.run(for: .seconds(90), checkEvery: .milliseconds(250)) { _ in
            most = max(most, nodes.map { Self.mostByOneDoor(seenBy: $0, among: joiners) }.max() ?? 0)
            return joiners.allSatisfy { own($0) != nil } && agreed()
                && nodes.allSatisfy { $0.core.versions.nextDeadline == nil }
        }
        let unintroduced = joiners.filter { own($0) == nil }.map(\.address)
        #expect(unintroduced.isEmpty, "\(replay): \(unintroduced) not introduced")
        #expect(most <= Self.perDoor, "\(replay): a node held \(most) members introduced by one door")
        // All came in through the founder's address, which may introduce two of them.
        let byOthers = joiners.filter { own($0) != nil && own($0) != founder.id }
        #expect(
            byOthers.count >= joiners.count - Self.perDoor,
            "\(replay): only \(byOthers.count) joiners introduced by a member other than the founder")
        for joiner in joiners {
            let door = own(joiner)
            #expect(door != joiner.id && nodes.contains { $0.id == door }, "\(replay): \(joiner.address)")
        }
        #expect(agreed(), "\(replay): members disagree on who let whom in")
        for node in nodes {
            #expect(node.core.counters.dropped[.malformed, default: 0] == 0, "\(replay): \(node.address)")
            #expect(node.core.counters.introductionsPastBound == 0, "\(replay): \(node.address)")
        }
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    @Test("a joiner whose door goes before answering is introduced by the next member", arguments: seeds)
    func aJoinerWhoseDoorWentAsksTheNext(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, founder, door, joiner) = Self.joinerThroughDoor(seed)
        // The door goes the moment the joiner is in through it.
        mesh.simulator.run(for: .seconds(10), checkEvery: .milliseconds(1)) { _ in
            joiner.core.membership.joinedThrough != nil
        }
        try #require(joiner.core.membership.joinedThrough == door.id, "\(replay): not in through the door")
        try #require(joiner.core.introduction(of: joiner.id) == nil, "\(replay): introduced before the door went")
        mesh.simulator.crash(door.address)
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(250)) { _ in
            founder.core.introduction(of: joiner.id) != nil
        }
        #expect(joiner.core.introduction(of: joiner.id)?.door == founder.id, "\(replay): not by the next member")
        #expect(founder.core.introduction(of: joiner.id)?.door == founder.id, "\(replay): the founder did not learn it")
    }

    @Test("a joiner whose door stays silent is introduced by the next member", arguments: seeds)
    func aJoinerWhoseDoorIsSilentAsksTheNext(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, founder, door, joiner) = Self.joinerThroughDoor(seed)
        // Once the joiner knows that its door speaks protocol 2, nothing from the door reaches it:
        // the founder still vouches for the door (indirect probes), so it stays alive.
        mesh.simulator.run(for: .seconds(10), checkEvery: .milliseconds(1)) { _ in
            joiner.core.versions.allows(.introductionRequest, to: door.id)
        }
        mesh.simulator.setLink(
            from: door.address, to: joiner.address,
            LinkConditions(delay: .milliseconds(3), lossProbability: 1))
        try #require(joiner.core.membership.joinedThrough == door.id, "\(replay): not in through the door")
        try #require(
            joiner.core.introduction(of: joiner.id) == nil, "\(replay): introduced before the door fell silent")
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(250)) { _ in
            joiner.core.introduction(of: joiner.id) != nil
        }
        #expect(joiner.core.introduction(of: joiner.id)?.door == founder.id, "\(replay): not by the next member")
        #expect(
            joiner.core.membership.member(door.id).map { !$0.status.isGone } == true,
            "\(replay): the door was declared gone: the test meant it live and silent")
    }

    @Test(
        "a member that lost its introduction gets back the one the others hold, though its door is gone",
        arguments: seeds)
    func aLostIntroductionIsGivenBack(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, founder, door, joiner, introduced) = Self.introducedJoiner(seed)
        let held = try #require(introduced, "\(replay): never introduced")
        try #require(held.door == door.id, "\(replay): not introduced by its door")
        // Its door goes for good; its `members.json` loses the introductions (a copy from before
        // them), and it restarts.
        mesh.simulator.run(for: .seconds(2))
        mesh.simulator.crash(door.address)
        joiner.changeRemembered { $0.keepIntroductions([], localID: joiner.id) }
        let restarted = Self.restart(joiner, in: mesh)
        #expect(restarted.core.introduction(of: joiner.id) == nil, "\(replay): the introduction was not lost")
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            restarted.core.introduction(of: joiner.id) != nil && restarted.core.versions.nextDeadline == nil
        }
        // The founder hands back the one it held, by the door that went: it does not sign anew.
        #expect(restarted.core.introduction(of: joiner.id) == held, "\(replay): not the one the founder held")
        #expect(founder.core.introduction(of: joiner.id) == held, "\(replay)")
    }

    @Test(
        "a damaged members.json neither takes the founder's standing nor gives it to a member that joined",
        arguments: seeds)
    func foundingOutlivesDamagedMembersFile(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, founder, door, _, introduced) = Self.introducedJoiner(seed)
        try #require(introduced != nil, "\(replay): never introduced")
        // The founder's `members.json` reads as nothing (damaged): it starts again through the door.
        founder.changeRemembered { $0 = RememberedMembers() }
        let restarted = Self.restart(founder, in: mesh, seeds: [door.address])
        var asked = false
        mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(100)) { _ in
            asked = asked || restarted.core.introductions.request != nil
            return false
        }
        #expect(restarted.core.membership.joinedThrough != nil, "\(replay): it never joined again")
        #expect(restarted.core.remembered.founder, "\(replay): the founder forgot that it made the session")
        #expect(!asked, "\(replay): the founder asked for an introduction")
        #expect(door.core.introduction(of: founder.id) == nil, "\(replay): the founder was introduced")
        // The door's reads as nothing too, and it starts with nobody to join: it made nothing.
        door.changeRemembered { $0 = RememberedMembers() }
        let restartedDoor = Self.restart(door, in: mesh, seeds: [])
        mesh.simulator.run(for: .seconds(1))
        #expect(!restartedDoor.core.remembered.founder, "\(replay): a joiner took itself for the founder")
    }

    @Test("nobody takes more introductions from one door than the bound, whoever signed them", arguments: seeds)
    func introductionsPastTheBoundAreNotTaken(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.calmMesh(seed)
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let members = (1...3).map {
            mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(100 * Int64($0)))
        }
        let hostile = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(500))
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(250)) { _ in
            members.allSatisfy { founder.core.introduction(of: $0.id) != nil }
                && founder.core.versions.nextDeadline == nil
        }
        try #require(members.allSatisfy { founder.core.introduction(of: $0.id) != nil }, "\(replay)")
        // The hostile member signs an introduction for each of the three, and each (its key in the
        // test's hands) countersigns and tells the founder: one more than the bound.
        let hostileDoor = Ed25519Authority(identity: hostile.identity)
        let start = mesh.simulator.now
        for (index, member) in members.enumerated() {
            let introduction = Introduction.signed(by: hostileDoor, admitting: member.id, in: SessionID(value: 1))
                .countersigned(by: Ed25519Authority(identity: member.identity))
            member.plan(at: start + .milliseconds(20 * Int64(index + 1))) {
                $0.inject([.introduction(introduction)], to: founder.address, member: founder.id)
            }
        }
        var most = 0
        mesh.simulator.run(for: .seconds(1), checkEvery: .milliseconds(5)) { _ in
            let byHostile = members.filter { founder.core.introduction(of: $0.id)?.door == hostile.id }.count
            most = max(most, byHostile)
            return false
        }
        #expect(most == Self.perDoor, "\(replay): the founder held \(most) introduced by the hostile member")
        #expect(founder.core.counters.introductionsPastBound >= 1, "\(replay): none refused")
        #expect(founder.core.counters.dropped[.malformed, default: 0] == 0, "\(replay)")
    }
}
