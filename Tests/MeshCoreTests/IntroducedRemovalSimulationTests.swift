import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Removing a member that let others in (PROTOCOL.md §3, "Introductions"; SECURITY.md): refused,
/// naming them, unless they go with it (`withIntroduced`) or stay (`keeping`, and then each one
/// kept is introduced again, by the remover first).
///
///     SIM_SEED=N swift test --filter IntroducedRemoval
@Suite("Removing a member with those it introduced, in simulation")
struct IntroducedRemovalSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    /// A founder; `inviter` let in by it; each of `introducedCount` members let in by the
    /// inviter, the first of them letting in one more (`grandchild`); an `other` let in by the
    /// founder. Over calm links, once every node holds every introduction.
    struct Session {
        var mesh: SimMesh
        var founder: SimNode
        var inviter: SimNode
        var introduced: [SimNode]
        var grandchild: SimNode
        var other: SimNode
        var all: [SimNode] { [founder, inviter, other, grandchild] + introduced }
    }

    static func session(_ seed: UInt64, introducedCount: Int = 1) throws -> Session {
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(3), jitter: .milliseconds(2)))
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        let inviter = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(50))
        let other = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(100))
        func introduced(_ node: SimNode) -> Bool { founder.core.introduction(of: node.id) != nil }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            introduced(inviter) && introduced(other)
        }
        var children: [SimNode] = []
        for index in 0..<introducedCount {
            children.append(
                mesh.addNode(
                    joiningThrough: [inviter.address], at: mesh.simulator.now + .milliseconds(50 * Int64(index + 1))))
        }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in children.allSatisfy(introduced) }
        let grandchild = mesh.addNode(joiningThrough: [children[0].address], at: mesh.simulator.now + .milliseconds(10))
        let session = Session(
            mesh: mesh, founder: founder, inviter: inviter, introduced: children, grandchild: grandchild, other: other)
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            session.all.allSatisfy { node in
                session.all.allSatisfy { $0.id == founder.id || node.core.introduction(of: $0.id) != nil }
            }
        }
        let replay = SimulationSeeds.replay(seed)
        try #require(founder.core.introduction(of: inviter.id)?.door == founder.id, "\(replay)")
        for child in children {
            try #require(founder.core.introduction(of: child.id)?.door == inviter.id, "\(replay): not by the inviter")
        }
        try #require(founder.core.introduction(of: grandchild.id)?.door == children[0].id, "\(replay)")
        return session
    }

    @Test(
        "a member that introduced others is not removed alone: refused naming them, then removed with them",
        arguments: seeds)
    func removalTakesTheIntroducedOnlyWhenAsked(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let session = try Self.session(seed)
        let (mesh, founder, inviter) = (session.mesh, session.founder, session.inviter)
        let child = session.introduced[0]
        let epoch = founder.core.session.sessionID
        let refused = founder.removeMember(inviter.id, introduced: .keep([]))
        mesh.simulator.run(for: .seconds(1))
        #expect(
            founder.commandResults[refused]
                == .failure(.introducedMembers(inviter.id, [child.id, session.grandchild.id])),
            "\(replay): \(String(describing: founder.commandResults[refused]))")
        #expect(founder.core.session.sessionID == epoch, "\(replay): a refused removal changed the epoch")

        let removal = founder.removeMember(inviter.id, introduced: .remove(keeping: []))
        let gone: Set<NodeID> = [inviter.id, child.id, session.grandchild.id]
        mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(250)) { _ in
            session.other.core.epochs.removed.isSuperset(of: gone)
        }
        #expect(
            founder.commandResults[removal]
                == .success(
                    .memberRemoved(inviter.id, handedTo: 1, introduced: [child.id, session.grandchild.id].sorted())),
            "\(replay): \(String(describing: founder.commandResults[removal]))")
        for node in [founder, session.other] {
            #expect(node.core.epochs.removed.isSuperset(of: gone), "\(replay): \(node.address)")
            #expect(node.core.session.sessionID == founder.core.session.sessionID, "\(replay): \(node.address)")
        }
    }

    @Test("a member kept stays, with what it introduced, and is introduced again by the remover", arguments: seeds)
    func keptMembersAreIntroducedAgain(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let session = try Self.session(seed)
        let (mesh, founder, inviter) = (session.mesh, session.founder, session.inviter)
        let child = session.introduced[0]
        // The member kept keeps what it introduced: nothing else goes.
        let removal = founder.removeMember(inviter.id, introduced: .keep([child.id]))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            [founder, session.other, session.grandchild].allSatisfy {
                $0.core.introduction(of: child.id)?.door == founder.id
            }
        }
        #expect(
            founder.commandResults[removal] == .success(.memberRemoved(inviter.id, handedTo: 3, introduced: [])),
            "\(replay): \(String(describing: founder.commandResults[removal]))")
        for node in [founder, session.other, child, session.grandchild] {
            #expect(node.core.epochs.removed == [inviter.id], "\(replay): \(node.address)")
            #expect(node.core.introduction(of: child.id)?.door == founder.id, "\(replay): \(node.address)")
            #expect(node.core.introduction(of: session.grandchild.id)?.door == child.id, "\(replay): \(node.address)")
        }
    }

    @Test(
        "a remover that the removed member let in too introduces the one it kept, and is introduced by another",
        arguments: seeds)
    func aSiblingRemoverIntroducesTheKept(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let session = try Self.session(seed, introducedCount: 2)
        let (mesh, inviter) = (session.mesh, session.inviter)
        let (remover, kept) = (session.introduced[0], session.introduced[1])
        // The remover's own child is below it, not the inviter's to take.
        let removal = remover.removeMember(inviter.id, introduced: .keep([kept.id]))
        func settled() -> Bool {
            session.all.filter { $0.id != inviter.id }.allSatisfy { node in
                node.core.introduction(of: kept.id)?.door == remover.id
                    && [session.founder.id, session.other.id].contains(node.core.introduction(of: remover.id)?.door)
            }
        }
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(250)) { _ in settled() }
        #expect(
            remover.commandResults[removal] == .success(.memberRemoved(inviter.id, handedTo: 4, introduced: [])),
            "\(replay): \(String(describing: remover.commandResults[removal]))")
        let doors = [kept, remover].map { remover.core.introduction(of: $0.id)?.door }
        #expect(settled(), "\(replay): the kept one and the remover introduced by \(doors)")
        #expect(session.grandchild.core.introduction(of: session.grandchild.id)?.door == remover.id, "\(replay)")
    }

    @Test(
        "members whose door goes in one removal ask each other's branches at once, and no introductions form a loop",
        arguments: seeds)
    func keptMembersMakeNoLoop(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let session = try Self.session(seed)
        let (mesh, founder, inviter, remover) = (session.mesh, session.founder, session.inviter, session.other)
        // The remover and the inviter both came in through the founder: both ask again at once,
        // the inviter the remover first, the remover whoever it finds (the inviter's child, say).
        let removal = remover.removeMember(founder.id, introduced: .keep([inviter.id]))
        let survivors = session.all.filter { $0.id != founder.id }
        func loop(at node: SimNode) -> [NodeID]? {
            for start in survivors.map(\.id) {
                var chain = [start]
                while let door = node.core.introduction(of: chain[chain.count - 1])?.door,
                    chain.count <= survivors.count
                {
                    if chain.contains(door) { return chain + [door] }
                    chain.append(door)
                }
            }
            return nil
        }
        // Every survivor holds a live door for every member but the two, and for exactly one of
        // them: each can be introduced only from the other's branch, so one is and the other
        // asks on (held by the founder, as before, until it is introduced).
        func settled() -> Bool {
            survivors.allSatisfy { node in
                func introduced(_ member: SimNode) -> Bool {
                    node.core.introduction(of: member.id).map { $0.door != founder.id } ?? false
                }
                let rest = survivors.filter { $0.id != remover.id && $0.id != inviter.id }
                return rest.allSatisfy(introduced) && [remover, inviter].filter(introduced).count == 1
            }
        }
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(250)) { _ in settled() }
        #expect(settled(), "\(replay): not every survivor holds a live door for the members, and for one of the two")
        #expect(
            remover.commandResults[removal] == .success(.memberRemoved(founder.id, handedTo: 3, introduced: [])),
            "\(replay): \(String(describing: remover.commandResults[removal]))")
        for node in survivors {
            #expect(loop(at: node) == nil, "\(replay): \(node.address) holds a loop \(loop(at: node) ?? [])")
        }
    }

    @Test(
        "naming to keep a member it did not introduce keeps none of those it did; a removal keeping some takes the rest",
        arguments: seeds)
    func removalsThatCannotBeMadeAreRefused(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let session = try Self.session(seed, introducedCount: 3)
        let (mesh, founder, inviter) = (session.mesh, session.founder, session.inviter)
        let epoch = founder.core.session.sessionID
        // Three members and one more below: four with the inviter's, one more than a rotation takes.
        let stranger = founder.removeMember(inviter.id, introduced: .keep([session.other.id]))
        mesh.simulator.run(for: .seconds(1))
        #expect(
            founder.commandResults[stranger]
                == .failure(
                    .introducedMembers(inviter.id, session.introduced.map(\.id).sorted() + [session.grandchild.id])),
            "\(replay): \(String(describing: founder.commandResults[stranger]))")
        #expect(founder.core.session.sessionID == epoch, "\(replay): a refused removal changed the epoch")
        // Keeping the one with a member below it: the three others fit.
        let removal = founder.removeMember(inviter.id, introduced: .remove(keeping: [session.introduced[0].id]))
        mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(250)) { _ in
            founder.commandResults[removal] != nil
        }
        let expected = [session.introduced[1].id, session.introduced[2].id].sorted()
        guard case let .success(.memberRemoved(removed, _, introduced)) = founder.commandResults[removal] else {
            Issue.record("\(replay): \(String(describing: founder.commandResults[removal]))")
            return
        }
        #expect(removed == inviter.id && introduced == expected, "\(replay): \(introduced)")
    }
    /// A session whose inviter let in six (five, and one below them), and the founder's removal
    /// of the inviter with all of them, run until its first rotation: more than one rotation
    /// names. Also the rotations the founder had made before.
    static func firstStage(_ seed: UInt64) throws -> (Session, removal: RequestID, rotationsBefore: Int) {
        let session = try Self.session(seed, introducedCount: 5)
        let founder = session.founder
        let rotations = founder.core.epochs.transitions.count
        let removal = founder.removeMember(session.inviter.id, introduced: .remove(keeping: []))
        session.mesh.simulator.run(for: .seconds(3), checkEvery: .milliseconds(50)) { _ in
            founder.core.epochs.transitions.count > rotations
        }
        return (session, removal, rotations)
    }

    @Test(
        "more than one rotation names: the member and all it introduced go in rotations one after another, and none holds the last epoch",
        arguments: seeds)
    func aLargeTreeGoesInRotationsOneAfterAnother(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        // Five members and one more below: six with the inviter's, two rotations.
        let (session, removal, rotations) = try Self.firstStage(seed)
        let (mesh, founder, inviter) = (session.mesh, session.founder, session.inviter)
        let introduced = (session.introduced.map(\.id) + [session.grandchild.id]).sorted()
        // The first rotation takes the member with three; the second waits for rivals of it.
        #expect(founder.core.epochs.removed.contains(inviter.id), "\(replay): the member goes first")
        #expect(founder.commandResults[removal] == nil, "\(replay): answered before the last rotation")
        let gone = Set([inviter.id] + introduced)
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            founder.commandResults[removal] != nil && session.other.core.epochs.removed.isSuperset(of: gone)
                && session.other.core.session.sessionID == founder.core.session.sessionID
        }
        #expect(
            founder.commandResults[removal]
                == .success(.memberRemoved(inviter.id, handedTo: 1, introduced: introduced)),
            "\(replay): \(String(describing: founder.commandResults[removal]))")
        #expect(founder.core.epochs.transitions.count == rotations + 2, "\(replay)")
        let last = founder.core.session.sessionID
        for node in [founder, session.other] {
            #expect(node.core.epochs.removed.isSuperset(of: gone), "\(replay): \(node.address)")
            #expect(node.core.session.sessionID == last, "\(replay): \(node.address)")
        }
        for node in [inviter, session.grandchild] + session.introduced {
            #expect(node.core.epochs.secret(of: last) == nil, "\(replay): \(node.address) holds the last epoch")
        }
    }

    @Test(
        "a removal in several rotations that cannot store the next one says whom the first removed and who is left",
        arguments: seeds)
    func aStagedRemovalCutShortSaysWhatStands(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (session, removal, rotations) = try Self.firstStage(seed)
        let (mesh, founder, inviter) = (session.mesh, session.founder, session.inviter)
        founder.setStorage {
            $0.failingWrites = true
            $0.writeFailureProbability = 1
        }
        mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(250)) { _ in
            founder.commandResults[removal] != nil
        }
        guard case let .failure(.removalCutShort(member, removed, left, because)) = founder.commandResults[removal]
        else {
            Issue.record("\(replay): \(String(describing: founder.commandResults[removal]))")
            return
        }
        #expect(
            member == inviter.id && removed.count == KeyRotation.maxRemoved && removed.contains(inviter.id), "\(replay)"
        )
        #expect(left.count == 3 && Set(left).isDisjoint(with: removed), "\(replay): \(left)")
        if case .epochNotStored = because {} else { Issue.record("\(replay): \(because)") }
        #expect(founder.core.epochs.transitions.count == rotations + 1, "\(replay)")
        // Nothing left behind: the next removal is taken.
        founder.setStorage { $0.failingWrites = false }
        let next = founder.removeMember(left[0], introduced: .remove(keeping: []))
        mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(250)) { _ in founder.commandResults[next] != nil
        }
        guard case .success(.memberRemoved) = founder.commandResults[next] else {
            Issue.record("\(replay): \(String(describing: founder.commandResults[next]))")
            return
        }
    }

    @Test(
        "another member removes someone at the same moment: whichever rotation wins, the staged removal ends with all it takes removed, both remaining members in one epoch",
        arguments: seeds)
    func aRivalDuringAStagedRemovalIsWeighed(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let session = try Self.session(seed, introducedCount: 5)
        let (mesh, founder, inviter, other) = (session.mesh, session.founder, session.inviter, session.other)
        let introduced = (session.introduced.map(\.id) + [session.grandchild.id]).sorted()
        // The last of the tree, removed by another member out of the same epoch at once.
        let removal = founder.removeMember(inviter.id, introduced: .remove(keeping: []))
        let rival = other.removeMember(session.introduced[4].id, introduced: .remove(keeping: []))
        let gone = Set([inviter.id] + introduced)
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(250)) { _ in
            founder.commandResults[removal] != nil && other.commandResults[rival] != nil
                && [founder, other].allSatisfy { $0.core.epochs.removed.isSuperset(of: gone) }
                && other.core.session.sessionID == founder.core.session.sessionID
        }
        guard case let .success(.memberRemoved(member, _, removedWithIt)) = founder.commandResults[removal] else {
            Issue.record("\(replay): \(String(describing: founder.commandResults[removal]))")
            return
        }
        #expect(member == inviter.id && Set(removedWithIt).isSubset(of: Set(introduced)), "\(replay): \(removedWithIt)")
        for node in [founder, other] {
            #expect(node.core.epochs.removed.isSuperset(of: gone), "\(replay): \(node.address)")
        }
        #expect(other.core.session.sessionID == founder.core.session.sessionID, "\(replay): two epochs")
        let last = founder.core.session.sessionID
        for node in [inviter, session.grandchild] + session.introduced {
            #expect(node.core.epochs.secret(of: last) == nil, "\(replay): \(node.address) holds the last epoch")
        }
    }
}
