import MeshCore
import MeshTestKit
import Testing

/// A member cut off in an epoch that lost a removal race, back after the beacons: members that
/// hold that epoch's secret hand it the winner (those that restarted since too: they keep what
/// lost in `rivals.key`), and members that never held it send a beacon, in the epoch both
/// rotations left, to a member whose datagrams come in an epoch they cannot open.
@Suite("Lost epochs across a restart (simulation)")
struct LostEpochRestartSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    /// Where each test starts: the stranded member still in the epoch that lost, cut off past
    /// its beacons, the three others in the winner's epoch.
    struct Stranded {
        var mesh: SimMesh
        var replay: String
        var stranded: SimNode
        /// The author of the rotation that lost (the stranded member's partner in its half).
        var losingAuthor: SimAddress
        var others: [SimAddress]
        var winner: KeyRotation
    }

    /// Five members; e's machine is gone, and each half of a split session removes it at once
    /// (two rotations out of one epoch, each taken by its own half). The partner of the losing
    /// author stays cut off in the losing epoch; the others meet and end in the winner's.
    /// `authorGoneFirst`: the losing author's machine is gone before the halves meet, so that
    /// no member of the other half ever holds the losing epoch.
    static func strand(seed: UInt64, authorGoneFirst: Bool = false) throws -> Stranded {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed, count: 5)
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 4 }, "\(replay): the mesh never formed")
        let (a, b, c, d, e) = (
            mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)), mesh.node(SimAddress(3)),
            mesh.node(SimAddress(4))
        )
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
        let (stranded, losingAuthor) = winner == ours ? (d, b) : (c, a)
        if authorGoneFirst { mesh.simulator.crash(losingAuthor.address) }
        let others = [a, b, c, d].filter { $0 !== stranded && !(authorGoneFirst && $0 === losingAuthor) }.map(\.address)
        mesh.simulator.partition([[stranded.address]])
        // Past the beacons it sends in the epoch both rotations left (which every member can
        // open): from then on it speaks only the epoch that lost.
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
        return Stranded(
            mesh: mesh, replay: replay, stranded: stranded, losingAuthor: losingAuthor.address, others: others,
            winner: winner)
    }

    /// Heals, and expects the stranded member in the winner's epoch, every member in `staying`
    /// alive to the others.
    static func expectHandedTheWinner(_ setup: Stranded, staying: [SimAddress]) {
        let (mesh, replay, stranded, winner) = (setup.mesh, setup.replay, setup.stranded, setup.winner)
        let everyone = [stranded.address] + staying
        mesh.simulator.heal()
        mesh.simulator.run(for: .seconds(120), checkEvery: .milliseconds(500)) { _ in
            stranded.sessionID == winner.nextSession
                && everyone.allSatisfy { mesh.node($0).activeMemberIDs.count == staying.count }
        }
        #expect(
            stranded.sessionID == winner.nextSession,
            "\(replay): the stranded member is still in \(stranded.sessionID), the winner is \(winner.nextSession)")
        for address in everyone {
            let node = mesh.node(address)
            #expect(node.core.phase == .running, "\(replay): \(address) is \(node.core.phase)")
            #expect(
                node.activeMemberIDs.count == staying.count,
                "\(replay): \(address) sees \(node.activeMemberIDs.count) others")
        }
    }

    @Test(
        "a member cut off in the epoch that lost is handed the winner after every other member restarted",
        arguments: seeds)
    func memberInTheLosingEpochAfterEveryoneRestarted(seed: UInt64) throws {
        let setup = try Self.strand(seed: seed)
        let mesh = setup.mesh
        // A power cut: every one of them restarts; only their disks know the epoch that lost.
        for address in setup.others { mesh.restart(address, at: mesh.simulator.now + .milliseconds(100)) }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            setup.others.allSatisfy { mesh.node($0).activeMemberIDs.count == 2 }
        }
        Self.expectHandedTheWinner(setup, staying: setup.others)
    }

    @Test(
        "a member cut off in the epoch that lost is handed the winner once the only other member in it is gone",
        arguments: seeds)
    func memberInTheLosingEpochAfterItsAuthorLeft(seed: UInt64) throws {
        let setup = try Self.strand(seed: seed)
        // The only member that was in the losing epoch with it is gone for good: the others hold
        // that epoch only if its author handed it to them.
        setup.mesh.simulator.crash(setup.losingAuthor)
        Self.expectHandedTheWinner(setup, staying: setup.others.filter { $0 != setup.losingAuthor })
    }

    @Test(
        "a member cut off in the epoch that lost, whose author was gone before anyone else heard of it, is handed the winner",
        arguments: seeds)
    func memberInALosingEpochNobodyElseHeld(seed: UInt64) throws {
        let setup = try Self.strand(seed: seed, authorGoneFirst: true)
        for address in setup.others {
            #expect(
                setup.mesh.node(address).core.epochs.secret(of: setup.stranded.sessionID) == nil,
                "\(setup.replay): \(address) holds the losing epoch: nothing is tested")
        }
        Self.expectHandedTheWinner(setup, staying: setup.others)
    }
}
