import MeshCrypto
import NIOCore
import Testing
@testable import MeshCore

@Suite struct DatagramCodecTests {
    static let ping: [Frame] = [.ping(Ping(token: 0x0102_0304_0506_0708))]

    // MARK: known answers

    /// Datagrams recomputed in Python from the wire format alone (hashlib BLAKE2b for the
    /// KDF and key binding, `cryptography` X25519 + ChaCha20-Poly1305 with a hand-written
    /// HChaCha20 for XChaCha20-Poly1305). Session secret 00..1f; sender id 1/2, boot 3,
    /// ephemeral seed b0 × 32; receiver ephemeral seed a0 × 32; one ping frame, token 0102…08.
    static let goldenHello = hex(
        """
        01016bfbaec76d5314e200000000000000010000000000000002000000000000000300000000000000014041424344
        45464748494a4b4c4d4e4f5051525354555657f4d478d7b24e39312c0ca3d472cae524f63d9b5452e022f7dc2651
        """)
    static let goldenPairwise = hex(
        """
        01006bfbaec76d5314e200000000000000010000000000000002000000000000000300000000000000015733
        2d4d66f2d77e62d715466bf606059f3db990a8c0b1f713e57a
        """)

    @Test func sealedDatagramsMatchAnIndependentImplementation() throws {
        let secret = try SessionSecret(bytes: Array(0...31))
        let senderEphemeral = try EphemeralKeyPair(seed: [UInt8](repeating: 0xb0, count: 32))
        let receiverEphemeral = try EphemeralKeyPair(seed: [UInt8](repeating: 0xa0, count: 32))
        let senderID = NodeID(high: 1, low: 2)
        let receiverID = NodeID(high: 0xaaaa, low: 0)
        var sender = DatagramCodec(session: secret, localID: senderID, localBootID: 3)
        let senderKeys = try #require(
            PairwiseKeys.derive(
                session: secret, local: senderEphemeral,
                peerPublicKey: receiverEphemeral.publicKey))
        sender.installPeer(receiverID, bootID: 9, keys: senderKeys)
        let nonce = try #require(PacketNonce(raw: Array(UInt8(0x40)..<UInt8(0x58))))
        let hello = sender.sealHello(Self.ping, nonce: nonce)
        #expect(Hex.encode(bytes(hello)) == Hex.encode(Self.goldenHello))
        let pairwise = sender.seal(Self.ping, to: receiverID)
        #expect(Hex.encode(bytes(try #require(pairwise))) == Hex.encode(Self.goldenPairwise))

        var receiver = DatagramCodec(session: secret, localID: receiverID, localBootID: 9)
        let helloResult = receiver.open(buffer(Self.goldenHello))
        let openedHello = try #require(helloResult.success)
        #expect(openedHello.frames == Self.ping)
        #expect(openedHello.header.sender == senderID)
        #expect(openedHello.header.keyKind == .hello)
        let receiverKeys = try #require(
            PairwiseKeys.derive(
                session: secret, local: receiverEphemeral,
                peerPublicKey: senderEphemeral.publicKey))
        receiver.installPeer(senderID, bootID: 3, keys: receiverKeys)
        let pairwiseResult = receiver.open(buffer(Self.goldenPairwise))
        let openedPairwise = try #require(pairwiseResult.success)
        #expect(openedPairwise.frames == Self.ping)
        #expect(
            openedPairwise.header
                == DatagramHeader(
                    keyKind: .pairwise, sessionID: secret.sessionID,
                    sender: senderID, bootID: 3, packetNumber: 1))
    }

    // MARK: round trips

    @Test func pairwiseRoundTripsInBothDirections() throws {
        // Random frames make datagrams of any size: the receive limit is not what this tests.
        var unlimited = DatagramCodec.Configuration()
        unlimited.maxReceivedDatagramSize = 1 << 16
        let (a, b) = connectedPair(configuration: unlimited)
        var rng = SplitMix64(seed: testSeed(0xd6))
        for round in 1...50 {
            let frames = (0..<(round % 7 + 1)).map { _ in randomFrame(using: &rng) }
            let toB = try #require(a.seal(frames, to: b.id))
            let opened = try #require(b.open(toB).success)
            #expect(opened.frames == frames)
            #expect(opened.header.sender == a.id)
            #expect(opened.header.bootID == a.bootID)
            #expect(opened.header.packetNumber == UInt64(round))
            #expect(opened.header.keyKind == .pairwise)
            let toA = try #require(b.seal(frames.reversed(), to: a.id))
            #expect(a.open(toA).success?.frames == frames.reversed())
        }
    }

    @Test func helloOpensForAnyMemberOfTheSession() throws {
        let (a, _) = connectedPair()
        let stranger = TestNode(secret: a.secret, seed: 0x77)  // knows nobody
        let datagram = a.sealHello(Self.ping, nonce: .random())
        let opened = try #require(stranger.open(datagram).success)
        #expect(opened.frames == Self.ping)
        #expect(opened.header.keyKind == .hello)
        #expect(opened.header.sender == a.id)
        #expect(opened.header.helloNonce != nil)
    }

    @Test func aCapturedJoinReplayedLaterIsDroppedBeforeAndAfterWeMeetItsSender() throws {
        let secret = try SessionSecret(bytes: [UInt8](repeating: 4, count: 32))
        let joiner = TestNode(secret: secret, seed: 0x10)
        let member = TestNode(secret: secret, seed: 0x20)
        let join = joiner.sealHello(Self.ping, nonce: .random())
        #expect(member.open(join).success != nil, "the join itself")
        #expect(member.open(join).failure == .replay, "replayed while the sender is still a stranger")
        member.install(joiner)
        #expect(member.open(join).failure == .replay, "replayed once we hold its keys")
        member.removePeer(joiner.id)
        #expect(member.open(join).failure == .replay, "replayed after it was declared dead")
        let next = joiner.sealHello(Self.ping, nonce: .random())
        #expect(member.open(next).success != nil, "a new hello of the same boot still opens")
        // Another boot of the same member is a new sender.
        let reborn = TestNode(secret: secret, seed: 0x10, bootID: 2)
        #expect(member.open(reborn.sealHello(Self.ping, nonce: .random())).success != nil)
    }

    @Test func packetNumbersCountPerPeerAndHellosSeparately() throws {
        let secret = try SessionSecret(bytes: [UInt8](repeating: 1, count: 32))
        let a = TestNode(secret: secret, seed: 1)
        let b = TestNode(secret: secret, seed: 2)
        let c = TestNode(secret: secret, seed: 3)
        a.install(b)
        a.install(c)
        func number(_ datagram: ByteBuffer?) -> UInt64? {
            var copy = datagram ?? ByteBuffer()
            return DatagramHeader.decode(&copy).success?.packetNumber
        }
        #expect(number(a.seal(Self.ping, to: b.id)) == 1)
        #expect(number(a.seal(Self.ping, to: b.id)) == 2)
        #expect(number(a.seal(Self.ping, to: c.id)) == 1)
        #expect(number(a.sealHello(Self.ping, nonce: .random())) == 1)
        #expect(number(a.sealHello(Self.ping, nonce: .random())) == 2)
        #expect(number(a.seal(Self.ping, to: b.id)) == 3)
    }

    @Test func sealingToAnUnknownPeerGivesNil() {
        let (a, _) = connectedPair()
        #expect(a.seal(Self.ping, to: NodeID(high: 42, low: 42)) == nil)
    }

    @Test func payloadLimitsAndDatagramSizes() throws {
        let (a, b) = connectedPair()
        #expect(a.codec.maxPairwisePayload == 1200 - 42 - 16)
        #expect(a.codec.maxHelloPayload == 1200 - 42 - 16 - 24)
        let frameLength = FrameCodec.encodedLength(of: Self.ping[0])
        let count = a.codec.maxPairwisePayload / frameLength
        let frames = [Frame](repeating: Self.ping[0], count: count)
        let datagram = try #require(a.seal(frames, to: b.id))
        #expect(datagram.readableBytes == DatagramHeader.fixedLength + count * frameLength + 16)
        #expect(datagram.readableBytes <= a.codec.configuration.maxDatagramSize)
        #expect(b.open(datagram).success?.frames.count == count)
        let helloCount = a.codec.maxHelloPayload / frameLength
        let hello = a.sealHello([Frame](repeating: Self.ping[0], count: helloCount), nonce: .random())
        #expect(hello.readableBytes <= a.codec.configuration.maxDatagramSize)
        #expect(b.open(hello).success?.frames.count == helloCount)
    }

    // MARK: rejections, one per reason

    @Test func datagramsOverTheReceiveLimitAreDroppedBeforeDecryption() throws {
        // A sender allowed 12,000-byte datagrams, and a receiver with the same keys that accepts
        // only what fits a jumbo frame (the default).
        var large = DatagramCodec.Configuration()
        large.maxDatagramSize = 12_000
        large.maxReceivedDatagramSize = 12_000
        let (a, b) = connectedPair(configuration: large)
        let (_, receiver) = connectedPair()
        let frameLength = FrameCodec.encodedLength(of: Self.ping[0])
        let big = try #require(a.seal([Frame](repeating: Self.ping[0], count: 10_000 / frameLength), to: b.id))
        #expect(big.readableBytes > 8972)
        #expect(b.open(big).success != nil, "authentic, and within the receiver's limit")
        #expect(receiver.open(big) == .failure(.oversized))
        // 64 KiB behind a valid header: no decryption is tried (it would fail `auth`).
        let header = bytes(try #require(a.seal(Self.ping, to: b.id))).prefix(DatagramHeader.fixedLength)
        #expect(receiver.open(buffer(Array(header) + [UInt8](repeating: 0, count: 65_000))) == .failure(.oversized))
        let limit = receiver.codec.configuration.maxReceivedDatagramSize
        #expect(
            receiver.open(buffer(Array(header) + [UInt8](repeating: 0, count: limit - header.count))) == .failure(.auth)
        )
    }

    @Test func truncatedDatagramsAreMalformedUntilTheyHoldATag() throws {
        let (a, b) = connectedPair()
        let pairwise = bytes(try #require(a.seal(Self.ping, to: b.id)))
        for length in 0..<pairwise.count {
            let expected: DropReason =
                length < DatagramHeader.fixedLength + PacketSealer.tagByteCount ? .malformed : .auth
            #expect(b.open(buffer(Array(pairwise.prefix(length)))) == .failure(expected), "pairwise length \(length)")
        }
        let hello = bytes(a.sealHello(Self.ping, nonce: .random()))
        for length in 0..<hello.count {
            let expected: DropReason =
                length < DatagramHeader.fixedLength + 24 + PacketSealer.tagByteCount ? .malformed : .auth
            #expect(b.open(buffer(Array(hello.prefix(length)))) == .failure(expected), "hello length \(length)")
        }
        // The cut datagrams moved nothing: the whole ones still open.
        #expect(b.open(buffer(pairwise)).success != nil)
        #expect(b.open(buffer(hello)).success != nil)
    }

    /// Flips every bit of a small pairwise datagram. The reason must be the one the flipped
    /// field is checked for; nothing may open, and no forgery may move the replay window.
    @Test func everyFlippedBitOfAPairwiseDatagramIsRejected() throws {
        let (a, b) = connectedPair()
        let datagram = bytes(try #require(a.seal(Self.ping, to: b.id)))
        #expect(datagram.count == 42 + 11 + 16)
        for bit in 0..<(datagram.count * 8) {
            var damaged = datagram
            damaged[bit / 8] ^= 1 << (bit % 8)
            let result = b.open(buffer(damaged))
            let allowed: Set<DropReason>
            switch bit / 8 {
            case 0: allowed = [.version]
            // 0 → 1 makes it a hello whose nonce eats the sealed bytes; other bits name no key kind.
            case 1: allowed = bit % 8 == 0 ? [.malformed, .auth] : [.malformed]
            case 2..<10: allowed = [.foreign]
            case 10..<26: allowed = [.unknownSender]  // sender
            case 26..<34: allowed = [.unknownSender]  // boot id
            default: allowed = [.auth]  // packet number (the nonce), body, tag
            }
            guard case let .failure(reason) = result else {
                Issue.record("bit \(bit) (byte \(bit / 8)) opened a tampered datagram")
                continue
            }
            #expect(allowed.contains(reason), "bit \(bit) (byte \(bit / 8)): \(reason), expected one of \(allowed)")
        }
        #expect(b.open(buffer(datagram)).success?.frames == Self.ping)
    }

    @Test func everyFlippedBitOfAHelloDatagramIsRejected() throws {
        let (a, _) = connectedPair()
        let stranger = TestNode(secret: a.secret, seed: 0x99)
        let datagram = bytes(a.sealHello(Self.ping, nonce: .random()))
        #expect(datagram.count == 42 + 24 + 11 + 16)
        for bit in 0..<(datagram.count * 8) {
            var damaged = datagram
            damaged[bit / 8] ^= 1 << (bit % 8)
            let allowed: Set<DropReason>
            switch bit / 8 {
            case 0: allowed = [.version]
            case 1: allowed = bit % 8 == 0 ? [.unknownSender] : [.malformed]  // → pairwise, with no keys for it
            case 2..<10: allowed = [.foreign]
            default: allowed = [.auth]  // sender, boot, number, nonce: all authenticated as associated data
            }
            guard case let .failure(reason) = stranger.open(buffer(damaged)) else {
                Issue.record("bit \(bit) (byte \(bit / 8)) opened a tampered hello")
                continue
            }
            #expect(allowed.contains(reason), "bit \(bit) (byte \(bit / 8)): \(reason), expected one of \(allowed)")
        }
        #expect(stranger.open(buffer(datagram)).success?.frames == Self.ping)
    }

    @Test func replayedDatagramsAreRejected() throws {
        let (a, b) = connectedPair()
        let first = try #require(a.seal(Self.ping, to: b.id))
        let second = try #require(a.seal(Self.ping, to: b.id))
        let third = try #require(a.seal(Self.ping, to: b.id))
        #expect(b.open(third).success != nil)
        #expect(b.open(first).success != nil)  // out of order within the window is fine
        #expect(b.open(first) == .failure(.replay))
        #expect(b.open(third) == .failure(.replay))
        #expect(b.open(second).success != nil)
        #expect(b.open(second) == .failure(.replay))
    }

    @Test func datagramsOlderThanTheWindowAreReplays() throws {
        var configuration = DatagramCodec.Configuration()
        configuration.replayWindowSize = 64
        let (a, b) = connectedPair(configuration: configuration)
        let old = try #require(a.seal(Self.ping, to: b.id))  // number 1
        var latest: ByteBuffer?
        for _ in 0..<64 { latest = a.seal(Self.ping, to: b.id) }  // numbers 2...65
        #expect(b.open(try #require(latest)).success != nil)  // highest = 65
        #expect(b.open(old) == .failure(.replay))  // 65 - 1 = 64 = size
    }

    @Test func helloReplaysFromAKnownPeerAreRejected() throws {
        let (a, b) = connectedPair()
        let hello = a.sealHello(Self.ping, nonce: .random())
        #expect(b.open(hello).success != nil)
        #expect(b.open(hello) == .failure(.replay))
    }

    @Test func helloInAnotherMembersNameCannotSilenceIt() throws {
        let (a, b) = connectedPair()
        // Any member holds the hello key: it seals a hello naming a's id and boot, far ahead
        // in packet numbers.
        let header = DatagramHeader(
            keyKind: .hello, sessionID: a.secret.sessionID, sender: a.id, bootID: a.bootID,
            packetNumber: 1 << 50, helloNonce: .random())
        var forged = ByteBuffer()
        header.encode(into: &forged)
        let associated = Array(forged.readableBytesView)
        let sealer = try PacketSealer(key: a.secret.key(for: .hello))
        var plaintext = ByteBuffer()
        for frame in Self.ping { FrameCodec.encode(frame, into: &plaintext) }
        forged.writeBytes(
            sealer.seal(Array(plaintext.readableBytesView), associatedData: associated, nonce: header.nonce))
        #expect(b.open(forged).success != nil)  // it opens: the hello key is shared
        // a's own hellos still open afterwards (they used to be "replays" behind the forged number).
        for _ in 0..<3 { #expect(b.open(a.sealHello(Self.ping, nonce: .random())).success != nil) }
        #expect(b.open(forged) == .failure(.replay))
    }

    @Test func forgeriesDoNotMoveTheReplayWindow() throws {
        let (a, b) = connectedPair()
        var datagrams: [[UInt8]] = []
        for _ in 0..<5 { datagrams.append(bytes(try #require(a.seal(Self.ping, to: b.id)))) }
        // A forged datagram with a huge packet number fails authentication...
        var forged = datagrams[0]
        forged[41] = 0xff
        forged[34] = 0x7f
        #expect(b.open(buffer(forged)) == .failure(.auth))
        // ...and a damaged copy of a real one too; neither consumed anything.
        var damaged = datagrams[2]
        damaged[damaged.count - 1] ^= 1
        #expect(b.open(buffer(damaged)) == .failure(.auth))
        for datagram in datagrams { #expect(b.open(buffer(datagram)).success != nil) }
    }

    @Test func datagramsOfAnotherSessionAreForeign() throws {
        let (_, b) = connectedPair()
        let otherSecret = try SessionSecret(bytes: [UInt8](repeating: 0x0f, count: 32))
        let outsider = TestNode(secret: otherSecret, seed: 0xa1, bootID: 100)  // same id and boot as a
        let outsiderPeer = TestNode(secret: otherSecret, seed: 0xb2, bootID: 200)
        outsider.install(outsiderPeer)
        outsiderPeer.install(outsider)
        #expect(outsider.id == connectedPair().0.id)
        #expect(b.open(outsider.sealHello(Self.ping, nonce: .random())) == .failure(.foreign))
        #expect(b.open(try #require(outsider.seal(Self.ping, to: b.id))) == .failure(.foreign))
    }

    @Test func pairwiseDatagramsFromUnknownSendersAreRejected() throws {
        let (a, b) = connectedPair()
        let c = TestNode(secret: a.secret, seed: 0xc3)
        c.install(b)  // c knows b, but b has not installed c
        #expect(b.open(try #require(c.seal(Self.ping, to: b.id))) == .failure(.unknownSender))
        // b knows a's boot 100 only: the same id with another boot is unknown too.
        let aOtherBoot = TestNode(secret: a.secret, seed: 0xa1, bootID: 101)
        aOtherBoot.install(b)
        #expect(aOtherBoot.id == a.id)
        #expect(b.open(try #require(aOtherBoot.seal(Self.ping, to: b.id))) == .failure(.unknownSender))
        // A removed peer is unknown.
        let fromA = try #require(a.seal(Self.ping, to: b.id))
        b.removePeer(a.id)
        #expect(b.codec.installedBoot(of: a.id) == nil)
        #expect(b.open(fromA) == .failure(.unknownSender))
    }

    @Test func ourOwnDatagramReflectedBackIsRejected() throws {
        let (a, b) = connectedPair()
        let toB = try #require(a.seal(Self.ping, to: b.id))
        #expect(a.open(toB) == .failure(.unknownSender))
        #expect(b.open(toB).success != nil)
    }

    @Test func unknownVersionsAreReportedAsSuch() throws {
        let (a, b) = connectedPair()
        let datagram = bytes(try #require(a.seal(Self.ping, to: b.id)))
        for version: UInt8 in [0, 2, 3, 0x7f, 0xff] {
            var future = datagram
            future[0] = version
            #expect(b.open(buffer(future)) == .failure(.version))
            #expect(b.open(buffer([version])) == .failure(.version))
        }
        #expect(b.open(buffer(datagram)).success != nil)
    }

    @Test func authenticDatagramsWithBadFramesAreMalformed() throws {
        let (a, b) = connectedPair()
        let sending = a.keys(with: b).sending
        let helloKey = try PacketSealer(key: a.secret.key(for: .hello))
        let badPlaintexts: [(String, [UInt8])] = [
            ("no frames", []),
            ("unknown frame type", [0xee, 0x00, 0x00]),
            ("frame header cut short", [0x01, 0x00]),
            ("length past the end", [0x01, 0x00, 0x09, 1, 2, 3, 4, 5, 6, 7, 8]),
            ("body too short", [0x01, 0x00, 0x04, 1, 2, 3, 4]),
            ("body too long", [0x01, 0x00, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            ("good frame then junk", [0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 0x00]),
        ]
        for (index, (name, plaintext)) in badPlaintexts.enumerated() {
            let number = UInt64(index + 1)
            let pairwise = craftDatagram(
                header: DatagramHeader(
                    keyKind: .pairwise, sessionID: a.secret.sessionID, sender: a.id,
                    bootID: a.bootID, packetNumber: number),
                plaintext: plaintext, sealer: sending)
            #expect(b.open(pairwise) == .failure(.malformed), "pairwise: \(name)")
            // It authenticated, so its packet number is used up.
            #expect(b.open(pairwise) == .failure(.replay), "pairwise again: \(name)")
            let hello = craftDatagram(
                header: DatagramHeader(
                    keyKind: .hello, sessionID: a.secret.sessionID, sender: a.id,
                    bootID: a.bootID, packetNumber: number, helloNonce: .random()),
                plaintext: plaintext, sealer: helloKey)
            #expect(b.open(hello) == .failure(.malformed), "hello: \(name)")
        }
        // The codec's own seal of an empty frame list is malformed on arrival too.
        let (c, d) = connectedPair()
        #expect(d.open(try #require(c.seal([], to: d.id))) == .failure(.malformed))
        // The crafted path itself is sound: a good plaintext opens.
        let good = craftDatagram(
            header: DatagramHeader(
                keyKind: .pairwise, sessionID: a.secret.sessionID, sender: a.id,
                bootID: a.bootID, packetNumber: 1000),
            plaintext: [0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8], sealer: sending)
        #expect(b.open(good).success?.frames == Self.ping)
    }

    @Test func aDatagramSealedWithAnotherPairsKeyFailsAuthentication() throws {
        let (a, b) = connectedPair()
        let c = TestNode(secret: a.secret, seed: 0xc3)
        // Claims to be a (whose keys b holds) but is sealed with c's key for b.
        let forged = craftDatagram(
            header: DatagramHeader(
                keyKind: .pairwise, sessionID: a.secret.sessionID, sender: a.id,
                bootID: a.bootID, packetNumber: 1),
            plaintext: [0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8], sealer: c.keys(with: b).sending)
        #expect(b.open(forged) == .failure(.auth))
        // And a's own receiving key (a mirror-image mistake) does not work either.
        let mirrored = craftDatagram(
            header: DatagramHeader(
                keyKind: .pairwise, sessionID: a.secret.sessionID, sender: a.id,
                bootID: a.bootID, packetNumber: 2),
            plaintext: [0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8], sealer: a.keys(with: b).receiving)
        #expect(b.open(mirrored) == .failure(.auth))
        #expect(b.open(try #require(a.seal(Self.ping, to: b.id))).success != nil)
    }

    // MARK: a new boot of the same sender

    @Test func aNewBootStartsAtPacketOneAndRetiresTheOldBoot() throws {
        let (a, b) = connectedPair()
        var oldBootDatagrams: [ByteBuffer] = []
        for _ in 0..<3 {
            let datagram = try #require(a.seal(Self.ping, to: b.id))
            #expect(b.open(datagram).success != nil)
            oldBootDatagrams.append(datagram)
        }
        let neverDelivered = try #require(a.seal(Self.ping, to: b.id))  // number 4, still in flight

        // a restarts: same identity, new boot id, new ephemeral key, counters from 1.
        let restarted = TestNode(secret: a.secret, seed: 0xa1, bootID: a.bootID + 1)
        #expect(restarted.id == a.id)
        #expect(restarted.ephemeral.publicKey != a.ephemeral.publicKey)
        restarted.install(b)
        b.install(restarted)
        #expect(b.codec.installedBoot(of: a.id) == restarted.bootID)

        let fresh = try #require(restarted.seal(Self.ping, to: b.id))
        var header = fresh
        #expect(DatagramHeader.decode(&header).success?.packetNumber == 1)
        #expect(b.open(fresh).success?.header.bootID == restarted.bootID)
        #expect(b.open(fresh) == .failure(.replay))

        // Everything from the old boot is now from a sender we hold no keys for.
        for datagram in oldBootDatagrams + [neverDelivered] {
            #expect(b.open(datagram) == .failure(.unknownSender))
        }
        // And b's replies reach only the new boot.
        let reply = try #require(b.seal(Self.ping, to: a.id))
        #expect(restarted.open(reply).success != nil)
        #expect(a.open(reply) == .failure(.auth))
    }

    @Test func reinstallingTheSameBootKeepsTheReplayWindow() throws {
        let (a, b) = connectedPair()
        let first = try #require(a.seal(Self.ping, to: b.id))
        #expect(b.open(first).success != nil)
        b.install(a)  // the same membership record arriving again
        #expect(b.open(first) == .failure(.replay))
        #expect(b.open(try #require(a.seal(Self.ping, to: b.id))).success != nil)
        // Our send counter survives too: the next number is 2, not 1 again.
        let next = try #require(b.seal(Self.ping, to: a.id))
        b.install(a)
        let after = try #require(b.seal(Self.ping, to: a.id))
        var h1 = next, h2 = after
        #expect(DatagramHeader.decode(&h1).success?.packetNumber == 1)
        #expect(DatagramHeader.decode(&h2).success?.packetNumber == 2)
    }

    @Test func dropReasonsHaveStableCounterNames() {
        #expect(
            DropReason.allCases.map(\.rawValue) == [
                "malformed", "version", "foreign", "unknownSender", "auth", "replay", "staleEpoch", "oversized",
            ])
        for reason in DropReason.allCases { #expect(DropReason(rawValue: reason.rawValue) == reason) }
    }
}
