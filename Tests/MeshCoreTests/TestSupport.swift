#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing
@testable import MeshCore

/// MeshCore's seeded generator, so that every random test can be replayed from the seed it prints.
extension SplitMix64 {
    /// One `next()` per byte, its low byte: what `UInt8.random(in: 0...255, using:)` gives, without
    /// its generic calls (the decoder tests draw megabytes in a debug build).
    mutating func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: next()) }
        return bytes
    }
}

/// The seed for randomised tests: `GROUPMESH_TEST_SEED` when set, else a fixed default.
func testSeed(_ fallback: UInt64) -> UInt64 {
    if let text = getenv("GROUPMESH_TEST_SEED"), let value = UInt64(String(cString: text)) { return value }
    return fallback
}

/// Iterations for property tests: `GROUPMESH_TEST_ITERATIONS` when set, else `fallback`.
func testIterations(_ fallback: Int) -> Int {
    if let text = getenv("GROUPMESH_TEST_ITERATIONS"), let value = Int(String(cString: text)), value > 0 {
        return value
    }
    return fallback
}

func hex(_ text: String) -> [UInt8] {
    let compact = String(text.unicodeScalars.filter { !$0.properties.isWhitespace })
    guard let bytes = Hex.decode(compact) else { fatalError("bad hex literal in test: \(text)") }
    return bytes
}

func buffer(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }
func bytes(_ buffer: ByteBuffer) -> [UInt8] { Array(buffer.readableBytesView) }

extension Result {
    var failure: Failure? { if case let .failure(error) = self { return error } else { return nil } }
    var success: Success? { if case let .success(value) = self { return value } else { return nil } }
}

/// One simulated node: identity, this boot's ephemeral key, and its datagram codec.
/// A class, so that tests can call the codec's mutating methods inside `#expect`.
final class TestNode {
    let secret: SessionSecret
    let id: NodeID
    let bootID: UInt64
    let ephemeral: EphemeralKeyPair
    var codec: DatagramCodec

    init(secret: SessionSecret, seed: UInt8, bootID: UInt64 = 1, configuration: DatagramCodec.Configuration = .init()) {
        self.secret = secret
        self.id = try! NodeIdentity(seed: [UInt8](repeating: seed, count: 32)).nodeID
        self.bootID = bootID
        // A different ephemeral key per boot, as a real restart would make.
        var ephemeralSeed = [UInt8](repeating: seed, count: 32)
        withUnsafeBytes(of: bootID.bigEndian) { ephemeralSeed.replaceSubrange(24..<32, with: $0) }
        self.ephemeral = try! EphemeralKeyPair(seed: ephemeralSeed)
        self.codec = DatagramCodec(session: secret, localID: id, localBootID: bootID, configuration: configuration)
    }

    /// The keys this node uses with `peer` (derived here, as the membership layer would).
    func keys(with peer: TestNode) -> PairwiseKeys {
        PairwiseKeys.derive(session: secret, local: ephemeral, peerPublicKey: peer.ephemeral.publicKey)!
    }

    func install(_ peer: TestNode) {
        codec.installPeer(peer.id, bootID: peer.bootID, keys: keys(with: peer))
    }

    // Non-mutating forwarders: `#expect` and `#require` cannot call mutating methods.
    func seal(_ frames: [Frame], to peer: NodeID) -> ByteBuffer? { codec.seal(frames, to: peer) }
    func sealHello(_ frames: [Frame], nonce: PacketNonce) -> ByteBuffer { codec.sealHello(frames, nonce: nonce) }
    func open(_ datagram: ByteBuffer) -> Result<OpenedDatagram, DropReason> { codec.open(datagram) }
    func open(_ datagram: [UInt8]) -> Result<OpenedDatagram, DropReason> { codec.open(ByteBuffer(bytes: datagram)) }
    func removePeer(_ id: NodeID) { codec.removePeer(id) }
}

/// Two nodes of one session that know each other.
func connectedPair(configuration: DatagramCodec.Configuration = .init()) -> (TestNode, TestNode) {
    let secret = try! SessionSecret(bytes: [UInt8](repeating: 0x5e, count: 32))
    let a = TestNode(secret: secret, seed: 0xa1, bootID: 100, configuration: configuration)
    let b = TestNode(secret: secret, seed: 0xb2, bootID: 200, configuration: configuration)
    a.install(b)
    b.install(a)
    return (a, b)
}

/// Builds a datagram by hand: `header` in clear as associated data, then `plaintext` sealed
/// with `sealer`. Lets tests seal bytes that are not valid frames, or headers the codec
/// would never write.
func craftDatagram(header: DatagramHeader, plaintext: [UInt8], sealer: PacketSealer) -> ByteBuffer {
    var clear = ByteBuffer()
    header.encode(into: &clear)
    let ad = bytes(clear)
    return buffer(ad + sealer.seal(plaintext, associatedData: ad, nonce: header.nonce))
}

/// Examples of every frame type, for the round-trip tests. A frame type with no examples
/// here fails `FrameCodecTests.everyFrameTypeRoundTrips` until some are added.
func sampleFrames(using rng: inout SplitMix64) -> [Frame] {
    let zero = NodeID(high: 0, low: 0)
    let ones = NodeID(high: .max, low: .max)
    let some = NodeID(high: rng.next(), low: rng.next())
    let v4 = PeerAddress(ipv4: [192, 0, 2, 7], port: 7946)
    let digest = SHA256Digest.hashing(rng.bytes(8))
    var gaps = ChunkBitmap(count: 239)
    for index in stride(from: 3, to: 239, by: 17) { gaps.insert(index) }
    let v6 = PeerAddress(ipv6: rng.bytes(16), port: .max)
    let identity = try! NodeIdentity(seed: rng.bytes(32))
    func record(name: String, addresses: [PeerAddress]) -> MemberRecord {
        var record = MemberRecord(
            signingKey: identity.publicKey, name: name, addresses: addresses,
            incarnation: rng.next(), bootID: rng.next(), ephemeralKey: rng.bytes(32))
        record.signature = identity.sign(record.signedBytes)
        return record
    }
    return [
        .ping(Ping(token: 0)), .ping(Ping(token: .max)), .ping(Ping(token: rng.next())),
        .pong(Pong(token: 0)), .pong(Pong(token: .max)), .pong(Pong(token: rng.next())),
        .probe(Probe(sequence: 0, target: zero)), .probe(Probe(sequence: .max, target: ones)),
        .probe(Probe(sequence: rng.next(), target: some)), .probe(Probe(sequence: rng.next(), target: nil)),
        .probeAck(ProbeAck(sequence: 0, target: zero)), .probeAck(ProbeAck(sequence: rng.next(), target: some)),
        .probeAck(ProbeAck(sequence: .max, target: nil)),
        .probeNack(ProbeNack(sequence: .max, target: ones)), .probeNack(ProbeNack(sequence: rng.next(), target: some)),
        .probeRequest(ProbeRequest(sequence: 1, target: some, address: v4)),
        .probeRequest(ProbeRequest(sequence: rng.next(), target: ones, address: v6)),
        .alive(record(name: "", addresses: [])),
        .alive(record(name: "alice", addresses: [v4, v6])),
        .alive(record(name: "zoë 🎉", addresses: [v6])),
        .alive(
            record(
                name: String(repeating: "n", count: MemberRecord.maxNameBytes),
                addresses: [PeerAddress](repeating: v4, count: MemberRecord.maxAddresses))),
        .suspect(Accusation(member: some, incarnation: 0, accuser: zero)),
        .suspect(Accusation(member: ones, incarnation: .max, accuser: some)),
        .dead(Accusation(member: some, incarnation: rng.next(), accuser: ones)),
        .left(Departure(member: some, incarnation: 3, signature: identity.sign([1]))),
        .left(Departure(member: zero, incarnation: .max, signature: [UInt8](repeating: 0, count: 64))),
        .syncRequest(SyncRequest(isJoin: true)), .syncRequest(SyncRequest(isJoin: false)),
        .stateDigest(StateDigest(isRequest: true, lower: zero, upper: nil, entries: [])),
        .stateDigest(
            StateDigest(
                isRequest: false, lower: zero, upper: ones,
                entries: [
                    StateDigest.Entry(member: NodeID(high: 0, low: 1), incarnation: 0, status: .alive),
                    StateDigest.Entry(member: some, incarnation: .max, status: .left),
                ].sorted { $0.member < $1.member })),
        .stateDigest(StateDigest(summarizing: [], lower: zero, upper: nil)),
        .stateDigest(
            StateDigest(
                summarizing: [StateDigest.Entry(member: some, incarnation: 7, status: .suspect)],
                lower: NodeID(high: 0, low: 1), upper: ones)),
        .data(DataChunk(tsn: 1, flags: DataChunk.begins | DataChunk.ends, body: [])),
        .data(DataChunk(tsn: rng.next(), flags: DataChunk.begins, body: rng.bytes(1000))),
        .data(DataChunk(tsn: 2, flags: DataChunk.ends, body: rng.bytes(40), stream: .journal)),
        .data(DataChunk(tsn: rng.next(), flags: 0, body: [], stream: .journal)),
        .ack(DeliveryAck(cumulative: 0, window: 0)),
        .ack(DeliveryAck(cumulative: 10, window: .max, ranges: [12...14, 20...20])),
        .forwardTSN(ForwardTSN(cumulative: rng.next())),
        .fragment(UnreliableFragment(messageID: rng.next(), index: 0, count: 1, body: [])),
        .fragment(UnreliableFragment(messageID: 7, index: 2, count: 3, body: rng.bytes(500))),
        .chunkWant(ChunkWant(digest: digest, pieceSize: 1099)),
        .chunkWant(ChunkWant(digest: digest, pieceSize: 1, missing: gaps)),
        .chunkWant(ChunkWant(digest: digest, pieceSize: 1099, rate: 1_250_000)),
        .chunkPace(ChunkPace(rate: 0)), .chunkPace(ChunkPace(rate: 6 << 20)),
        .chunkCancel(ChunkCancel(digest: digest)),
        .pathProbeRequest(PathProbeRequest(token: 0, size: 1472)),
        .pathProbeRequest(PathProbeRequest(token: .max, size: 65535)),
        .pathProbe(PathProbe(token: 1, padding: 0)), .pathProbe(PathProbe(token: .max, padding: 8900)),
        .observedAddress(ObservedAddress(address: v4)), .observedAddress(ObservedAddress(address: v6)),
        .punchRequest(PunchRequest(target: some)), .punchRequest(PunchRequest(target: zero)),
        .punchIntroduction(PunchIntroduction(peer: some, addresses: [])),
        .punchIntroduction(PunchIntroduction(peer: ones, addresses: [v4, v6, v4, v6])),
        .punch(Punch(token: 0, isReply: false)), .punch(Punch(token: .max, isReply: true)),
        .relayForward(RelayedDatagram(peer: some, datagram: buffer(rng.bytes(RelayedDatagram.minDatagramSize)))),
        .relayForward(RelayedDatagram(peer: ones, datagram: buffer(rng.bytes(1277)))),
        .relayDelivery(RelayedDatagram(peer: zero, datagram: buffer(rng.bytes(64)))),
        .relayDelivery(RelayedDatagram(peer: some, datagram: buffer(rng.bytes(RelayedDatagram.maxDatagramSize)))),
        .relayRefusal(RelayRefusal(peer: some, reason: .disabled)),
        .relayRefusal(RelayRefusal(peer: ones, reason: .unreachable)),
        .relayRefusal(RelayRefusal(peer: zero, reason: .busy)),
        .birthdayRound(BirthdayRound(token: 1, step: .offer, nat: .symmetric, addresses: [v4])),
        .birthdayRound(BirthdayRound(token: .max, step: .ready, nat: .unknown, addresses: [])),
        .birthdayRound(BirthdayRound(token: 7, step: .ready, nat: .endpointIndependent, addresses: [v4, v6, v4, v6])),
        .protocolVersion(VersionAnnouncement(versions: .this, isAnswer: false)),
        .protocolVersion(VersionAnnouncement(versions: SpokenVersions(current: 1, oldest: 1), isAnswer: true)),
        .protocolVersion(VersionAnnouncement(versions: SpokenVersions(current: 65535, oldest: 65535), isAnswer: false)),
        .protocolVersion(VersionAnnouncement(versions: .this, isAnswer: true, heldDoor: 0x0102_0304_0506_0708)),
        .protocolVersion(
            VersionAnnouncement(
                versions: .this, isAnswer: false, founding: FoundingID(bytes: rng.bytes(FoundingID.byteCount)))),
        .protocolVersion(
            VersionAnnouncement(
                versions: .this, isAnswer: true, heldDoor: 7, founding: FoundingID(bytes: rng.bytes(16)),
                foundingNonce: rng.bytes(FoundingID.nonceByteCount))),
        .introduction(
            Introduction(
                epoch: SessionID(value: 7), member: some, doorKey: identity.publicKey,
                doorSignature: identity.sign([5]))),
        .introduction(
            Introduction(
                epoch: SessionID(value: .max), member: zero, doorKey: identity.publicKey,
                doorSignature: [UInt8](repeating: 0, count: 64), memberSignature: identity.sign([6]))),
        .introductionRequest(IntroductionRequest()),
        .introductionRefusal(IntroductionRefusal(reason: .full)),
        .introductionRefusal(IntroductionRefusal(reason: .other(200))),
        .chunkPiece(
            ChunkPiece(digest: digest, chunkLength: 3000, pieceSize: 1099, index: 0, payload: buffer(rng.bytes(1099)))),
        .chunkPiece(
            ChunkPiece(
                digest: digest, chunkLength: 3000, pieceSize: 1099, index: 2, sentAt: .max,
                payload: buffer(rng.bytes(802)))),
        .chunkPiece(ChunkPiece(digest: digest, chunkLength: 1, pieceSize: 1099, index: 0, payload: buffer([7]))),
        .chunkAbsent(ChunkAbsent(digest: digest, reason: .notHeld)),
        .chunkAbsent(ChunkAbsent(digest: digest, reason: .busy)),
        .chunkAbsent(ChunkAbsent(digest: digest, reason: .leftToOthers)),
        .epochHandover(
            EpochHandover(
                rotation: KeyRotation(
                    previousSession: SessionID(value: rng.next()), nextSession: SessionID(value: rng.next()),
                    removed: [some], signingKey: identity.publicKey, signature: identity.sign([2])),
                sender: record(name: "handing", addresses: [v4]), recipient: ones, recipientBoot: rng.next(),
                nonce: PacketNonce.packetNumber(rng.next()),
                sealedSecret: rng.bytes(EpochHandover.sealedSecretByteCount))),
        .epochHandover(
            EpochHandover(
                rotation: KeyRotation(
                    previousSession: SessionID(value: 0), nextSession: SessionID(value: .max),
                    removed: [], signingKey: identity.publicKey, signature: [UInt8](repeating: 0, count: 64)),
                sender: record(name: "", addresses: []), recipient: zero, recipientBoot: 0,
                nonce: PacketNonce.packetNumber(0),
                sealedSecret: [UInt8](repeating: 0, count: EpochHandover.sealedSecretByteCount))),
        .removalNotice(
            KeyRotation(
                previousSession: SessionID(value: rng.next()), nextSession: SessionID(value: rng.next()),
                removed: [some, ones], roster: [rng.next(), 7], signingKey: identity.publicKey,
                signature: identity.sign([3]))),
        .removalNotice(
            KeyRotation(
                previousSession: SessionID(value: 0), nextSession: SessionID(value: .max), removed: [],
                signingKey: identity.publicKey, signature: [UInt8](repeating: 0, count: 64))),
        .sessionEnd(
            SessionEnd(
                signingKey: identity.publicKey, session: SessionID(value: rng.next()),
                signature: identity.sign([4]))),
        .sessionEnd(
            SessionEnd(
                signingKey: identity.publicKey, session: SessionID(value: 0),
                signature: [UInt8](repeating: 0, count: 64))),
    ]
}

func sampleFrames(of type: FrameType, using rng: inout SplitMix64) -> [Frame] {
    sampleFrames(using: &rng).filter { $0.type == type }
}

/// A frame of a random type, among the types that have examples.
func randomFrame(using rng: inout SplitMix64) -> Frame {
    sampleFrames(using: &rng).randomElement(using: &rng)!
}

extension SimMesh {
    /// An uploader, a member that replicates what it adds (`holder`), and a lazy member that
    /// fetches only what it is asked for; the uploader adds `bytes` at 1 s, and the run goes to 5 s.
    func uploaderHolderAndAsker(
        attaching bytes: [UInt8], holder configuration: SimNode.Configuration = .init()
    ) -> (uploader: SimNode, holder: SimNode, asker: SimNode) {
        let uploader = addNode(joiningThrough: [], at: .zero)
        let holder = addNode(
            joiningThrough: [uploader.address], at: .zero + .milliseconds(10), configuration: configuration)
        var lazy = SimNode.Configuration()
        lazy.settings.lazy = true
        let asker = addNode(joiningThrough: [uploader.address], at: .zero + .milliseconds(20), configuration: lazy)
        uploader.plan(at: .zero + .seconds(1)) { $0.attach(bytes) }
        simulator.run(until: .zero + .seconds(5))
        return (uploader, holder, asker)
    }
}
