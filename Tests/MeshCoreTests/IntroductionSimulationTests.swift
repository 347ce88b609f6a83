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

    /// Each joiner's door, as it joined: the member whose datagram made it a member.
    static func expectedDoors(_ nodes: [SimNode]) -> [NodeID: NodeID?] {
        Dictionary(uniqueKeysWithValues: nodes.map { ($0.id, $0.core.membership.joinedThrough) })
    }

    @Test("each joiner is introduced by the member that let it in, and every member learns it", arguments: seeds)
    func everyMemberLearnsEachDoor(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let second = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(50))
        // Through the second member only: it is the door.
        let third = mesh.addNode(joiningThrough: [second.address], at: .zero + .seconds(2))
        let fourth = mesh.addNode(joiningThrough: [founder.address], at: .zero + .seconds(3))
        let nodes = [founder, second, third, fourth]
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(500)) { _ in
            let expected = Self.expectedDoors(nodes)
            return nodes.dropFirst().allSatisfy { $0.core.membership.joinedThrough != nil }
                && nodes.allSatisfy { Self.doors(seenBy: $0, of: nodes) == expected }
        }
        let expected = Self.expectedDoors(nodes)
        #expect(founder.core.membership.joinedThrough == nil, "\(replay)")
        #expect(second.core.membership.joinedThrough == founder.id, "\(replay): the second joined through another")
        for joiner in [third, fourth] {
            let door = joiner.core.membership.joinedThrough
            #expect(door != nil && door != joiner.id, "\(replay): \(joiner.address) joined through nobody")
        }
        for node in nodes {
            #expect(
                Self.doors(seenBy: node, of: nodes) == expected,
                "\(replay): \(node.address) knows \(Self.doors(seenBy: node, of: nodes)), not \(expected)")
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

    @Test("a restart keeps the node's introduction and those it knew; the others learn it again", arguments: seeds)
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
        mesh.simulator.at(.zero + .seconds(31), "crash") { $0.crash(joiner.address) }
        mesh.restart(joiner.address, at: .zero + .seconds(32))
        let restarted = mesh.node(joiner.address)
        // At once, before it meets anyone: its own and the other's, from its data dir.
        mesh.simulator.run(until: .zero + .seconds(32) + .milliseconds(1))
        #expect(restarted.core.introduction(of: joiner.id) == introduction, "\(replay): its own was not kept")
        #expect(restarted.core.introduction(of: other.id) != nil, "\(replay): the other's was not kept")
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            restarted.activeMemberIDs.count == 2 && restarted.core.versions.nextDeadline == nil
        }
        #expect(restarted.core.introduction(of: joiner.id) == introduction, "\(replay): introduced again")
        #expect(founder.core.introduction(of: joiner.id) == introduction, "\(replay)")
        #expect(other.core.introduction(of: joiner.id) == introduction, "\(replay)")
    }

    @Test("a member of the previous release neither asks nor is asked, and stays unintroduced", arguments: seeds)
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
        let third = mesh.addNode(joiningThrough: [first.address], at: .zero + .seconds(2))
        let (old, new) = oldFirst ? (first, second) : (second, first)
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(500)) { _ in
            new.core.versions.versions(of: old.id) == .unannounced && third.core.versions.nextDeadline == nil
        }
        for node in [new, third] {
            #expect(node.core.introduction(of: old.id) == nil, "\(replay): \(node.address) holds the old one's")
        }
        #expect(old.core.introduction(of: old.id) == nil, "\(replay)")
        if oldFirst {
            // Both joined through the old member: nobody to ask.
            #expect(new.core.introduction(of: new.id) == nil, "\(replay)")
        } else {
            #expect(third.core.introduction(of: third.id)?.door == new.id, "\(replay): the new founder is the door")
            #expect(new.core.introduction(of: third.id)?.door == new.id, "\(replay)")
        }
        // Only the version frames reached the old member: nothing it would drop besides.
        let dropped = old.core.counters.dropped[.malformed, default: 0]
        #expect(dropped <= UInt64(2 * NodeSettings().versions.attempts), "\(replay): it dropped \(dropped)")
    }
}
