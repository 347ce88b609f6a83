import MeshCore
import MeshTestKit
import Testing

/// Epochs that lost to a competing rotation, across a restart: the members keep them
/// (`rivals.key`), so that one still in such an epoch is handed the winner by members that
/// restarted since it was cut off.
@Suite("Lost epochs across a restart (simulation)")
struct LostEpochRestartSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    @Test(
        "a member cut off in the epoch that lost is handed the winner after every other member restarted",
        arguments: seeds)
    func memberInTheLosingEpochAfterEveryoneRestarted(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed, count: 5)
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 4 }, "\(replay): the mesh never formed")
        let (a, b, c, d, e) = (
            mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)), mesh.node(SimAddress(3)),
            mesh.node(SimAddress(4))
        )
        // e's machine is gone, and each half of a split session removes it: two rotations out
        // of one epoch, each taken by its own half.
        mesh.simulator.crash(e.address)
        mesh.simulator.partition([[a.address, c.address], [b.address, d.address]])
        let at = mesh.simulator.now + .milliseconds(100)
        a.plan(at: at) { $0.removeMember(e.id) }
        b.plan(at: at) { $0.removeMember(e.id) }
        mesh.simulator.run(until: at + .seconds(10), checkEvery: .milliseconds(250)) { _ in
            a.core.epochs.transitions.count == 1 && b.core.epochs.transitions.count == 1
                && c.sessionID == a.sessionID && d.sessionID == b.sessionID
        }
        let ours = try #require(a.core.epochs.transitions.last?.rotation, "\(replay): a's removal was not made")
        let theirs = try #require(b.core.epochs.transitions.last?.rotation, "\(replay): b's removal was not made")
        #expect(c.sessionID == a.sessionID && d.sessionID == b.sessionID, "\(replay): a half did not take its rotation")
        let winner = KeyEpochs.winner(of: ours, [theirs])
        // The partner of the losing author stays in the losing epoch, cut off; the others meet
        // and end in the winner's.
        let stranded = winner == ours ? d : c
        let others = [a, b, c, d].filter { $0 !== stranded }.map(\.address)
        mesh.simulator.partition([[stranded.address]])
        // Past the beacons it sends in the epoch both rotations left (which members that
        // restarted can still open): from then on it speaks only the epoch that lost.
        let settings = NodeSettings(membership: .lan)
        mesh.simulator.run(for: settings.epochBeaconInterval * (settings.epochBeacons + 2))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            others.allSatisfy { mesh.node($0).sessionID == winner.nextSession }
        }
        for address in others {
            #expect(
                mesh.node(address).sessionID == winner.nextSession, "\(replay): \(address) is not in the winner's epoch"
            )
        }
        #expect(stranded.sessionID != winner.nextSession, "\(replay): the stranded member was handed the winner early")
        // A power cut: every one of them restarts; only their disks know the epoch that lost.
        for address in others { mesh.restart(address, at: mesh.simulator.now + .milliseconds(100)) }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            others.allSatisfy { mesh.node($0).activeMemberIDs.count >= 2 }
        }
        mesh.simulator.heal()
        mesh.simulator.run(for: .seconds(120), checkEvery: .milliseconds(500)) { _ in
            stranded.sessionID == winner.nextSession
                && ([stranded.address] + others).allSatisfy { mesh.node($0).activeMemberIDs.count == 3 }
        }
        #expect(
            stranded.sessionID == winner.nextSession,
            "\(replay): the stranded member is still in \(stranded.sessionID), the winner is \(winner.nextSession)")
        for address in [stranded.address] + others {
            let node = mesh.node(address)
            #expect(node.core.phase == .running, "\(replay): \(address) is \(node.core.phase)")
            #expect(node.activeMemberIDs.count == 3, "\(replay): \(address) sees \(node.activeMemberIDs.count) others")
        }
    }
}
