import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// `end()` ends the session for every member (PROTOCOL.md §4, ending a session): each member
/// told passes it on, records it, and leaves. A forged end, one for another key epoch, and one by
/// a member removed since change nothing.
///
///     SIM_SEED=N swift test --filter SessionEnd
@Suite("Ending a session in simulation")
struct SessionEndSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 4)

    static func mesh(seed: UInt64, count: Int, link: LinkConditions) -> SimMesh {
        let mesh = SimMesh(seed: seed, link: link)
        for index in 0..<count {
            mesh.addNode(joiningThrough: index == 0 ? [] : [SimAddress(0)], at: .zero + .milliseconds(50 * index))
        }
        return mesh
    }

    @Test("one member ends it under loss: every member is told, records it and stops", arguments: seeds)
    func endUnderLoss(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let loss = [0.05, 0.1, 0.2][Int(seed % 3)]
        let mesh = Self.mesh(
            seed: seed, count: 6,
            link: LinkConditions(
                delay: .milliseconds(3), jitter: .milliseconds(2),
                lossProbability: loss))
        let ender = mesh.node(SimAddress(Int(seed % 6)))
        // Formed first: at 20% loss a joiner whose first tries are lost waits a few seconds more.
        mesh.simulator.run(until: .zero + .seconds(30), checkEvery: .milliseconds(250)) { _ in
            mesh.all.allSatisfy { $0.activeMemberIDs.count == 5 }
        }
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 5 }, "\(replay): the mesh never formed")
        ender.plan(at: mesh.simulator.now + .milliseconds(100)) { $0.end() }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            mesh.all.allSatisfy { $0.core.phase == .stopped }
        }
        for node in mesh.all {
            #expect(node.core.phase == .stopped, "\(replay): \(node.address) still runs")
            #expect(node.sessionEndedBy == ender.id, "\(replay): \(node.address) was not told who ended it")
            #expect(node.storage.ended != nil, "\(replay): \(node.address) did not record the end")
        }
        #expect(ender.failedCommands.isEmpty, "\(replay): \(ender.failedCommands)")
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    @Test(
        "an end sent the moment a member joined reaches it: the ender waits for its earlier messages too",
        arguments: seeds)
    func endRightAfterAJoin(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(1)))
        let ender = mesh.addNode(joiningThrough: [], at: .zero)
        let joiner = mesh.addNode(joiningThrough: [ender.address], at: .zero + .milliseconds(100))
        // The ender's first journal messages to the joiner go out before its record does, so the
        // joiner cannot open them yet; the end, acknowledged out of order, waits behind them.
        mesh.simulator.run(for: .seconds(2), checkEvery: .milliseconds(1)) { _ in
            ender.activeMemberIDs.contains(joiner.id) && joiner.activeMemberIDs.contains(ender.id)
        }
        ender.plan(at: mesh.simulator.now + .milliseconds(1)) { $0.end() }
        mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(100)) { _ in
            mesh.all.allSatisfy { $0.core.phase == .stopped }
        }
        #expect(joiner.sessionEndedBy == ender.id, "\(replay): the joiner never heard the end")
        #expect(joiner.core.phase == .stopped && ender.core.phase == .stopped, "\(replay)")
    }

    @Test("a forged end, one for an old epoch, and one by a removed member change nothing", arguments: seeds.prefix(2))
    func badEnds(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed: seed, count: 4, link: LinkConditions(delay: .milliseconds(2)))
        let (a, b, c, mallory) = (
            mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)),
            mesh.node(SimAddress(3))
        )
        mesh.simulator.run(until: .zero + .seconds(4))
        // Signed by the wrong key: b's name on it, mallory's signature.
        let forged = SessionEnd(signingKey: b.identity.publicKey, session: a.sessionID)
            .signed(by: Ed25519Authority(identity: mallory.identity))
        // A genuine end by mallory, of the epoch that is about to be left.
        let oldEpoch = SessionEnd(signingKey: mallory.identity.publicKey, session: a.sessionID)
            .signed(by: Ed25519Authority(identity: mallory.identity))
        mallory.sendJournal(.end(forged), to: a.id)
        mesh.simulator.run(until: .zero + .seconds(5))
        #expect(a.core.counters.endsRefused == 1, "\(replay): the forged end was not refused (was it delivered?)")
        a.removeMember(mallory.id)
        mesh.simulator.run(until: .zero + .seconds(8))
        #expect(mesh.removed == [mallory.id], "\(replay): mallory was not removed")
        // Both through mallory's channel of the old epoch, and handed to b by c as if passed on.
        mallory.sendJournal(.end(oldEpoch), to: b.id)
        c.sendJournal(.end(oldEpoch), to: b.id)
        mallory.end()
        mesh.simulator.run(until: .zero + .seconds(20))
        for node in [a, b, c] {
            #expect(node.core.phase != .stopped, "\(replay): \(node.address) stopped")
            #expect(
                node.sessionEndedBy == nil,
                "\(replay): \(node.address) took an end by \(String(describing: node.sessionEndedBy))")
            #expect(node.storage.ended == nil, "\(replay): \(node.address) recorded an end")
        }
        #expect(b.core.counters.endsRefused >= 1, "\(replay): the old epoch's end was not refused (was it delivered?)")
    }

    @Test(
        "a member offline during the end learns it from the first member that knows and starts again; bad ends still change nothing",
        arguments: seeds.prefix(3))
    func anOfflineMemberLearnsTheEndLater(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let link = LinkConditions(delay: .milliseconds(3), jitter: .milliseconds(1))
        let mesh = Self.mesh(seed: seed, count: 4, link: link)
        let (a, b, c, away) = (
            mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)),
            mesh.node(SimAddress(3))
        )
        mesh.simulator.run(until: .zero + .seconds(6))
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 3 }, "\(replay): the mesh never formed")
        // Asleep: the others see it dead and end the session without it.
        mesh.simulator.isolate(away.address)
        let gone = mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            [a, b, c].allSatisfy { !$0.activeMemberIDs.contains(away.id) }
        }
        #expect(gone == .satisfied, "\(replay): the others never saw the sleeper gone")
        a.end()
        mesh.simulator.run(for: .seconds(10), checkEvery: .milliseconds(100)) { _ in
            [a, b, c].allSatisfy { $0.core.phase == .stopped }
        }
        #expect([a, b, c].allSatisfy { $0.core.phase == .stopped && $0.storage.ended != nil }, "\(replay)")
        #expect(away.core.phase != .stopped && away.sessionEndedBy == nil, "\(replay): the sleeper heard the end")
        mesh.simulator.heal()
        mesh.simulator.run(for: .seconds(5))
        #expect(away.core.phase != .stopped, "\(replay): the sleeper stopped with nobody left to tell it")

        // Ends that are not one, as an ended member would send them: a forged signature, another
        // epoch, an author who is no member. Refused, counted, and the sleeper stays.
        let stranger = NodeIdentity.generate()
        let forged = SessionEnd(signingKey: a.identity.publicKey, session: away.sessionID)
            .signed(by: Ed25519Authority(identity: c.identity))
        let otherEpoch = SessionEnd(signingKey: a.identity.publicKey, session: SessionID(value: 42))
            .signed(by: Ed25519Authority(identity: a.identity))
        let notAMember = SessionEnd(signingKey: stranger.publicKey, session: away.sessionID)
            .signed(by: Ed25519Authority(identity: stranger))
        let refusedBefore = away.core.counters.endsRefused
        var sealer = b.core.codec
        for (index, statement) in [forged, otherEpoch, notAMember].enumerated() {
            let nonce = try #require(PacketNonce(raw: (0..<24).map { UInt8(truncatingIfNeeded: $0 &+ index * 31) }))
            let datagram = sealer.sealHello([.sessionEnd(statement)], nonce: nonce)
            mesh.simulator.inject(Array(datagram.readableBytesView), from: b.address, to: away.address)
        }
        mesh.simulator.run(for: .seconds(1))
        #expect(away.core.counters.endsRefused == refusedBefore + 3, "\(replay)")
        #expect(away.core.phase != .stopped && away.storage.ended == nil, "\(replay): a bad end was taken")

        // b's data dir is started again (`groupmesh run` refuses it): it tells the members it
        // remembers, and the sleeper takes the end as if it had been there.
        let restarted = SimEndedNode(restarting: b, seed: seed)
        mesh.simulator.restart(b.address, with: restarted)
        let told = mesh.simulator.run(for: .seconds(5), checkEvery: .milliseconds(50)) { _ in
            away.core.phase == .stopped
        }
        #expect(told == .satisfied, "\(replay): the sleeper was never told")
        #expect(away.sessionEndedBy == a.id, "\(replay): \(String(describing: away.sessionEndedBy))")
        #expect(away.storage.ended == a.storage.ended, "\(replay): the sleeper did not record the end")
        #expect((restarted.notice?.noticesSent ?? 0) > 0, "\(replay)")
        mesh.simulator.run(for: .seconds(3))
        #expect(restarted.isDone, "\(replay): the notice did not stop after its two seconds")
    }

    @Test(
        "a member back while the ender still waits for acknowledgements is answered with the end and leaves",
        arguments: seeds.prefix(2))
    func aMemberBackDuringTheEndIsAnswered(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = Self.mesh(seed: seed, count: 3, link: LinkConditions(delay: .milliseconds(3)))
        let (ender, slow, away) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        mesh.simulator.run(until: .zero + .seconds(5))
        mesh.simulator.isolate(away.address)
        let gone = mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            !ender.activeMemberIDs.contains(away.id)
        }
        #expect(gone == .satisfied, "\(replay): the ender never saw it gone")
        // The other member is cut off now, so the ender waits out its grace for an acknowledgement;
        // the one that was away is back, and says something to the ender.
        mesh.simulator.isolate(slow.address)
        ender.end()
        mesh.simulator.run(for: .milliseconds(200))
        #expect(ender.core.phase != .stopped, "\(replay): the ender did not wait")
        away.plan(at: mesh.simulator.now + .milliseconds(1)) { node in
            node.inject([.ping(Ping(token: 7))], to: ender.address, member: ender.id)
        }
        // Told, it passes the end on to the members it holds alive, and waits its grace at most for
        // those cut off (the slow one, when it has not seen it gone).
        let told = mesh.simulator.run(for: .seconds(2) + away.core.settings.endGrace, checkEvery: .milliseconds(10)) {
            _ in
            away.core.phase == .stopped
        }
        #expect(told == .satisfied, "\(replay): the member back was not told")
        #expect(away.sessionEndedBy == ender.id, "\(replay)")
        // Its own datagrams came too (it is back): answered at most once a second.
        #expect(
            (1...3).contains(ender.core.counters.endsAnswered), "\(replay): \(ender.core.counters.endsAnswered) answers"
        )
    }
}
