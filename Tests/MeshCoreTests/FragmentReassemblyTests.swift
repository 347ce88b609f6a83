import MeshCore
import Testing

/// Unreliable messages: fragments put back together, each message at most once, in bounded
/// memory, and incomplete ones dropped after the timeout.
@Suite("Fragment reassembly (unreliable mode)")
struct FragmentReassemblyTests {
    static let start = MeshInstant(nanoseconds: 1_000_000_000)

    static func fragments(of message: [UInt8], id: UInt64, size: Int) -> [UnreliableFragment] {
        let count = max(1, (message.count + size - 1) / size)
        return (0..<count).map { index in
            UnreliableFragment(
                messageID: id, index: UInt16(index), count: UInt16(count),
                body: Array(message[min(message.count, index * size)..<min(message.count, (index + 1) * size)]))
        }
    }

    @Test("fragments in any order give back the message, once")
    func reassemblesInAnyOrder() {
        var reassembly = FragmentReassembly()
        let message = patternBytes(10_000, salt: 9)
        var pieces = Self.fragments(of: message, id: 42, size: 1127)
        #expect(pieces.count == 9)
        var random = SplitMix64(seed: testSeed(3))
        pieces.shuffle(using: &random)
        var outputs: [[UInt8]] = []
        for piece in pieces {
            if let whole = reassembly.onFragment(piece, now: Self.start) { outputs.append(whole) }
        }
        expectMessages(outputs, [message])
        #expect(reassembly.bufferedBytes == 0)
    }

    @Test("duplicated fragments never deliver a message twice")
    func duplicatesDeliverOnce() {
        var reassembly = FragmentReassembly()
        let message = patternBytes(3000, salt: 1)
        let pieces = Self.fragments(of: message, id: 7, size: 1000)
        var random = SplitMix64(seed: testSeed(5))
        var arrivals = pieces + pieces + pieces.filter { _ in Bool.random(using: &random) }
        arrivals.shuffle(using: &random)
        var outputs: [[UInt8]] = []
        for piece in arrivals {
            if let whole = reassembly.onFragment(piece, now: Self.start) { outputs.append(whole) }
        }
        expectMessages(outputs, [message])
        #expect(reassembly.bufferedBytes == 0, "late duplicates of a finished message are not kept")
        // A single-fragment message, twice.
        let single = UnreliableFragment(messageID: 8, index: 0, count: 1, body: [1, 2, 3])
        #expect(reassembly.onFragment(single, now: Self.start) == [1, 2, 3])
        #expect(reassembly.onFragment(single, now: Self.start) == nil)
        // An empty message is a message too.
        let empty = UnreliableFragment(messageID: 9, index: 0, count: 1, body: [])
        #expect(reassembly.onFragment(empty, now: Self.start) == [])
    }

    @Test("an incomplete message is dropped after the timeout")
    func incompleteMessageExpires() throws {
        var reassembly = FragmentReassembly(timeout: .seconds(5))
        let message = patternBytes(3000, salt: 2)
        let pieces = Self.fragments(of: message, id: 11, size: 1000)
        #expect(reassembly.onFragment(pieces[0], now: Self.start) == nil)
        #expect(reassembly.onFragment(pieces[2], now: Self.start + .seconds(1)) == nil)
        #expect(reassembly.bufferedBytes == 2000)
        #expect(try #require(reassembly.earliestExpiry) == Self.start + .seconds(5))
        reassembly.expire(now: Self.start + .milliseconds(4999))
        #expect(reassembly.bufferedBytes == 2000, "not before the timeout")
        reassembly.expire(now: Self.start + .seconds(5))
        #expect(reassembly.bufferedBytes == 0)
        #expect(reassembly.dropped == 1)
        #expect(reassembly.earliestExpiry == nil)
        // The missing fragment turns up late: what was dropped does not come back.
        #expect(reassembly.onFragment(pieces[1], now: Self.start + .seconds(6)) == nil)
    }

    @Test("many incomplete messages never hold more than the capacity")
    func memoryIsBounded() {
        let capacity = 20_000
        var reassembly = FragmentReassembly(capacity: capacity, timeout: .seconds(5))
        var now = Self.start
        for id in UInt64(1)...2_000 {
            // Two of three fragments of 700 bytes: never complete.
            _ = reassembly.onFragment(
                UnreliableFragment(messageID: id, index: 0, count: 3, body: patternBytes(700)), now: now)
            _ = reassembly.onFragment(
                UnreliableFragment(messageID: id, index: 2, count: 3, body: patternBytes(700)), now: now)
            #expect(reassembly.bufferedBytes <= capacity)
            now = now + .milliseconds(1)
        }
        #expect(reassembly.bufferedBytes > capacity / 2, "the buffer was used")
        #expect(reassembly.dropped > 1_900, "the oldest were dropped to make room")
        // Tiny fragments are charged at least 64 bytes each, so they are bounded too.
        for id in UInt64(10_000)...15_000 {
            _ = reassembly.onFragment(UnreliableFragment(messageID: id, index: 1, count: 2, body: []), now: now)
        }
        #expect(reassembly.bufferedBytes <= capacity)
        reassembly.expire(now: now + .seconds(5))
        #expect(reassembly.bufferedBytes == 0)
    }

    @Test("a fragment that makes room must not evict its own message's accounting")
    func evictingOwnMessageKeepsAccounting() {
        var reassembly = FragmentReassembly(capacity: 1000, timeout: .seconds(5))
        // A (oldest) and B fill most of the buffer; A's second fragment needs room, and A is
        // the oldest message.
        _ = reassembly.onFragment(
            UnreliableFragment(messageID: 1, index: 0, count: 3, body: patternBytes(400)), now: Self.start)
        _ = reassembly.onFragment(
            UnreliableFragment(messageID: 2, index: 0, count: 3, body: patternBytes(500)),
            now: Self.start + .milliseconds(1))
        _ = reassembly.onFragment(
            UnreliableFragment(messageID: 1, index: 1, count: 3, body: patternBytes(200)),
            now: Self.start + .milliseconds(2))
        #expect(reassembly.bufferedBytes <= 1000)
        _ = reassembly.onFragment(
            UnreliableFragment(messageID: 1, index: 2, count: 3, body: patternBytes(200)),
            now: Self.start + .milliseconds(3))
        #expect(reassembly.bufferedBytes >= 0 && reassembly.bufferedBytes <= 1000)
        reassembly.expire(now: Self.start + .seconds(10))
        #expect(reassembly.bufferedBytes == 0, "the byte count must match what is held")
    }

    @Test("random fragment streams keep the byte count exact and within capacity")
    func randomStreamsKeepAccounting() {
        let seed = testSeed(17)
        var random = SplitMix64(seed: seed)
        for round in 0..<testIterations(40) {
            let capacity = Int.random(in: 500...5_000, using: &random)
            var reassembly = FragmentReassembly(capacity: capacity, timeout: .milliseconds(50))
            var now = Self.start
            for _ in 0..<300 {
                let id = UInt64.random(in: 1...12, using: &random) + UInt64(round) * 100
                let count = UInt16.random(in: 1...4, using: &random)
                let index = UInt16.random(in: 0..<count, using: &random)
                let body = patternBytes(Int.random(in: 0...600, using: &random), salt: UInt8(id & 0xFF))
                _ = reassembly.onFragment(
                    UnreliableFragment(messageID: id, index: index, count: count, body: body), now: now)
                guard reassembly.bufferedBytes >= 0 && reassembly.bufferedBytes <= capacity else {
                    Issue.record(
                        "seed \(seed) round \(round): \(reassembly.bufferedBytes) bytes counted, capacity \(capacity)")
                    return
                }
                now = now + .milliseconds(Int64.random(in: 0...5, using: &random))
                if Bool.random(using: &random) { reassembly.expire(now: now) }
            }
            reassembly.expire(now: now + .seconds(1))
            #expect(reassembly.bufferedBytes == 0, "seed \(seed) round \(round)")
        }
    }

    @Test("a fragment whose count disagrees with its message's is ignored")
    func inconsistentCountIgnored() {
        var reassembly = FragmentReassembly()
        #expect(
            reassembly.onFragment(UnreliableFragment(messageID: 1, index: 0, count: 2, body: [1]), now: Self.start)
                == nil)
        #expect(
            reassembly.onFragment(UnreliableFragment(messageID: 1, index: 1, count: 3, body: [2]), now: Self.start)
                == nil)
        #expect(
            reassembly.onFragment(UnreliableFragment(messageID: 1, index: 1, count: 2, body: [2]), now: Self.start) == [
                1, 2,
            ])
    }
}
