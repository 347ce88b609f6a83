import MeshCrypto
import NIOCore
import Testing
@testable import MeshCore

@Suite struct FrameCodecTests {
    @Test(arguments: FrameType.allCases)
    func everyFrameTypeRoundTrips(type: FrameType) {
        var rng = SplitMix64(seed: testSeed(0xf7a3e) ^ UInt64(type.rawValue))
        let samples = sampleFrames(of: type, using: &rng)
        #expect(
            !samples.isEmpty,
            "frame type \(type) has no examples: add some to sampleFrames(of:) in Tests/MeshCoreTests/TestSupport.swift"
        )
        for frame in samples {
            #expect(frame.type == type)
            var encoded = ByteBuffer()
            FrameCodec.encode(frame, into: &encoded)
            #expect(encoded.readableBytes == FrameCodec.encodedLength(of: frame))
            let raw = bytes(encoded)
            #expect(raw[0] == type.rawValue)
            #expect(Int(raw[1]) << 8 | Int(raw[2]) == raw.count - FrameCodec.headerLength)
            var reading = encoded
            #expect(FrameCodec.decodeOne(&reading) == .success(frame))
            #expect(reading.readableBytes == 0)
            var all = encoded
            #expect(FrameCodec.decodeAll(&all) == .success([frame]))
        }
    }

    @Test func frameTypeNumbersAreFixed() {
        #expect(FrameType.ping.rawValue == 0x01)
        #expect(FrameType.pong.rawValue == 0x02)
        #expect(Set(FrameType.allCases.map(\.rawValue)).count == FrameType.allCases.count)
        #expect(!FrameType.allCases.map(\.rawValue).contains(0))
    }

    @Test(
        "the version frame: current (2), oldest (2), flags (1: bit 0 answer, bit 1 the held door (8), bit 2 the founding id (16), bit 3 the founder's nonce (16); the rest passed over); versions out of order refused"
    )
    func protocolVersionLayout() {
        var encoded = ByteBuffer()
        let announcement = VersionAnnouncement(versions: SpokenVersions(current: 2, oldest: 1), isAnswer: true)
        FrameCodec.encode(.protocolVersion(announcement), into: &encoded)
        #expect(bytes(encoded) == [0x5A, 0x00, 0x05, 0, 2, 0, 1, 1])
        var holding = ByteBuffer()
        FrameCodec.encode(
            .protocolVersion(VersionAnnouncement(versions: .this, isAnswer: false, heldDoor: 0x0102_0304_0506_0708)),
            into: &holding)
        #expect(bytes(holding) == [0x5A, 0x00, 0x0D, 0, 2, 0, 1, 2, 1, 2, 3, 4, 5, 6, 7, 8])
        var cut = buffer([0x5A, 0x00, 0x05, 0, 2, 0, 1, 2])
        guard case .failure(.truncated) = FrameCodec.decodeAll(&cut) else {
            Issue.record("a held door flag without the door decoded")
            return
        }
        for body: [UInt8] in [[0, 1, 0, 2, 0], [0, 2, 0, 0, 0]] {
            var input = buffer([0x5A, 0x00, 0x05] + body)
            guard case .failure(.invalidField) = FrameCodec.decodeAll(&input) else {
                Issue.record("\(body) decoded")
                continue
            }
        }
        // Bit 2: the founding id (16) follows; bit 3 with it: the founder's nonce (16) after it.
        let founding = FoundingID(bytes: Array(1...16))
        let nonce = [UInt8](repeating: 0xEE, count: 16)
        var founded = ByteBuffer()
        FrameCodec.encode(
            .protocolVersion(
                VersionAnnouncement(
                    versions: .this, isAnswer: false, heldDoor: 0x0102_0304_0506_0708, founding: founding,
                    foundingNonce: nonce)), into: &founded)
        #expect(bytes(founded) == [0x5A, 0x00, 0x2D, 0, 2, 0, 1, 0x0E, 1, 2, 3, 4, 5, 6, 7, 8] + Array(1...16) + nonce)
        var member = ByteBuffer()
        FrameCodec.encode(
            .protocolVersion(VersionAnnouncement(versions: .this, isAnswer: true, founding: founding)), into: &member)
        #expect(bytes(member) == [0x5A, 0x00, 0x15, 0, 2, 0, 1, 0x05] + Array(1...16))
        // A nonce without an id is not sent, and one of another length neither.
        #expect(VersionAnnouncement(versions: .this, isAnswer: true, foundingNonce: nonce).foundingNonce == nil)
        var odd = ByteBuffer()
        FrameCodec.encode(
            .protocolVersion(
                VersionAnnouncement(versions: .this, isAnswer: true, founding: founding, foundingNonce: [1, 2])),
            into: &odd)
        #expect(bytes(odd) == bytes(member))
        for frame in [founded, member] {
            var input = frame
            guard case .success(let frames) = FrameCodec.decodeAll(&input) else {
                Issue.record("\(bytes(frame)) did not decode")
                continue
            }
            var again = ByteBuffer()
            for decoded in frames { FrameCodec.encode(decoded, into: &again) }
            #expect(bytes(again) == bytes(frame))
        }
        var cutFounding = buffer([0x5A, 0x00, 0x0D, 0, 2, 0, 1, 0x04] + Array(1...8))
        guard case .failure(.truncated) = FrameCodec.decodeAll(&cutFounding) else {
            Issue.record("a founding flag without the whole id decoded")
            return
        }
        var cutNonce = buffer([0x5A, 0x00, 0x1D, 0, 2, 0, 1, 0x0C] + Array(1...16) + Array(1...8))
        guard case .failure(.truncated) = FrameCodec.decodeAll(&cutNonce) else {
            Issue.record("a founder flag without the whole nonce decoded")
            return
        }
        // Bit 3 alone is a later protocol's: passed over.
        var nonceAlone = buffer([0x5A, 0x00, 0x05, 0, 2, 0, 1, 0x08])
        #expect(
            FrameCodec.decodeAll(&nonceAlone)
                == .success([.protocolVersion(VersionAnnouncement(versions: .this, isAnswer: false))]))
        // A later protocol's flags and fields are passed over: its version frames still reach us.
        var later = buffer([0x5A, 0x00, 0x0A, 0, 3, 0, 2, 0xF1, 9, 9, 9, 9, 9])
        #expect(
            FrameCodec.decodeAll(&later)
                == .success([
                    .protocolVersion(
                        VersionAnnouncement(versions: SpokenVersions(current: 3, oldest: 2), isAnswer: true))
                ]))
        let protocolTwo: Set<FrameType> = [
            .protocolVersion, .introduction, .introductionRequest, .introductionRefusal,
        ]
        #expect(protocolTwo.allSatisfy { $0.introducedIn == 2 })
        #expect(FrameType.allCases.filter { !protocolTwo.contains($0) }.allSatisfy { $0.introducedIn == 1 })
    }

    @Test("an introduction refusal is one reason byte; a reason a later protocol adds is still a refusal")
    func introductionRefusalLayout() {
        var encoded = ByteBuffer()
        FrameCodec.encode(.introductionRefusal(IntroductionRefusal(reason: .crossing)), into: &encoded)
        #expect(bytes(encoded) == [0x1C, 0x00, 0x01, 3])
        var later = buffer([0x1C, 0x00, 0x01, 9])
        #expect(
            FrameCodec.decodeAll(&later) == .success([.introductionRefusal(IntroductionRefusal(reason: .other(9)))]))
        var empty = buffer([0x1C, 0x00, 0x00])
        guard case .failure = FrameCodec.decodeAll(&empty) else {
            Issue.record("a refusal without its reason decoded")
            return
        }
    }

    @Test func pingLayoutIsBigEndian() {
        var encoded = ByteBuffer()
        FrameCodec.encode(.ping(Ping(token: 0x0102_0304_0506_0708)), into: &encoded)
        #expect(bytes(encoded) == [0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8])
        var pong = ByteBuffer()
        FrameCodec.encode(.pong(Pong(token: 0xff)), into: &pong)
        #expect(bytes(pong) == [0x02, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 0xff])
    }

    @Test func manyFramesInOrder() {
        var rng = SplitMix64(seed: testSeed(0x3a))
        for count in 1...40 {
            let frames = (0..<count).map { _ in randomFrame(using: &rng) }
            var encoded = ByteBuffer()
            for frame in frames { FrameCodec.encode(frame, into: &encoded) }
            #expect(FrameCodec.decodeAll(&encoded) == .success(frames))
        }
    }

    @Test func emptyPayloadIsAnError() {
        var empty = ByteBuffer()
        #expect(FrameCodec.decodeAll(&empty) == .failure(.truncated(what: "frame list")))
    }

    @Test func frameHeaderCutShort() {
        for raw: [UInt8] in [[0x01], [0x01, 0x00]] {
            var input = buffer(raw)
            #expect(FrameCodec.decodeAll(&input) == .failure(.truncated(what: "frame header")))
        }
        // A good frame followed by a lone byte.
        var input = buffer([0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 0x02])
        #expect(FrameCodec.decodeAll(&input) == .failure(.truncated(what: "frame header")))
    }

    @Test func unknownFrameType() {
        for type: UInt8 in [0x00, 0x03, 0x7f, 0xff] where FrameType(rawValue: type) == nil {
            var input = buffer([type, 0x00, 0x00])
            #expect(FrameCodec.decodeAll(&input) == .failure(.unknownFrameType(type)))
        }
    }

    @Test func lengthRunningPastTheEnd() {
        var input = buffer([0x01, 0x00, 0x09, 1, 2, 3, 4, 5, 6, 7, 8])
        #expect(FrameCodec.decodeAll(&input) == .failure(.truncated(what: "frame body")))
        var huge = buffer([0x01, 0xff, 0xff, 1, 2, 3])
        #expect(FrameCodec.decodeAll(&huge) == .failure(.truncated(what: "frame body")))
    }

    @Test func bodyShorterThanItsFields() {
        var input = buffer([0x01, 0x00, 0x07, 1, 2, 3, 4, 5, 6, 7])
        #expect(FrameCodec.decodeAll(&input) == .failure(.truncated(what: "ping token")))
        var pong = buffer([0x02, 0x00, 0x00])
        #expect(FrameCodec.decodeAll(&pong) == .failure(.truncated(what: "pong token")))
    }

    @Test func bodyLongerThanItsFields() {
        // The extra byte is inside the frame's length: the body must fill it exactly.
        var input = buffer([0x01, 0x00, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        #expect(FrameCodec.decodeAll(&input) == .failure(.trailingBytes(1)))
    }

    @Test func aBadFrameAfterGoodOnesFailsTheWholeList() {
        var input = buffer([0x01, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 0xee, 0x00, 0x00])
        #expect(FrameCodec.decodeAll(&input) == .failure(.unknownFrameType(0xee)))
    }

    @Test func readWireHelpers() throws {
        var input = buffer([0, 1, 2, 3, 4])
        #expect(try input.readWire(UInt16.self, "a") == 1)
        #expect(try input.readWireBytes(2, "b") == [2, 3])
        #expect(throws: WireError.truncated(what: "c")) { try input.readWire(UInt16.self, "c") }
        #expect(throws: WireError.truncated(what: "d")) { try input.readWireBytes(2, "d") }
        #expect(throws: WireError.truncated(what: "e")) { try input.readWireBytes(-1, "e") }
        #expect(try input.readWireBytes(1, "f") == [4])
    }

    @Test func wireErrorsReadAsSentences() {
        #expect(WireError.truncated(what: "frame body").description == "truncated frame body")
        #expect(WireError.unsupportedVersion(7).description == "unsupported datagram version 7")
        #expect(WireError.unknownKeyKind(9).description == "unknown key kind 9")
        #expect(WireError.unknownFrameType(0xab).description == "unknown frame type 0xab")
        #expect(WireError.invalidField(what: "port").description == "invalid port")
        #expect(WireError.oversized(length: 10, limit: 5).description == "10 bytes exceed the limit of 5")
        #expect(WireError.trailingBytes(3).description == "3 unexpected trailing bytes")
    }
}
