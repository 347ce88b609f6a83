import Foundation
import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The session's founding id (PROTOCOL.md §3, "Founding"): the founder names the session by the
/// hash of its id and a nonce, each member takes the id from the door that introduced it, and
/// learns who founded the session from the founder's own version frame.
///
///     SIM_SEED=N swift test --filter FoundingSimulation
@Suite("Founding ids in simulation")
struct FoundingSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    static func mesh(_ seed: UInt64) -> SimMesh {
        SimMesh(seed: seed, link: IntroductionSimulationTests.link(seed))
    }

    @Test("only the founder's nonce proves a founding id: not another nonce, not another member's")
    func aFoundingIsProvedByItsNonceAlone() throws {
        let founder = NodeID(high: 1, low: 2)
        let nonce = [UInt8](repeating: 7, count: FoundingID.nonceByteCount)
        let id = FoundingID(founder: founder, nonce: nonce)
        #expect(id.isMade(by: founder, nonce: nonce))
        #expect(!id.isMade(by: NodeID(high: 1, low: 3), nonce: nonce))
        #expect(!id.isMade(by: founder, nonce: [UInt8](repeating: 8, count: FoundingID.nonceByteCount)))
        #expect(!id.isMade(by: founder, nonce: Array(nonce.prefix(8))))
        #expect(FoundingID(hex: id.hex) == id)
        #expect(FoundingID(bytes: [1, 2, 3]) == nil)
        // What members.json keeps: a value that does not decode is as none (the door tells again).
        var remembered = RememberedMembers()
        remembered.keep(SessionFounding(id: id, founder: founder))
        let decoded = try JSONDecoder().decode(RememberedMembers.self, from: JSONEncoder().encode(remembered))
        #expect(decoded.sessionFounding == SessionFounding(id: id, founder: founder))
        remembered.foundedBy = "not an id"
        #expect(remembered.sessionFounding == nil)
        remembered.keep(nil)
        #expect(remembered.founding == nil && remembered.foundedBy == nil)
    }

    @Test("every member takes the founder's id from its door, and a restart keeps it", arguments: seeds)
    func everyMemberLearnsTheFounding(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed)
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        // A chain of doors: each joins through the one before once that one is introduced, so
        // most learn the id second hand, some before their door holds it.
        var nodes = [founder]
        for _ in 1...3 {
            let door = nodes[nodes.count - 1]
            mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
                door === founder || door.core.introduction(of: door.id) != nil
            }
            nodes.append(mesh.addNode(joiningThrough: [door.address], at: mesh.simulator.now + .milliseconds(10)))
        }
        guard let own = founder.core.founding, own.founder == founder.id, own.nonce != nil else {
            Issue.record("\(replay): the founder holds no founding of its own")
            return
        }
        mesh.simulator.run(for: .seconds(90), checkEvery: .milliseconds(250)) { _ in
            nodes.allSatisfy { $0.core.founding?.id == own.id && $0.core.founding?.founder == founder.id }
        }
        for node in nodes.dropFirst() {
            let founding = node.core.founding
            #expect(founding?.id == own.id, "\(replay): \(node.address) holds \(founding?.id.hex ?? "none")")
            #expect(founding?.founder == founder.id, "\(replay): \(node.address) names no founder")
            #expect(founding?.nonce == nil, "\(replay): \(node.address) holds a nonce")
            #expect(node.core.counters.foundingMismatches == 0, "\(replay): \(node.address)")
        }
        // Kept in members.json: known at once after a restart, before any frame.
        let last = nodes[nodes.count - 1]
        let restartAt = mesh.simulator.now + .seconds(1)
        mesh.restart(last.address, at: restartAt)
        mesh.simulator.run(until: restartAt + .milliseconds(1))
        let restarted = mesh.node(last.address)
        #expect(restarted.core.founding == SessionFounding(id: own.id, founder: founder.id), "\(replay)")
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    @Test("a member naming a founding id of its own is counted, and believed by nobody", arguments: seeds)
    func aMadeUpFoundingIsNotTaken(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed)
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        // A second founding of the same secret: a member that makes its own id up, with a proof.
        let liar = mesh.addNode(joiningThrough: [], at: .zero)
        let joiner = mesh.addNode(joiningThrough: [founder.address], at: .zero + .milliseconds(300))
        let restartAt = mesh.simulator.now + .seconds(2)
        mesh.restart(liar.address, at: restartAt, seeds: [founder.address])
        mesh.simulator.run(until: restartAt + .milliseconds(1))
        let liarNow = mesh.node(liar.address)
        guard let own = founder.core.founding, let made = liarNow.core.founding, own.id != made.id else {
            Issue.record("\(replay): the two foundings are not two")
            return
        }
        mesh.simulator.run(for: .seconds(90), checkEvery: .milliseconds(250)) { _ in
            founder.core.counters.foundingMismatches > 0 && joiner.core.counters.foundingMismatches > 0
                && joiner.core.founding?.founder == founder.id
        }
        #expect(joiner.core.introduction(of: joiner.id)?.door == founder.id, "\(replay): the joiner's door")
        #expect(joiner.core.founding == SessionFounding(id: own.id, founder: founder.id), "\(replay)")
        #expect(founder.core.founding == own, "\(replay): the founder's own changed")
        #expect(founder.core.counters.foundingMismatches > 0, "\(replay): the founder counted none")
        #expect(joiner.core.counters.foundingMismatches > 0, "\(replay): the joiner counted none")
    }
}
