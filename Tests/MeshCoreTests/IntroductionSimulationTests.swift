import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Introductions over a lossy network (PROTOCOL.md §3, "Introductions"): each member that
/// joined is introduced by the member that let it in, and every member learns it; the founder
/// and members of the previous release stay unintroduced; a restart keeps them.
///
///     SIM_SEED=N swift test --filter Introduction
@Suite("Introductions in simulation")
struct IntroductionSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    static func link(_ seed: UInt64) -> LinkConditions {
        LinkConditions(
            delay: .milliseconds(3), jitter: .milliseconds(2), lossProbability: [0, 0.05, 0.1][Int(seed % 3)])
    }

    /// What `node` knows of who let each member in: by member, the door (nil: none known).
    static func doors(seenBy node: SimNode, of members: [SimNode]) -> [NodeID: NodeID?] {
        Dictionary(uniqueKeysWithValues: members.map { ($0.id, node.core.introduction(of: $0.id)?.door) })
    }

    @Test("each joiner is introduced, and every member learns who let it in", arguments: seeds)
    func everyMemberLearnsEachDoor(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let second = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(50))
        // Through the second member only (which, its own join unanswered under loss, may still
        // be joining then: the two then joined through each other, and one stays unintroduced).
        let third = mesh.addNode(joiningThrough: [second.address], at: .zero + .seconds(2))
        let fourth = mesh.addNode(joiningThrough: [founder.address], at: .zero + .seconds(3))
        let nodes = [founder, second, third, fourth]
        let joiners = Array(nodes.dropFirst())
        // What each member holds of itself, and whether every node holds the same.
        func own() -> [NodeID: NodeID?] {
            Dictionary(uniqueKeysWithValues: joiners.map { ($0.id, $0.core.introduction(of: $0.id)?.door) })
        }
        func agreed() -> Bool {
            let held = own()
            return nodes.allSatisfy { node in
                joiners.allSatisfy { (held[$0.id] ?? nil) == node.core.introduction(of: $0.id)?.door }
            }
        }
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(500)) { _ in
            joiners.filter { $0.core.introduction(of: $0.id) != nil }.count >= 2 && agreed()
                && nodes.allSatisfy { $0.core.versions.nextDeadline == nil }
        }
        #expect(founder.core.membership.joinedThrough == nil, "\(replay)")
        #expect(founder.core.remembered.founder && !second.core.remembered.founder, "\(replay)")
        #expect(founder.core.introduction(of: founder.id) == nil, "\(replay): the founder is introduced")
        let introduced = joiners.filter { $0.core.introduction(of: $0.id) != nil }
        #expect(introduced.count >= 2, "\(replay): \(introduced.count) of 3 joiners introduced")
        for joiner in introduced {
            let door = joiner.core.introduction(of: joiner.id)?.door
            #expect(door != joiner.id && nodes.map(\.id).contains { $0 == door }, "\(replay)")
        }
        #expect(
            agreed(),
            "\(replay): members disagree on who let whom in: \(own()), seen \(nodes.map { Self.doors(seenBy: $0, of: joiners) })"
        )
        for node in nodes {
            #expect(node.core.counters.dropped[.malformed, default: 0] == 0, "\(replay): \(node.address)")
        }
        // Done asking: no request and no version frame is due any more.
        mesh.simulator.run(for: .seconds(15))
        for node in nodes {
            #expect(node.core.versions.nextDeadline == nil, "\(replay): \(node.address) still asks versions")
        }
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    @Test(
        "a restart keeps the node's introduction and those it knew; the founder restarted is still introduced by nobody",
        arguments: seeds)
    func restartKeepsIntroductions(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let joiner = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(50))
        let other = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(100))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            [founder, joiner, other].allSatisfy { node in
                node.core.introduction(of: joiner.id) != nil && node.core.introduction(of: other.id) != nil
            }
        }
        let introduction = joiner.core.introduction(of: joiner.id)
        #expect(introduction?.door == founder.id, "\(replay): \(String(describing: introduction))")
        // What they learnt is on disk a moment later; then the joiner crashes (a restart starts
        // from what its disk holds) and comes back.
        mesh.simulator.run(for: .seconds(2))
        let restartAt = mesh.simulator.now + .seconds(1)
        mesh.restart(joiner.address, at: restartAt)
        let restarted = mesh.node(joiner.address)
        // At once, before it meets anyone: its own and the other's, from its data dir.
        mesh.simulator.run(until: restartAt + .milliseconds(1))
        #expect(restarted.core.introduction(of: joiner.id) == introduction, "\(replay): its own was not kept")
        #expect(restarted.core.introduction(of: other.id) != nil, "\(replay): the other's was not kept")
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            restarted.activeMemberIDs.count == 2 && restarted.core.versions.nextDeadline == nil
        }
        #expect(restarted.activeMemberIDs.count == 2, "\(replay): the joiner did not rejoin")
        #expect(restarted.core.introduction(of: joiner.id) == introduction, "\(replay): introduced again")
        #expect(founder.core.introduction(of: joiner.id) == introduction, "\(replay)")
        #expect(other.core.introduction(of: joiner.id) == introduction, "\(replay)")

        // The founder restarts: it joins the members it remembers, and asks none of them.
        mesh.restart(founder.address, at: mesh.simulator.now + .seconds(1))
        let founderAgain = mesh.node(founder.address)
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            founderAgain.activeMemberIDs.count == 2 && founderAgain.core.versions.nextDeadline == nil
        }
        #expect(founderAgain.activeMemberIDs.count == 2, "\(replay): the founder did not rejoin")
        for node in [founderAgain, restarted, other] {
            #expect(
                node.core.introduction(of: founder.id) == nil, "\(replay): \(node.address) holds one of the founder")
        }
    }

    @Test(
        "a member of the previous release neither asks nor is asked, and stays unintroduced; who came in through it asks the next member",
        arguments: seeds)
    func previousReleaseStaysUnintroduced(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        let oldFirst = seed % 2 == 0
        let first = mesh.addNode(
            joiningThrough: [], at: .zero,
            configuration: oldFirst ? ProtocolVersionSimulationTests.releaseZeroNine : nil)
        let second = mesh.addNode(
            joiningThrough: [first.address], at: .zero + .milliseconds(50),
            configuration: oldFirst ? nil : ProtocolVersionSimulationTests.releaseZeroNine)
        let third = mesh.addNode(joiningThrough: [second.address], at: .zero + .seconds(2))
        let (old, new) = oldFirst ? (first, second) : (second, first)
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(500)) { _ in
            new.core.versions.versions(of: old.id) == .unannounced
                && third.core.versions.versions(of: old.id) == .unannounced
                && (new.core.introduction(of: third.id) != nil || third.core.introduction(of: new.id) != nil)
        }
        #expect(new.core.versions.versions(of: old.id) == .unannounced, "\(replay)")
        for node in [new, third] {
            #expect(node.core.introduction(of: old.id) == nil, "\(replay): \(node.address) holds the old one's")
        }
        #expect(old.core.introduction(of: old.id) == nil, "\(replay)")
        if oldFirst {
            // The new member came in through the old one, which introduces nobody; the third came
            // in through the new one. One of the two introduces the other (which, asking at once,
            // is a race), never both.
            let doors = [new, third].map { $0.core.introduction(of: $0.id)?.door }
            #expect(
                doors == [third.id, nil] || doors == [nil, new.id],
                "\(replay): \(doors) for the new member and the third")
            #expect(new.core.introduction(of: third.id)?.door == doors[1], "\(replay)")
        } else {
            // The new founder made the session; the third came in through the old member, which
            // introduces nobody: the next member that speaks protocol 2, the founder, does.
            #expect(new.core.introduction(of: new.id) == nil, "\(replay): the founder was introduced")
            #expect(third.core.introduction(of: third.id)?.door == new.id, "\(replay): not by the next member")
        }
        #expect(old.core.counters.laterProtocolDrops == 0, "\(replay): a frame of protocol 2 reached the old member")
        let dropped = old.core.counters.dropped[.malformed, default: 0]
        #expect(dropped <= UInt64(2 * NodeSettings().versions.attempts), "\(replay): it dropped \(dropped)")
    }

    @Test(
        "a member cannot take another's introduction or name a door that did not sign, and its version frames buy no more than one ask an interval",
        arguments: seeds)
    func hostileMemberGainsNothing(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(3), jitter: .milliseconds(2)))
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let honest = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(50))
        let hostile = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(100))
        // The honest member holds an introduction of its own, so it tells it until a member's
        // version frame names its door: the hostile member's never do.
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            honest.core.introduction(of: honest.id) != nil && honest.core.introduction(of: hostile.id) != nil
                && honest.core.versions.nextDeadline == nil
        }
        let honestIntroduction = try #require(honest.core.introduction(of: honest.id), "\(replay)")
        let hostileIntroduction = try #require(honest.core.introduction(of: hostile.id), "\(replay)")
        let malformedBefore = honest.core.counters.dropped[.malformed, default: 0]
        let reasksBefore = honest.core.versions.peers[hostile.id]?.reasks ?? 0
        // The honest member's introduction as the hostile one's: the door's signature is for another.
        var stolen = honestIntroduction
        stolen.member = hostile.id
        let claimed = stolen.countersigned(by: Ed25519Authority(identity: hostile.identity))
        // Named the honest member's door with a signature of its own.
        let invented = Introduction.signed(
            by: Ed25519Authority(identity: hostile.identity), admitting: hostile.id, in: SessionID(value: 1))
        var forgedDoor = invented
        forgedDoor.doorKey = honest.identity.publicKey
        let forged = forgedDoor.countersigned(by: Ed25519Authority(identity: hostile.identity))
        let start = mesh.simulator.now
        for (index, frame) in [claimed, forged, honestIntroduction].enumerated() {
            hostile.plan(at: start + .milliseconds(100 * (index + 1))) {
                $0.inject([.introduction(frame)], to: honest.address, member: honest.id)
            }
        }
        // Then version frames that never name a door, 20 a second for 10 s.
        for step in 0..<200 {
            hostile.plan(at: start + .seconds(1) + .milliseconds(50 * step)) {
                $0.inject(
                    [.protocolVersion(VersionAnnouncement(versions: .this, isAnswer: step % 2 == 0))],
                    to: honest.address, member: honest.id)
            }
        }
        mesh.simulator.run(for: .seconds(12))
        #expect(honest.core.introduction(of: hostile.id) == hostileIntroduction, "\(replay): a forgery was taken")
        #expect(honest.core.introduction(of: honest.id) == honestIntroduction, "\(replay)")
        // The two forgeries count as malformed; its own introduction sent back to it is no
        // answer it asked for, and is passed over.
        #expect(
            honest.core.counters.dropped[.malformed, default: 0] >= malformedBefore + 2,
            "\(replay): a forged introduction was not refused")
        // Asked again, but at most once an interval, and a minute apart after `attempts` times.
        let reasks = (honest.core.versions.peers[hostile.id]?.reasks ?? 0) - reasksBefore
        #expect(reasks >= 1, "\(replay): never told again")
        #expect(reasks <= NodeSettings().versions.attempts, "\(replay): asked again \(reasks) times in 10 s")
    }

    @Test("two members started through each other do not introduce each other", arguments: seeds)
    func membersThroughEachOtherMakeNoLoop(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        let a = mesh.addNode(joiningThrough: [SimAddress(1)], at: .zero)
        let b = mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(Int64(seed % 7)))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            a.core.introduction(of: b.id) != nil || b.core.introduction(of: a.id) != nil
        }
        mesh.simulator.run(for: .seconds(10))
        let doors = [a, b].map { $0.core.introduction(of: $0.id)?.door }
        #expect(!(doors[0] == b.id && doors[1] == a.id), "\(replay): each introduced the other")
        #expect(doors.contains { $0 != nil }, "\(replay): neither was introduced")
        #expect(!a.core.remembered.founder && !b.core.remembered.founder, "\(replay)")
    }
}
