import MeshCore
import MeshTestKit
import Testing

/// Three members removing each other in a cycle at the same moment (a removes b, b removes c,
/// c removes a): each rotation beats one other, so no pair decides; every member must still end
/// in the same epoch, whatever order the rotations reached it in.
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter RotationCycleSimulation
@Suite("Removals in a cycle (simulation)")
struct RotationCycleSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 8)

    @Test("a removes b, b removes c, c removes a, at once: the members that stay end in one epoch", arguments: seeds)
    func cycleEndsInOneEpoch(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed, count: 6)
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 5 }, "\(replay): the mesh never formed")
        let (a, b, c) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        let at = mesh.simulator.now + .milliseconds(100)
        a.plan(at: at) { $0.removeMember(b.id) }
        b.plan(at: at) { $0.removeMember(c.id) }
        c.plan(at: at) { $0.removeMember(a.id) }
        mesh.simulator.run(until: at + .seconds(60))
        let running = mesh.all.filter { $0.core.phase == .running }
        let bystanders = mesh.all.filter { $0.address.index >= 3 }
        for node in bystanders {
            #expect(node.core.phase == .running, "\(replay): bystander \(node.address) is \(node.core.phase)")
        }
        let sessions = Set(running.map(\.sessionID))
        #expect(
            sessions.count == 1,
            "\(replay): \(running.map { "\($0.address): \($0.sessionID) removed \($0.core.epochs.removed.count)" })")
        #expect(!running.filter { $0.address.index < 3 }.isEmpty, "\(replay): none of the three authors stayed")
        for node in running {
            for other in running where other !== node {
                #expect(
                    node.membership.member(other.id)?.status == .alive,
                    "\(replay): \(node.address) sees \(other.address) as \(String(describing: node.membership.member(other.id)?.status))"
                )
            }
        }
    }

    @Test(
        "three members remove the same one at once: one epoch without it, and the handovers that settle it stay few",
        arguments: seeds)
    func sameRemovalThreeTimes(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed, count: 5)
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 4 }, "\(replay): the mesh never formed")
        let removed = mesh.node(SimAddress(4))
        let at = mesh.simulator.now + .milliseconds(100)
        for index in 0..<3 { mesh.node(SimAddress(index)).plan(at: at) { $0.removeMember(removed.id) } }
        let before = mesh.all.reduce(0) { $0 + $1.core.counters.handoversSent }
        mesh.simulator.run(until: at + .seconds(60))
        let staying = mesh.all.filter { $0 !== removed }
        #expect(removed.core.phase != .running, "\(replay): the removed member is \(removed.core.phase)")
        #expect(Set(staying.map(\.sessionID)).count == 1, "\(replay): \(staying.map(\.sessionID))")
        #expect(staying.allSatisfy { $0.core.phase == .running }, "\(replay)")
        // Members that agree do not keep answering each other's lost rivals: a few handovers
        // each (every rotation to every member, the beacons' answers), not one every 250 ms.
        let sent = mesh.all.reduce(0) { $0 + $1.core.counters.handoversSent } - before
        #expect(sent < 150, "\(replay): \(sent) handovers in 60 s")
    }
}
