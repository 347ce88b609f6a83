import MeshCrypto
import Testing
@testable import MeshCore

/// What STUN and TURN servers send, random and mutated, through the decoders and the state
/// machines that take it (`DecoderPropertyTests` for the rest): nothing traps, and what decodes
/// re-encodes to a message that decodes the same.
@Suite struct TraversalDecoderPropertyTests {
    static func stunShaped(using rng: inout SplitMix64) -> [UInt8] {
        var input = DecoderPropertyTests.randomInput(using: &rng)
        if input.count >= 20, Bool.random(using: &rng) {
            input[0] = UInt8.random(in: 0...1, using: &rng)
            input[4...7] = [0x21, 0x12, 0xA4, 0x42]
            let length = UInt16(clamping: max(0, input.count - 20 + Int.random(in: -4...4, using: &rng)))
            input[2] = UInt8(length >> 8)
            input[3] = UInt8(length & 0xFC)
        }
        return input
    }

    @Test func stunDecodeNeverTraps() throws {
        let seed = testSeed(0xdec0_5701)
        var rng = SplitMix64(seed: seed)
        let key = StunIntegrity.longTermKey(username: "mesh", realm: "lab", password: "secret")
        var originals = [
            StunMessageTests.sampleRequest, StunMessageTests.sampleIPv4Response,
            StunMessageTests.sampleIPv6Response, StunMessageTests.sampleLongTermRequest,
        ]
        originals.append(
            StunMessage(
                method: .allocate, messageClass: .success, transactionID: .init(random: &rng),
                attributes: [
                    .xorRelayedAddress(try PeerAddress(parsing: "198.51.100.10:49152")),
                    .lifetime(600), .errorCode(code: 401, reason: "x"), .data([1, 2]),
                ]
            )
            .encoded(integrityKey: key, fingerprint: true))
        for iteration in 0..<testIterations(20_000) {
            let input =
                Bool.random(using: &rng)
                ? Self.stunShaped(using: &rng)
                : DecoderPropertyTests.mutate(originals[Int.random(in: 0..<originals.count, using: &rng)], using: &rng)
            guard let received = try? StunMessage.decode(input) else { continue }
            _ = received.hasValidIntegrity(key: key)
            _ = received.fingerprintIsValid
            let message = received.message
            let again = try StunMessage.decode(message.encoded())
            #expect(again.message == message, "seed \(seed) iteration \(iteration)")
        }
    }

    @Test func channelDataAndTheStateMachinesNeverTrap() throws {
        let seed = testSeed(0xdec0_5702)
        var rng = SplitMix64(seed: seed)
        let server = try PeerAddress(parsing: "198.51.100.10:3478")
        var allocation = TurnAllocation(
            server: server, credentials: .init(username: "u", password: "p"), seed: seed, now: .zero)
        var client = StunClient(servers: [server], seed: seed, now: .zero)
        _ = allocation.tick(now: .zero)
        _ = client.tick(now: .zero)
        for iteration in 0..<testIterations(20_000) {
            var input = Self.stunShaped(using: &rng)
            if input.count >= 4, Bool.random(using: &rng) { input[0] = 0x40 | UInt8.random(in: 0...0x3F, using: &rng) }
            if let framed = try? ChannelData.decode(input) {
                #expect(try ChannelData.decode(framed.encoded()) == framed, "seed \(seed) iteration \(iteration)")
            }
            _ = allocation.unwrap(input, now: .zero)
            _ = client.handle(input, from: server, now: .zero)
        }
        #expect(allocation.phase == .allocating, "random bytes allocated: seed \(seed)")
    }
}
