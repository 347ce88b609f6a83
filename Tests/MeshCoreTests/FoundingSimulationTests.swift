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
        // The founder's own comes back from its nonce, proof included.
        let founderRestartAt = mesh.simulator.now + .seconds(1)
        mesh.restart(founder.address, at: founderRestartAt)
        mesh.simulator.run(until: founderRestartAt + .milliseconds(1))
        #expect(mesh.node(founder.address).core.founding == own, "\(replay): the founder's own after a restart")
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    /// A founder, and a second founding of its secret that joins it at 1 s and is a member by the
    /// time this returns: a member that makes its own founding id up, with a proof that it
    /// founded it. Nil (recorded) when they are not two, or did not meet.
    /// `introducing: false`: the liar refuses to introduce anyone, so a member that joins through
    /// it hears it first but is introduced by another.
    static func founderAndLiar(
        _ seed: UInt64, introducing: Bool = true
    ) -> (mesh: SimMesh, founder: SimNode, liar: SimNode, own: SessionFounding, made: SessionFounding)? {
        let mesh = Self.mesh(seed)
        let founder = mesh.addNode(joiningThrough: [], at: .zero)
        var configuration = SimNode.Configuration()
        if !introducing { configuration.settings.introductions.perDoor = 0 }
        let first = mesh.addNode(joiningThrough: [], at: .zero, configuration: configuration)
        let at = MeshInstant.zero + .seconds(1)
        mesh.restart(first.address, at: at, seeds: [founder.address])
        mesh.simulator.run(until: at + .milliseconds(1))
        let liar = mesh.node(first.address)
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            founder.core.activeMemberIDs.contains(liar.id)
        }
        guard let own = founder.core.founding, let made = liar.core.founding, own.id != made.id,
            founder.core.activeMemberIDs.contains(liar.id)
        else {
            Issue.record("\(SimulationSeeds.replay(seed)): no founder and liar in one session")
            return nil
        }
        return (mesh, founder, liar, own, made)
    }

    @Test(
        "a founding id that is not the door's is counted, and not taken even when it comes before the door's",
        arguments: seeds)
    func aMadeUpFoundingIsNotTaken(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        guard let (mesh, founder, liar, own, made) = Self.founderAndLiar(seed, introducing: false) else { return }
        // Through the liar, which it hears first, and which refuses to introduce it: the founder
        // does. Introduced, the joiner asks every member again; from then on the founder's
        // datagrams to it come late, so the liar's answer, with its id, comes first again.
        let joiner = mesh.addNode(joiningThrough: [liar.address], at: mesh.simulator.now + .milliseconds(10))
        mesh.simulator.run(for: .seconds(120), checkEvery: .milliseconds(1)) { _ in
            joiner.core.introduction(of: joiner.id) != nil
        }
        guard let door = joiner.core.introduction(of: joiner.id)?.door, door == founder.id else {
            Issue.record("\(replay): the joiner was not introduced by the founder")
            return
        }
        mesh.simulator.setLink(
            from: founder.address, to: joiner.address,
            LinkConditions(delay: .milliseconds(250), jitter: .milliseconds(2)))
        mesh.simulator.run(for: .seconds(90), checkEvery: .milliseconds(100)) { _ in
            joiner.core.founding?.founder == founder.id && joiner.core.counters.foundingMismatches > 0
                && founder.core.counters.foundingMismatches > 0
        }
        #expect(joiner.core.founding == SessionFounding(id: own.id, founder: founder.id), "\(replay)")
        #expect(founder.core.founding == own, "\(replay): the founder's own changed")
        #expect(liar.core.founding == made, "\(replay): the liar's own changed")
        #expect(founder.core.counters.foundingMismatches > 0, "\(replay): the founder counted none")
        #expect(joiner.core.counters.foundingMismatches > 0, "\(replay): the joiner counted none")
    }

    @Test(
        "a member whose door told it a made-up founding id takes the founder's once that door is removed",
        arguments: seeds)
    func aLyingDoorRemovedTakesItsFoundingWithIt(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        guard let (mesh, founder, liar, own, made) = Self.founderAndLiar(seed) else { return }
        // Through the liar, which the founder reaches late until the liar let it in.
        let misled = mesh.addNode(joiningThrough: [liar.address], at: mesh.simulator.now + .milliseconds(10))
        mesh.simulator.setLink(
            between: founder.address, and: misled.address,
            LinkConditions(delay: .milliseconds(400), jitter: .milliseconds(2)))
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(10)) { _ in
            misled.core.introduction(of: misled.id) != nil
        }
        mesh.simulator.resetLink(from: founder.address, to: misled.address)
        mesh.simulator.resetLink(from: misled.address, to: founder.address)
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(100)) { _ in
            misled.core.founding?.founder == liar.id && founder.core.introduction(of: misled.id) != nil
        }
        guard misled.core.introduction(of: misled.id)?.door == liar.id,
            misled.core.founding == SessionFounding(id: made.id, founder: liar.id)
        else {
            Issue.record("\(replay): not misled: \(String(describing: misled.core.founding))")
            return
        }
        let removal = founder.removeMember(liar.id, introduced: .keepAll)
        mesh.simulator.run(for: .seconds(90), checkEvery: .milliseconds(250)) { _ in
            founder.commandResults[removal] != nil && misled.core.founding?.founder == founder.id
        }
        #expect(misled.core.introduction(of: misled.id)?.door == founder.id, "\(replay): introduced again")
        #expect(
            misled.core.founding == SessionFounding(id: own.id, founder: founder.id),
            "\(replay): \(String(describing: misled.core.founding))")
    }
}
