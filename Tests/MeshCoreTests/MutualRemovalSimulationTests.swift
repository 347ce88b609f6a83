import MeshCore
import MeshTestKit
import Testing

/// Two members removing each other at the same moment: one rotation stands for everyone, its
/// author stays, the other is told and stops, and the members that stay hear each other.
@Suite("Mutual removal (simulation)")
struct MutualRemovalSimulationTests {
    /// Seed 22 too: its bystanders took the rotation that lost, and were never handed the winner.
    static let seeds = Array(Set(SimulationSeeds.from(defaultCount: 6) + [22])).sorted()

    /// `count` members under 0–10% loss (by seed), run until each sees the others (at most
    /// 30 s): the start of every removal race here.
    static func formedMesh(seed: UInt64, count: Int = 4) -> SimMesh {
        let loss = [0.0, 0.05, 0.1][Int(seed % 3)]
        let mesh = SessionEndSimulationTests.mesh(
            seed: seed, count: count,
            link: LinkConditions(delay: .milliseconds(4), jitter: .milliseconds(2), lossProbability: loss))
        mesh.simulator.run(until: .zero + .seconds(30), checkEvery: .milliseconds(250)) { _ in
            mesh.all.allSatisfy { $0.activeMemberIDs.count == count - 1 }
        }
        return mesh
    }

    @Test(
        "two members remove each other at once, under loss: one epoch, one survivor of the two, nobody else lost",
        arguments: seeds)
    func mutualRemovalEndsInOneEpoch(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.formedMesh(seed: seed)
        let (a, b) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)))
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 3 }, "\(replay): the mesh never formed")
        // The same instant on both: each removal is stored before either hears of the other.
        let at = mesh.simulator.now + .milliseconds(100)
        a.plan(at: at) { $0.removeMember(b.id) }
        b.plan(at: at) { $0.removeMember(a.id) }
        mesh.simulator.run(until: at + .seconds(30), checkEvery: .milliseconds(500)) { _ in
            a.removedFromSession || b.removedFromSession
        }
        mesh.simulator.run(for: .seconds(15))
        #expect(
            a.removedFromSession != b.removedFromSession,
            "\(replay): removed: a \(a.removedFromSession), b \(b.removedFromSession)")
        let (survivor, loser) = a.removedFromSession ? (b, a) : (a, b)
        let staying = [survivor] + mesh.all.filter { $0.address.index >= 2 }
        for node in staying {
            #expect(node.core.phase == .running, "\(replay): \(node.address) is \(node.core.phase)")
            #expect(node.sessionID == survivor.sessionID, "\(replay): \(node.address) is in another epoch")
            #expect(
                node.core.epochs.removed == [loser.id],
                "\(replay): \(node.address) removed \(node.core.epochs.removed)")
            for other in staying where other !== node {
                let status = node.membership.member(other.id)?.status
                #expect(
                    status == .alive,
                    "\(replay): \(node.address) sees \(other.address) as \(String(describing: status))")
            }
        }
        // Messages between those who stay go through.
        let sent = staying.map { node in
            node.sendMessage(Array("from \(node.address)".utf8), mode: .reliable)
            return node.sentMessages.count
        }
        mesh.simulator.run(for: .seconds(15))
        for (node, count) in zip(staying, sent) {
            let request = node.sentMessages[count - 1].request
            #expect(
                node.completions[request] == [:],
                "\(replay): \(node.address)'s message: \(String(describing: node.completions[request]))")
        }
    }
}
