import MeshCrypto
import NIOCore
import Testing
@testable import MeshCore

/// Random and mutated bytes through every decoder of outside input. None may trap; each
/// must either fail with a value or return something that re-encodes to what it read.
/// Replay a failure with GROUPMESH_TEST_SEED=<seed printed in the failure>.
@Suite struct DecoderPropertyTests {
    /// Random bytes, biased towards the shapes decoders care about: short lengths, version
    /// byte 1, known frame types, lengths that almost fit.
    static func randomInput(using rng: inout SplitMix64) -> [UInt8] {
        let length: Int
        switch UInt8.random(in: 0..<5, using: &rng) {
        case 0: length = Int.random(in: 0...8, using: &rng)
        case 1: length = Int.random(in: 30...100, using: &rng)
        case 2: length = Int.random(in: 0...1500, using: &rng)
        // Around the largest datagram accepted (a jumbo frame's).
        case 3: length = Int.random(in: 8900...9100, using: &rng)
        default: length = Int.random(in: 0...64, using: &rng)
        }
        var input = rng.bytes(length)
        if !input.isEmpty, Bool.random(using: &rng) { input[0] = 1 }
        if input.count > 1, Bool.random(using: &rng) { input[1] = UInt8.random(in: 0...2, using: &rng) }
        return input
    }

    static func mutate(_ original: [UInt8], using rng: inout SplitMix64) -> [UInt8] {
        var bytes = original
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            switch UInt8.random(in: 0..<6, using: &rng) {
            case 0 where !bytes.isEmpty:  // flip a bit
                let index = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
            case 1 where !bytes.isEmpty:  // overwrite a byte
                bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            case 2:  // truncate
                bytes.removeLast(Int.random(in: 0...bytes.count, using: &rng))
            case 3:  // insert bytes
                let index = Int.random(in: 0...bytes.count, using: &rng)
                bytes.insert(contentsOf: rng.bytes(Int.random(in: 1...8, using: &rng)), at: index)
            case 4 where !bytes.isEmpty:  // delete a byte
                bytes.remove(at: Int.random(in: 0..<bytes.count, using: &rng))
            default:  // append
                bytes += rng.bytes(Int.random(in: 1...32, using: &rng))
            }
        }
        return bytes
    }

    // MARK: random bytes

    @Test func datagramHeaderDecodeNeverTraps() {
        let seed = testSeed(0xdec0_0001)
        var rng = SplitMix64(seed: seed)
        for iteration in 0..<testIterations(20_000) {
            let input = Self.randomInput(using: &rng)
            var reading = buffer(input)
            switch DatagramHeader.decode(&reading) {
            case let .success(header):
                // What was read re-encodes to exactly the bytes consumed.
                var encoded = ByteBuffer()
                header.encode(into: &encoded)
                let consumed = input.count - reading.readableBytes
                #expect(bytes(encoded) == Array(input.prefix(consumed)), "seed \(seed) iteration \(iteration)")
                #expect(consumed == header.encodedLength, "seed \(seed) iteration \(iteration)")
            case let .failure(error):
                switch error {
                case .truncated, .unsupportedVersion, .unknownKeyKind: break
                default: Issue.record("seed \(seed) iteration \(iteration): unexpected \(error)")
                }
            }
        }
    }

    @Test func frameDecodeAllNeverTraps() {
        let seed = testSeed(0xdec0_0002)
        var rng = SplitMix64(seed: seed)
        for iteration in 0..<testIterations(20_000) {
            var input = Self.randomInput(using: &rng)
            // Often make the first bytes look like a frame header with a plausible length.
            if input.count >= 3, Bool.random(using: &rng) {
                input[0] =
                    Bool.random(using: &rng)
                    ? UInt8.random(in: 0...3, using: &rng)
                    : FrameType.allCases[Int.random(in: 0..<FrameType.allCases.count, using: &rng)].rawValue
                let length = UInt16(clamping: max(0, input.count - 3 + Int.random(in: -2...2, using: &rng)))
                input[1] = UInt8(length >> 8)
                input[2] = UInt8(length & 0xff)
            }
            var reading = buffer(input)
            if case let .success(frames) = FrameCodec.decodeAll(&reading) {
                #expect(reading.readableBytes == 0)
                // The frame format has one encoding per frame list, but for the version frame,
                // which passes over what a later protocol adds.
                guard !frames.contains(where: { $0.type == .protocolVersion }) else { continue }
                var encoded = ByteBuffer()
                for frame in frames { FrameCodec.encode(frame, into: &encoded) }
                #expect(bytes(encoded) == input, "seed \(seed) iteration \(iteration)")
            }
        }
    }

    @Test func messengerJournalTransferAndPathDecodersNeverTrap() {
        let seed = testSeed(0xdec0_0007)
        var rng = SplitMix64(seed: seed)
        var originals = JournalMessageTests.samples(using: &rng).map(\.encoded)
        originals.append(MessageEnvelope(type: "chat", body: rng.bytes(40)).encoded)
        originals.append(
            Manifest(
                size: 600_000, chunkSize: 262_144,
                chunks: (0..<3).map { SHA256Digest.hashing([UInt8($0)]) }
            ).encoded)
        for frame in sampleFrames(using: &rng)
        where [
            .chunkWant, .chunkPiece, .chunkAbsent, .chunkPace, .chunkCancel, .pathProbeRequest, .pathProbe,
            .observedAddress, .punchRequest, .punchIntroduction, .punch, .relayForward, .relayDelivery, .relayRefusal,
            .birthdayRound, .protocolVersion, .introduction, .introductionRequest, .introductionRefusal,
        ].contains(frame.type) {
            var encoded = ByteBuffer()
            FrameCodec.encode(frame, into: &encoded)
            originals.append(bytes(encoded))
        }
        let holder = NodeID(high: 1, low: 1)
        for _ in 0..<testIterations(20_000) {
            let input =
                Bool.random(using: &rng)
                ? Self.randomInput(using: &rng)
                : Self.mutate(originals[Int.random(in: 0..<originals.count, using: &rng)], using: &rng)
            _ = try? JournalMessage(decoding: input)
            _ = MessageEnvelope(decoding: input)
            _ = try? Manifest(decoding: input)
            var reading = buffer(input)
            _ = try? JournalOperation(decoding: &reading)
            var frames = buffer(input)
            guard case let .success(decoded) = FrameCodec.decodeAll(&frames) else { continue }
            for case let .chunkPiece(piece) in decoded {
                var assembler = ChunkAssembler(settings: .init(pieceSize: piece.pieceSize))
                _ = assembler.begin(piece.digest, length: piece.chunkLength, from: holder, now: .zero)
                let result = assembler.onPiece(piece, from: holder, now: .zero)
                #expect(result != .unsolicited, "seed \(seed): a piece of the chunk asked for")
            }
        }
    }

    @Test func datagramOpenNeverTrapsOnRandomBytes() {
        let seed = testSeed(0xdec0_0003)
        var rng = SplitMix64(seed: seed)
        let (a, b) = connectedPair()
        let sessionID = a.secret.sessionID
        var counts: [DropReason: Int] = [:]
        for iteration in 0..<testIterations(20_000) {
            var input = Self.randomInput(using: &rng)
            // Often give it our session id and a known sender, so that it reaches the seal.
            if input.count >= DatagramHeader.fixedLength, Bool.random(using: &rng) {
                input[0] = 1
                withUnsafeBytes(of: sessionID.value.bigEndian) { input.replaceSubrange(2..<10, with: $0) }
                if Bool.random(using: &rng) {
                    let hello = Bool.random(using: &rng)
                    let header = DatagramHeader(
                        keyKind: hello ? .hello : .pairwise,
                        sessionID: sessionID, sender: a.id, bootID: a.bootID,
                        packetNumber: rng.next(),
                        helloNonce: hello ? PacketNonce(raw: [UInt8](repeating: 9, count: 24)) : nil)
                    var encoded = ByteBuffer()
                    header.encode(into: &encoded)
                    input.replaceSubrange(
                        0..<DatagramHeader.fixedLength, with: bytes(encoded).prefix(DatagramHeader.fixedLength))
                }
            }
            switch b.open(input) {
            case let .success(opened):
                Issue.record("seed \(seed) iteration \(iteration): random bytes opened as \(opened)")
            case let .failure(reason):
                counts[reason, default: 0] += 1
            }
        }
        // Every check was reached, the seal included.
        #expect(
            Set(counts.keys) == Set(DropReason.allCases).subtracting([.replay, .staleEpoch]), "seed \(seed): \(counts)")
    }

    @Test func inviteParsingNeverTrapsOnRandomText() {
        let seed = testSeed(0xdec0_0004)
        var rng = SplitMix64(seed: seed)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".unicodeScalars)
        var parsed = 0
        for iteration in 0..<testIterations(20_000) {
            let text: String
            switch UInt8.random(in: 0..<4, using: &rng) {
            case 0:  // arbitrary bytes, decoded leniently as UTF-8
                text = String(decoding: Self.randomInput(using: &rng), as: UTF8.self)
            case 1:  // arbitrary Unicode scalars
                var scalars = String.UnicodeScalarView()
                for _ in 0..<Int.random(in: 0...80, using: &rng) {
                    if let scalar = Unicode.Scalar(UInt32.random(in: 0...0x10ffff, using: &rng)) {
                        scalars.append(scalar)
                    }
                }
                text = String(scalars)
            case 2:  // the right prefix and alphabet, random length
                var scalars = String.UnicodeScalarView("gm1".unicodeScalars)
                for _ in 0..<Int.random(in: 0...600, using: &rng) {
                    scalars.append(alphabet.randomElement(using: &rng)!)
                }
                text = String(scalars)
            default:  // a random body with a correct checksum: reaches the address loop
                let addressCount = Int.random(in: 0...6, using: &rng)
                let wellFormed = Bool.random(using: &rng)
                let declared = wellFormed ? UInt8(addressCount) : UInt8.random(in: 0...18, using: &rng)
                var body: [UInt8] = [1] + rng.bytes(32) + [declared]
                for _ in 0..<addressCount {
                    let family: UInt8 =
                        wellFormed
                        ? [4, 6].randomElement(using: &rng)! : [4, 6, 4, 6, 0, 5].randomElement(using: &rng)!
                    body.append(family)
                    body += rng.bytes(family == 6 ? 16 : 4)
                    body += rng.bytes(wellFormed ? 2 : Int.random(in: 0...3, using: &rng))
                }
                body += SHA256Digest.hashing(body).bytes.prefix(4)
                text = "gm1" + Base64URLForTests.encode(body)
            }
            do {
                let invite = try InviteToken(parsing: text)
                parsed += 1
                // Whatever parses re-encodes to a token that parses to the same thing.
                #expect(try InviteToken(parsing: invite.text) == invite, "seed \(seed) iteration \(iteration)")
                #expect(!invite.addresses.isEmpty && invite.addresses.count <= InviteToken.maxAddresses)
            } catch {
                guard case .invite = error else {
                    Issue.record("seed \(seed) iteration \(iteration): unexpected \(error)")
                    continue
                }
            }
        }
        // The generator does reach the end of the parser.
        #expect(parsed > 0, "seed \(seed)")
    }

    // MARK: mutations of valid input

    @Test func mutatedDatagramsNeverOpen() throws {
        let seed = testSeed(0xdec0_0005)
        var rng = SplitMix64(seed: seed)
        // Random frames make datagrams of any size; mutations may also grow them past any limit.
        var unlimited = DatagramCodec.Configuration()
        unlimited.maxReceivedDatagramSize = 1 << 17
        // Hellos are received up to the size sent unasked: raised too.
        unlimited.maxDatagramSize = 1 << 17
        let (a, b) = connectedPair(configuration: unlimited)
        var originals: [[UInt8]] = []
        for index in 0..<8 {
            let frames = (0...index).map { _ in randomFrame(using: &rng) }
            originals.append(bytes(try #require(a.seal(frames, to: b.id))))
            originals.append(bytes(a.sealHello(frames, nonce: .random())))
        }
        var counts: [DropReason: Int] = [:]
        for iteration in 0..<testIterations(20_000) {
            let original = originals.randomElement(using: &rng)!
            let mutated = Self.mutate(original, using: &rng)
            if mutated == original { continue }
            switch b.open(mutated) {
            case let .success(opened):
                Issue.record("seed \(seed) iteration \(iteration): a mutated datagram opened as \(opened)")
            case let .failure(reason):
                counts[reason, default: 0] += 1
            }
        }
        // The mutations reached several different checks, not just the first one.
        #expect(counts[.auth, default: 0] > 0 && counts[.malformed, default: 0] > 0, "seed \(seed): \(counts)")
        // Nothing was consumed: every original still opens once.
        for original in originals { #expect(b.open(original).success != nil, "seed \(seed)") }
    }

    @Test func mutatedInvitesNeverParseAsSomethingElse() throws {
        let seed = testSeed(0xdec0_0006)
        var rng = SplitMix64(seed: seed)
        var originals: [InviteToken] = []
        for count in [1, 2, 5, 16] {
            let secret = try SessionSecret(bytes: rng.bytes(32))
            let addresses = (0..<count).map { index in
                index % 2 == 0
                    ? PeerAddress(ipv4: rng.bytes(4), port: UInt16.random(in: 1...UInt16.max, using: &rng))
                    : PeerAddress(ipv6: rng.bytes(16), port: UInt16.random(in: 1...UInt16.max, using: &rng))
            }
            originals.append(InviteToken(secret: secret, addresses: addresses))
        }
        for iteration in 0..<testIterations(20_000) {
            let original = originals.randomElement(using: &rng)!
            let mutated = Self.mutate(Array(original.text.utf8), using: &rng)
            let text = String(decoding: mutated, as: UTF8.self)
            if text == original.text { continue }
            do {
                let parsed = try InviteToken(parsing: text)
                // Only whitespace around the token may change and still parse; never to another invite.
                #expect(parsed == original, "seed \(seed) iteration \(iteration): \(text)")
            } catch {
                guard case .invite = error else {
                    Issue.record("seed \(seed) iteration \(iteration): unexpected \(error)")
                    continue
                }
            }
        }
    }
}

/// Base64url as the invite format defines it, written again here so the property test
/// does not need the module's internals.
enum Base64URLForTests {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let chunk = Array(bytes[index..<min(index + 3, bytes.count)])
            let padded = chunk + [UInt8](repeating: 0, count: 3 - chunk.count)
            let triple = UInt32(padded[0]) << 16 | UInt32(padded[1]) << 8 | UInt32(padded[2])
            let characters = [triple >> 18, triple >> 12, triple >> 6, triple].map { alphabet[Int($0 & 63)] }
            out += characters.prefix(chunk.count + 1)
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
