import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// A removed member is told, with the signed rotation as proof, and stops; nobody else is, and a
/// notice that is not one changes nothing.
@Suite("Removal notice (simulation)")
struct RemovalNoticeSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    @Test("the removed member learns it was removed, under loss too; the others stay", arguments: seeds)
    func removedMemberIsTold(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        var link = LinkConditions(delay: .milliseconds(5))
        link.lossProbability = 0.2
        let mesh = SessionEndSimulationTests.mesh(seed: seed, count: 3, link: link)
        let (a, b, c) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        // Under a fifth lost, forming can take a while: the removal is of a member all know.
        mesh.simulator.run(until: .zero + .seconds(30), checkEvery: .milliseconds(250)) { _ in
            mesh.all.allSatisfy { $0.activeMemberIDs.count == 2 }
        }
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 2 }, "\(replay): the mesh never formed")
        a.removeMember(c.id)
        mesh.simulator.run(for: .seconds(24)) { _ in c.removedFromSession }
        #expect(mesh.removed == [c.id], "\(replay): c was not removed")
        #expect(c.removedFromSession, "\(replay): c was never told")
        #expect(!a.removedFromSession && !b.removedFromSession, "\(replay)")
        // The core stops it, whatever drives it: it sends nothing more.
        #expect(c.core.phase == .stopped, "\(replay): c is \(c.core.phase)")
        let sent = c.core.counters.datagramsSent
        mesh.simulator.run(for: .seconds(10))
        #expect(c.core.counters.datagramsSent == sent, "\(replay): the removed member kept sending")
        #expect(a.core.phase == .running && b.core.phase == .running, "\(replay)")
    }

    @Test("a notice that names another member, is signed by no member, or carries another's signature changes nothing")
    func foreignNoticesAreRefused() throws {
        let mesh = SessionEndSimulationTests.mesh(seed: 7, count: 3, link: LinkConditions(delay: .milliseconds(2)))
        let (a, b, c) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        mesh.simulator.run(until: .zero + .seconds(4))
        // Signed by b, removing a (not c), out of the epoch they are all in: c is not the one named.
        let aboutA = KeyRotation(
            previousSession: c.sessionID, nextSession: SessionID(value: 42), removed: [a.id],
            signingKey: b.identity.publicKey
        ).signed(by: Ed25519Authority(identity: b.identity))
        // Removing c, signed by an identity that is no member's.
        let stranger = NodeIdentity.generate()
        let elsewhere = KeyRotation(
            previousSession: c.sessionID, nextSession: SessionID(value: 43), removed: [c.id],
            signingKey: stranger.publicKey
        ).signed(by: Ed25519Authority(identity: stranger))
        // Removing c, with a signature that is not its author's.
        let forged = KeyRotation(
            previousSession: c.sessionID, nextSession: SessionID(value: 44), removed: [c.id],
            signingKey: a.identity.publicKey
        ).signed(by: Ed25519Authority(identity: b.identity))
        let refusedBefore = c.core.counters.handoversRefused
        // Hello datagrams of the session, as a removal notice travels, sealed with b's keys.
        var sealer = b.core.codec
        for (index, rotation) in [aboutA, elsewhere, forged].enumerated() {
            let nonce = try #require(PacketNonce(raw: (0..<24).map { UInt8(truncatingIfNeeded: $0 &+ index * 31) }))
            let datagram = sealer.sealHello([.removalNotice(rotation)], nonce: nonce)
            mesh.simulator.inject(Array(datagram.readableBytesView), from: b.address, to: c.address)
        }
        mesh.simulator.run(until: .zero + .seconds(5))
        #expect(!c.removedFromSession)
        #expect(c.core.counters.handoversRefused == refusedBefore + 3)
        #expect(c.outOfDateNotices.isEmpty, "one member's word against the members alive to c")
    }

    @Test(
        "a hello of the epoch left, in a member's name from an address nothing vouches for, draws a check no larger than itself there, once a handover interval, never the handover, and does not keep the member's own address from being checked"
    )
    func helloFromAnUnvouchedAddressIsChecked() throws {
        let mesh = SessionEndSimulationTests.mesh(seed: 7, count: 3, link: LinkConditions(delay: .milliseconds(2)))
        let (a, b, c) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        mesh.simulator.run(until: .zero + .seconds(4))
        // Anyone who held the epoch's key (c, about to be removed) can seal a hello in b's name.
        var forger = b.core.codec
        a.removeMember(c.id)
        mesh.simulator.run(until: .zero + .seconds(6))
        #expect(b.sessionID == a.sessionID && b.sessionID != forger.sessionID)
        let (victim, other) = (SimAddress(40), SimAddress(41))
        mesh.simulator.traceOptions = .record
        var forgedSize = 0
        var nonces = 0
        func forge(from source: SimAddress) throws {
            nonces += 1
            let nonce = try #require(PacketNonce(raw: (0..<24).map { UInt8(truncatingIfNeeded: $0 &+ nonces * 29) }))
            let datagram = forger.sealHello([.ping(Ping(token: 7))], nonce: nonce)
            forgedSize = datagram.readableBytes
            mesh.simulator.inject(Array(datagram.readableBytesView), from: source, to: a.address)
        }
        func sent(to address: SimAddress) -> [Int] {
            mesh.simulator.trace.compactMap { event -> Int? in
                if case let .sent(from, to, bytes) = event.kind, from == a.address, to == address { return bytes.count }
                return nil
            }
        }
        for _ in 0..<10 { try forge(from: victim) }
        // Another address of "b" in the same interval is checked too.
        try forge(from: other)
        mesh.simulator.run(until: .zero + .milliseconds(6_300))
        #expect(sent(to: victim).count == 1, "\(sent(to: victim))")
        #expect(sent(to: other).count == 1, "\(sent(to: other))")
        // A handover interval later, the victim's address is checked again: once.
        for _ in 0..<10 { try forge(from: victim) }
        mesh.simulator.run(until: .zero + .seconds(8))
        let toVictim = sent(to: victim)
        // Its answer would have to come from b: nothing larger than the hello ever goes there.
        #expect(toVictim.count == 2 && toVictim.allSatisfy { $0 <= forgedSize }, "\(toVictim) for \(forgedSize)")
        #expect(a.sessionID == b.sessionID && a.core.phase == .running)
    }
}
