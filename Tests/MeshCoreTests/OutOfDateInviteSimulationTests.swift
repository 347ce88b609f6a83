import MeshCore
import MeshTestKit
import Testing

/// A newcomer whose invite is older than a removal: the members no longer let it in, but answer
/// its join with the rotation that left its epoch, so it says once that its invite is out of
/// date (and keeps trying) instead of waiting for ever as if nobody were there.
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter OutOfDateInviteSimulation
@Suite("An invite older than a removal (simulation)")
struct OutOfDateInviteSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 4)

    /// Three members under 0–10% loss (by seed); the founder removes the third, and a newcomer
    /// then joins through the two left with the session's first invite.
    static func run(seed: UInt64) -> (mesh: SimMesh, remover: SimNode, other: SimNode, newcomer: SimNode)? {
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed, count: 3)
        let (a, b, c) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        guard mesh.all.allSatisfy({ $0.activeMemberIDs.count == 2 }) else { return nil }
        let first = a.sessionID
        a.plan(at: mesh.simulator.now + .milliseconds(10)) { $0.removeMember(c.id) }
        mesh.simulator.run(until: mesh.simulator.now + .seconds(20), checkEvery: .milliseconds(250)) { _ in
            a.sessionID != first && b.sessionID == a.sessionID
        }
        guard a.sessionID != first, b.sessionID == a.sessionID else { return nil }
        let newcomer = mesh.addNode(joiningThrough: [a.address, b.address], at: mesh.simulator.now + .seconds(1))
        mesh.simulator.run(for: .seconds(30))
        return (mesh, a, b, newcomer)
    }

    @Test(
        "the newcomer is let in by no one, is told its invite is out of date once, and keeps trying",
        arguments: seeds)
    func outOfDateInviteIsTold(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (_, a, b, newcomer) = try #require(Self.run(seed: seed), "\(replay): the mesh or the removal never formed")
        #expect(newcomer.core.phase == .joining, "\(replay): the newcomer is \(newcomer.core.phase)")
        for member in [a, b] {
            #expect(member.membership.member(newcomer.id) == nil, "\(replay): \(member.address) let the newcomer in")
            #expect(
                (member.core.counters.dropped[.staleEpoch] ?? 0) > 0, "\(replay): \(member.address) dropped nothing")
        }
        #expect(
            newcomer.outOfDateNotices.map(\.by) == [a.id],
            "\(replay): told \(newcomer.outOfDateNotices.count) times, by \(newcomer.outOfDateNotices.map(\.by))")
        #expect(newcomer.core.joinProgress?.outOfDateBy == a.id, "\(replay)")
        // A member answered: "nobody answers yet" would contradict what it was told.
        #expect(newcomer.waitingNotices.isEmpty, "\(replay): told nobody answers after a member did")
        #expect(!newcomer.removedFromSession, "\(replay): taken as a removal")
        let attempts = newcomer.membership.joinAttempts
        #expect(attempts >= 4, "\(replay): \(attempts) tries in 30 s")
        #expect(
            newcomer.violations.isEmpty && a.violations.isEmpty, "\(replay): \(newcomer.violations) \(a.violations)")
    }

    @Test("a joiner with a current invite hears no such answer")
    func currentInviteIsNotTold() throws {
        let seed = Self.seeds[0]
        let replay = SimulationSeeds.replay(seed)
        let mesh = SessionEndSimulationTests.mesh(seed: seed, count: 3, link: LinkConditions(delay: .milliseconds(4)))
        mesh.simulator.run(until: .zero + .seconds(30))
        for node in mesh.all {
            #expect(node.outOfDateNotices.isEmpty, "\(replay): \(node.address) told its invite is out of date")
            #expect(node.activeMemberIDs.count == 2, "\(replay): \(node.address) sees \(node.activeMemberIDs.count)")
        }
    }
}
