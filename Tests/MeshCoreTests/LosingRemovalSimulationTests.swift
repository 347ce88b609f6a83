import MeshCore
import MeshTestKit
import Testing

/// Two removals at the same moment where one removes the other's author: that one stands, and
/// the member the other removed stays. It may hear of its removal before the rotation that keeps
/// it reaches it; it waits for that rotation instead of stopping at once.
@Suite("Losing removal (simulation)")
struct LosingRemovalSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 6)

    @Test(
        "a removes b while b removes c: a's rotation stands, b stops, c stays in a's epoch with everyone else",
        arguments: seeds)
    func memberRemovedByTheLosingRotationStays(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed)
        let (a, b, c) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 3 }, "\(replay): the mesh never formed")
        let at = mesh.simulator.now + .milliseconds(100)
        a.plan(at: at) { $0.removeMember(b.id) }
        b.plan(at: at) { $0.removeMember(c.id) }
        // a's handovers are lost for a while: c hears of b's rotation, which removes it, first.
        mesh.simulator.run(until: at)
        mesh.simulator.isolate(a.address)
        mesh.simulator.run(until: at + .seconds(2))
        #expect(c.sessionID != a.sessionID, "\(replay): a's rotation reached c through the partition")
        mesh.simulator.heal()
        mesh.simulator.run(until: at + .seconds(30), checkEvery: .milliseconds(500)) { _ in b.removedFromSession }
        mesh.simulator.run(for: .seconds(15))
        #expect(b.removedFromSession, "\(replay): b was not told")
        #expect(!c.removedFromSession, "\(replay): c stopped on the notice of a rotation that lost")
        #expect(c.core.counters.removalNoticesHeld > 0, "\(replay): c never heard b's notice first: nothing was tested")
        let staying = mesh.all.filter { $0 !== b }
        for node in staying {
            #expect(node.core.phase == .running, "\(replay): \(node.address) is \(node.core.phase)")
            #expect(node.sessionID == a.sessionID, "\(replay): \(node.address) is in another epoch")
            #expect(
                node.core.epochs.removed == [b.id], "\(replay): \(node.address) removed \(node.core.epochs.removed)")
        }
    }
}
