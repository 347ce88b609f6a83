import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// A join request's source address is only its claim: anyone holding the session secret can send
/// one under a made-up id with another host's address as its source. What answers it there must
/// stay within a few times its own size (QUIC's anti-amplification rule), however many members
/// the session has; a real joiner still learns every member (the rest comes by push-pull).
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter JoinAmplificationSimulation
@Suite("Joins and probes from a forged source (simulation)")
struct JoinAmplificationSimulationTests {
    /// Seed 4: the journal's sync to the made-up member went out beside the answer.
    static let seeds = Array(Set(SimulationSeeds.from(defaultCount: 2) + [4])).sorted()
    static let members = 16

    /// `members` nodes on a short link, each joining through the first, 200 ms apart.
    static func forming(members: Int, seed: UInt64) -> (SimMesh, SimNode) {
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2), jitter: .milliseconds(1)))
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        for index in 1..<members {
            mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(200 * index))
        }
        return (mesh, first)
    }

    /// Injects `request` from `source` to `node`, runs the mesh until `end`, and returns whether it
    /// was delivered and the sizes of what `node` sent back to `source` at that very instant.
    static func answers(
        to request: [UInt8], from source: SimAddress, at node: SimNode, in mesh: SimMesh, until end: MeshInstant
    ) -> (delivered: Bool, sizes: [Int]) {
        var deliveredAt: MeshInstant?
        var sizes: [Int] = []
        mesh.simulator.onTrace = { event in
            switch event.kind {
            case let .delivered(from, to, _) where from == source && to == node.address:
                deliveredAt = event.time
            case let .sent(from, to, bytes) where from == node.address && to == source && event.time == deliveredAt:
                sizes.append(bytes.count)
            default:
                break
            }
        }
        mesh.simulator.inject(request, from: source, to: node.address)
        mesh.simulator.run(until: end)
        mesh.simulator.onTrace = nil
        return (deliveredAt != nil, sizes)
    }

    /// A join request of a made-up identity whose record names `address`, sealed with the
    /// session's hello key as any holder of the secret can.
    static func forgedJoin(session: SessionSecret, naming address: PeerAddress, seed: UInt64) throws -> [UInt8] {
        try forgedJoin(session: session, naming: [address], seed: seed)
    }

    static func forgedJoin(session: SessionSecret, naming addresses: [PeerAddress], seed: UInt64) throws -> [UInt8] {
        var derive = SplitMix64(seed: seed ^ 0xF0F0)
        func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: derive.next()) } }
        let identity = try NodeIdentity(seed: bytes(32))
        let ephemeral = try EphemeralKeyPair(seed: bytes(32))
        let record = MemberRecord(
            signingKey: identity.publicKey, name: "made-up", addresses: addresses, incarnation: 0,
            bootID: 1, ephemeralKey: ephemeral.publicKey
        )
        .signed(by: Ed25519Authority(identity: identity))
        var codec = DatagramCodec(session: session, localID: identity.nodeID, localBootID: 1)
        let nonce = try #require(PacketNonce(raw: bytes(24)))
        let datagram = codec.sealHello([.syncRequest(SyncRequest(isJoin: true)), .alive(record)], nonce: nonce)
        return Array(datagram.readableBytesView)
    }

    @Test(
        "a join under a made-up id from a forged source draws at most 3× its size back there from a 16-member session; a joiner after it still learns all 16",
        arguments: seeds)
    func answersStayWithinThreeTimesTheRequest(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, first) = Self.forming(members: Self.members, seed: seed)
        mesh.simulator.run(until: .zero + .seconds(30))
        #expect(
            mesh.live.allSatisfy { $0.membership.view.filter { $0.status == .alive }.count == Self.members },
            "\(replay): the session did not form")

        // The victim: a host that is no node, whose address the request names as its source.
        let victim = SimAddress(Self.members + 100)
        let request = try Self.forgedJoin(session: mesh.session, naming: victim.peerAddress, seed: seed)
        let (delivered, sizes) = Self.answers(
            to: request, from: victim, at: first, in: mesh, until: .zero + .seconds(31))
        let answered = sizes.reduce(0, +)
        #expect(delivered, "\(replay): the request was not delivered")
        #expect(answered > 0, "\(replay): nothing answered the request (a joiner would learn nothing)")
        #expect(
            answered <= 3 * request.count,
            "\(replay): \(answered) bytes (\(sizes)) answered a request of \(request.count) from a forged source")

        // A real joiner, after it, learns every member.
        let joiner = mesh.addNode(joiningThrough: [first.address], at: .zero + .seconds(32))
        mesh.simulator.run(until: .zero + .seconds(60))
        let known = mesh.node(joiner.address).membership.view.filter {
            $0.status == .alive && $0.record.name != "made-up"
        }.count
        #expect(known == Self.members + 1, "\(replay): the joiner knows \(known) live members of \(Self.members + 1)")
    }

    @Test(
        "a made-up member that every member learns draws no journal sync to its address from any of them, however long the journal",
        arguments: seeds)
    func journalSyncWaitsForTheMembersOwnDatagram(seed: UInt64) throws {
        try journalSyncWaits(seed: seed, secondAddress: false)
    }

    @Test(
        "a made-up member whose record names another address first, its join from the victim's: a hello proves no address, no journal sync goes there",
        arguments: seeds)
    func aHelloProvesNoAddress(seed: UInt64) throws {
        try journalSyncWaits(seed: seed, secondAddress: true)
    }

    func journalSyncWaits(seed: UInt64, secondAddress: Bool) throws {
        let replay = SimulationSeeds.replay(seed)
        let members = 8
        let (mesh, first) = Self.forming(members: members, seed: seed)
        // A journal of 40 operations: a sync's first datagrams name every one of them.
        for index in 0..<40 { first.attach(Array("attachment \(index)".utf8)) }
        mesh.simulator.run(until: .zero + .seconds(20))
        #expect(
            mesh.live.allSatisfy { $0.journal.state.operationIDs.count == 40 },
            "\(replay): the journal did not reach every member")

        let victim = SimAddress(members + 100)
        // With another address first, a hello from the victim's is "a hello from an address its
        // record gives": where the member is sent to, but no proof for more than that.
        let named = (secondAddress ? [SimAddress(members + 101).peerAddress] : []) + [victim.peerAddress]
        let request = try Self.forgedJoin(session: mesh.session, naming: named, seed: seed)
        var bytes = 0
        var datagrams = 0
        mesh.simulator.onTrace = { event in
            if case let .sent(_, to, sent) = event.kind, to == victim { bytes += sent.count; datagrams += 1 }
        }
        mesh.simulator.inject(request, from: victim, to: first.address)
        // Gossip spreads the record to every member within two seconds; probes follow, one each a round.
        // (With two addresses, only the first member sends there: until the member changes,
        // gone suspect, and then too.)
        mesh.simulator.run(until: .zero + .seconds(secondAddress ? 30 : 22))
        mesh.simulator.onTrace = nil
        let learned = mesh.live.filter { $0.membership.view.contains { $0.record.name == "made-up" } }.count
        // (A member that first hears of it as suspect, once its probes went unanswered, never takes it.)
        #expect(learned > members / 2, "\(replay): \(learned) of \(members) members learned the made-up member")
        // The answer to the request (≤ 3×), then what SWIM sends any member it believes alive:
        // gossip and probes, small, a few a second from each (under 1.3 KB a second in 100 seeds). A journal sync of 40 operations
        // (acknowledged, so sent again and again) is several kilobytes from each member.
        #expect(
            bytes <= 3 * request.count + (secondAddress ? 5_000 : members * 2_000),
            "\(replay): \(bytes) bytes in \(datagrams) datagrams went to the made-up member's address")
    }
}

extension JoinAmplificationSimulationTests {
    @Test(
        "a probe from a forged source, under a made-up id or a member's, is acked there with at most 3× its size while gossip is pending",
        arguments: seeds)
    func probeAnswersStayWithinThreeTimesTheRequest(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, first) = Self.forming(members: Self.members, seed: seed)
        mesh.simulator.run(until: .zero + .seconds(20))
        var derive = SplitMix64(seed: seed ^ 0x0F0F)
        let madeUp = try NodeIdentity(seed: (0..<32).map { _ in UInt8(truncatingIfNeeded: derive.next()) }).nodeID
        let victim = SimAddress(Self.members + 100)
        for (round, sender) in [madeUp, mesh.node(SimAddress(5)).id].enumerated() {
            // Three more join: their records are gossip the first member still has to send when the probe comes.
            let start = mesh.simulator.now
            for index in 0..<3 { mesh.addNode(joiningThrough: [first.address], at: start + .milliseconds(5 * index)) }
            mesh.simulator.run(until: start + .milliseconds(40))

            var codec = DatagramCodec(session: mesh.session, localID: sender, localBootID: 1)
            let nonce = try #require(PacketNonce(raw: (0..<24).map { _ in UInt8(truncatingIfNeeded: derive.next()) }))
            let request = Array(
                codec.sealHello([.probe(Probe(sequence: 1, target: first.id))], nonce: nonce).readableBytesView)
            let (delivered, sizes) = Self.answers(
                to: request, from: victim, at: first, in: mesh, until: start + .seconds(1))
            let what = round == 0 ? "a made-up id" : "a member's id"
            #expect(delivered, "\(replay): the probe under \(what) was not delivered")
            #expect(!sizes.isEmpty, "\(replay): the probe under \(what) was not acked")
            #expect(
                sizes.reduce(0, +) <= 3 * request.count,
                "\(replay): datagrams of \(sizes) bytes answered a probe of \(request.count) under \(what)")
        }
    }
}
