import MeshCore
import MeshTestKit
import Testing

/// A lost laptop is offline long before its owner thinks of removing it: by then every member
/// has forgotten it, yet it still holds the session's secret. `remove-member` names it from what
/// the node remembers of former members (`RememberedMembers.former`), also across a restart.
@Suite("Removing a forgotten member (simulation)")
struct ForgottenMemberRemovalSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    @Test(
        "a member offline until forgotten is removed by name after the remover restarted; back, it is told and stops",
        arguments: seeds)
    func forgottenMemberIsRemovedByName(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed)
        let (remover, laptop) = (SimAddress(0), mesh.node(SimAddress(3)))
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 3 }, "\(replay): the mesh never formed")
        let name = laptop.address.description
        let others = { mesh.all.filter { $0.address != laptop.address } }

        mesh.simulator.crash(laptop.address)
        mesh.simulator.run(for: .seconds(180), checkEvery: .milliseconds(500)) { _ in
            others().allSatisfy { $0.core.membership.member(laptop.id) == nil }
        }
        #expect(
            others().allSatisfy { $0.core.membership.member(laptop.id) == nil },
            "\(replay): the laptop was never forgotten")
        #expect(mesh.node(remover).core.resolveMember(name) == .failure(.unknown(name)), "\(replay)")

        mesh.restart(remover, at: mesh.simulator.now + .milliseconds(100))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            mesh.node(remover).activeMemberIDs.count == 2
        }
        let restarted = mesh.node(remover)
        #expect(restarted.activeMemberIDs.count == 2, "\(replay): the remover did not rejoin")
        #expect(restarted.core.resolveRemovable(String(laptop.id.hex.prefix(8))) == .success(laptop.id), "\(replay)")
        guard case let .success(named) = restarted.core.resolveRemovable(name), named == laptop.id else {
            Issue.record("\(replay): \(name) names \(restarted.core.resolveRemovable(name))")
            return
        }

        restarted.plan(at: mesh.simulator.now + .milliseconds(100)) { $0.removeMember(named) }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            others().allSatisfy { $0.core.epochs.removed.contains(laptop.id) && $0.sessionID == restarted.sessionID }
        }
        for node in others() {
            #expect(
                node.core.epochs.removed == [laptop.id],
                "\(replay): \(node.address) removed \(node.core.epochs.removed)")
            #expect(node.sessionID == restarted.sessionID, "\(replay): \(node.address) is in another epoch")
        }
        #expect(restarted.failedCommands.isEmpty, "\(replay): \(restarted.failedCommands)")
        // Removed: found still, for the removal to say it was already removed.
        #expect(restarted.core.resolveRemovable(name) == .success(laptop.id), "\(replay)")

        // The laptop comes back with the epoch it knew, long after the beacons that told the
        // removed: nobody takes it in, and the first member it reaches tells it.
        mesh.restart(laptop.address, at: mesh.simulator.now + .seconds(1))
        mesh.simulator.run(for: .seconds(30))
        let back = mesh.node(laptop.address)
        #expect(back.removedFromSession && back.core.phase == .stopped, "\(replay): the laptop back was not told")
        #expect(back.sessionID != restarted.sessionID, "\(replay): the laptop is in the new epoch")
        for node in others() {
            #expect(
                node.core.membership.member(laptop.id).map { $0.status.isGone } ?? true,
                "\(replay): \(node.address) sees the removed laptop \(String(describing: node.core.membership.member(laptop.id)?.status))"
            )
        }
    }
}
