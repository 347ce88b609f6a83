import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// A member that removes without end (each removal a new key epoch): every node keeps only the
/// latest `KeyEpochs.maxTransitions` epochs, in memory, in the datagrams it opens and on disk, so
/// that its `epochs.key` stays within what a restart reads.
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter EpochChainBoundSimulation
@Suite("A long chain of key epochs (simulation)")
struct EpochChainBoundSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 2)

    @Test(
        "removals past the bound: every node keeps the latest epochs only, all end in one, and a restart goes on from the file",
        arguments: seeds)
    func theChainStaysBounded(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed, count: 3)
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 2 }, "\(replay): the mesh never formed")
        let (a, b) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)))
        // Made-up members, each removed once the removal before it is stored and handed over.
        let rotations = KeyEpochs.maxTransitions + 24
        var random = SplitMix64(seed: seed ^ 0x6570_6f63)
        var at = mesh.simulator.now + .milliseconds(100)
        for _ in 0..<rotations {
            let madeUp = NodeID(high: random.next(), low: random.next())
            a.plan(at: at) { $0.removeMember(madeUp) }
            at = at + .milliseconds(150)
        }
        // Every removal made, and every node in the last epoch.
        func settled() -> Bool {
            a.core.epochs.removed.count == rotations
                && mesh.all.allSatisfy {
                    $0.sessionID == a.sessionID && $0.core.epochs.transitions.count == KeyEpochs.maxTransitions
                }
        }
        mesh.simulator.run(until: at + .seconds(30), checkEvery: .milliseconds(500)) { _ in settled() }
        #expect(
            a.core.epochs.removed.count == rotations, "\(replay): \(a.core.epochs.removed.count) removed members kept")
        for node in mesh.all {
            let epochs = node.core.epochs
            #expect(node.sessionID == a.sessionID, "\(replay): \(node.address) is in another epoch")
            #expect(
                epochs.transitions.count == KeyEpochs.maxTransitions && epochs.forgotOldest,
                "\(replay): \(node.address) keeps \(epochs.transitions.count) epochs")
            #expect(
                node.core.earlierEpochsOpen <= KeyEpochs.maxTransitions + 2 * KeyEpochs.maxRivals,
                "\(replay): \(node.address) opens datagrams in \(node.core.earlierEpochsOpen) earlier epochs")
        }
        // b restarts from what it stored: the file names the first epoch it kept.
        let current = a.sessionID
        mesh.restart(b.address, at: mesh.simulator.now + .milliseconds(100))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            let restarted = mesh.node(b.address)
            return restarted.core.phase == .running && restarted.activeMemberIDs.count == 2
        }
        let restarted = mesh.node(b.address)
        #expect(restarted.sessionID == current, "\(replay): b came back in another epoch")
        #expect(restarted.activeMemberIDs.count == 2, "\(replay): b is not back among the others")
        #expect(restarted.core.epochs.transitions.count == KeyEpochs.maxTransitions, "\(replay)")
        #expect(restarted.core.epochs.origin == b.core.epochs.origin, "\(replay): b's first kept epoch changed")
    }
}
