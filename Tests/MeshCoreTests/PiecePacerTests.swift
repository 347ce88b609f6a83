import MeshCrypto
import NIOCore
import Testing
@testable import MeshCore

/// The holder's pacing: pieces leave at the rate the member asked for, chunks take
/// turns, and asking again for what is still queued costs no second copy.
@Suite struct PiecePacerTests {
    static let peer = NodeID(high: 1, low: 1)
    static let other = NodeID(high: 2, low: 2)

    static func pieces(of digest: SHA256Digest, count: Int, size: Int = 1000) -> [ChunkPiece] {
        let chunk = ByteBuffer(bytes: [UInt8](repeating: 1, count: count * size))
        return ChunkAssembly.pieces(of: chunk, digest: digest, pieceSize: size)
    }

    static func ms(_ value: Int64) -> MeshInstant { MeshInstant(nanoseconds: UInt64(value) * 1_000_000) }

    @Test("a chunk asked again at another piece size replaces what waits at the old one")
    func anotherPieceSizeReplacesTheQueue() {
        var pacer = PiecePacer()
        pacer.setRate(1000, for: Self.peer)
        let digest = SHA256Digest.hashing([3])
        let chunk = ByteBuffer(bytes: [UInt8](repeating: 1, count: 8000))
        pacer.enqueue(ChunkAssembly.pieces(of: chunk, digest: digest, pieceSize: 4000), digest: digest, to: Self.peer)
        #expect(pacer.queuedBytes == 8000)
        let smaller = ChunkAssembly.pieces(of: chunk, digest: digest, pieceSize: 1000)
        #expect(pacer.enqueue(smaller, digest: digest, to: Self.peer) == 8000)
        #expect(pacer.queuedBytes == 8000 && pacer.queuedBytes(for: Self.peer) == 8000)
        var sizes: Set<Int> = []
        var now = Self.ms(0)
        while !pacer.isEmpty, now < Self.ms(60_000) {
            for (_, pieces) in pacer.due(now: now) { sizes.formUnion(pieces.map(\.pieceSize)) }
            now = pacer.nextDeadline ?? now
        }
        #expect(sizes == [1000], "pieces of the old size went out: \(sizes)")
    }

    @Test func unpacedPiecesGoAtOnce() {
        var pacer = PiecePacer()
        pacer.enqueue(Self.pieces(of: .hashing([1]), count: 10), digest: .hashing([1]), to: Self.peer)
        let due = pacer.due(now: Self.ms(5))
        #expect(due.count == 1 && due.first?.pieces.count == 10)
        #expect(pacer.isEmpty && pacer.nextDeadline == nil)
    }

    @Test func pacedPiecesLeaveAtTheRate() {
        var pacer = PiecePacer()
        // 1,052 bytes per piece on the wire at 105,200 B/s: one every 10 ms.
        pacer.setRate(100 * (1000 + ChunkPiece.overhead), for: Self.peer)
        pacer.enqueue(Self.pieces(of: .hashing([1]), count: 100), digest: .hashing([1]), to: Self.peer)
        var sent = 0
        var now = Self.ms(1000)
        var ticks = 0
        while !pacer.isEmpty, ticks < 10_000 {
            sent += pacer.due(now: now).reduce(0) { $0 + $1.pieces.count }
            if let next = pacer.nextDeadline {
                #expect(next > now, "a deadline in the past would spin the driver's timer")
                now = next
            }
            ticks += 1
        }
        #expect(sent == 100)
        // The first three at once (2 ms of burst and the 1 ms slice), then one per 10 ms.
        let elapsed = now - Self.ms(1000)
        #expect(elapsed >= .milliseconds(950) && elapsed <= .milliseconds(1000), "took \(elapsed)")
    }

    @Test func chunksTakeTurnsAndRewantsAreNotQueuedTwice() {
        var pacer = PiecePacer()
        let a = SHA256Digest.hashing([1]), b = SHA256Digest.hashing([2])
        pacer.enqueue(Self.pieces(of: a, count: 3), digest: a, to: Self.peer)
        pacer.enqueue(Self.pieces(of: b, count: 3), digest: b, to: Self.peer)
        // Asked again while queued: nothing more to send.
        pacer.enqueue(Self.pieces(of: a, count: 3), digest: a, to: Self.peer)
        #expect(pacer.queuedBytes == 6000)
        let order = pacer.due(now: Self.ms(1)).flatMap(\.pieces).map { ($0.digest == a ? "a" : "b") + "\($0.index)" }
        #expect(order == ["a0", "b0", "a1", "b1", "a2", "b2"])
        // Once sent, a piece asked again (it was lost) is queued again.
        pacer.enqueue(Array(Self.pieces(of: a, count: 3)[1...1]), digest: a, to: Self.peer)
        #expect(pacer.due(now: Self.ms(2)).flatMap(\.pieces).map(\.index) == [1])
    }

    @Test("a cancelled chunk's queued pieces are dropped, for that member only; the turn stays where it was")
    func aCancelDropsWhatWaits() {
        var pacer = PiecePacer()
        // One piece per 10 ms: after a pause the first tick sends two (a0, b0).
        pacer.setRate(100 * (1000 + ChunkPiece.overhead), for: Self.peer)
        let a = SHA256Digest.hashing([1]), b = SHA256Digest.hashing([2]), c = SHA256Digest.hashing([3])
        for digest in [a, b, c] { pacer.enqueue(Self.pieces(of: digest, count: 3), digest: digest, to: Self.peer) }
        let first = pacer.due(now: Self.ms(1000)).first { $0.peer == Self.peer }?.pieces.map {
            ($0.digest == a ? "a" : "b") + "\($0.index)"
        }
        #expect(first == ["a0", "b0"])
        pacer.enqueue(Self.pieces(of: b, count: 3), digest: b, to: Self.other)
        #expect(pacer.cancel(b, for: Self.peer) == 2000, "b's unsent pieces only")
        #expect(
            pacer.queuedBytes(for: Self.peer) == 5000 && pacer.queuedBytes(for: Self.other) == 3000,
            "another member's copy stays")
        #expect(pacer.cancel(b, for: Self.peer) == 0, "twice is nothing")
        pacer.setRate(0, for: Self.peer)
        let rest = pacer.due(now: Self.ms(1001)).first { $0.peer == Self.peer }?.pieces.map {
            ($0.digest == a ? "a" : "c") + "\($0.index)"
        }
        #expect(rest == ["c0", "a1", "c1", "a2", "c2"], "c's turn came after b's")
        #expect(pacer.queuedBytes == 0)
    }

    @Test func aMemberCanQueueOnlyItsCapOfChunks() {
        var pacer = PiecePacer()
        pacer.setRate(1024, for: Self.peer)
        for index in 0..<10 {
            let digest = SHA256Digest.hashing([UInt8(index)])
            #expect(
                pacer.enqueue(Array(Self.pieces(of: digest, count: 4)[0...0]), digest: digest, to: Self.peer) == 1000)
        }
        #expect(pacer.queuedChunks(for: Self.peer) == 10 && pacer.queuedBytes(for: Self.peer) == 10_000)
    }

    @Test func aGoneMemberTakesItsQueueAlong() {
        var pacer = PiecePacer()
        pacer.setRate(1024, for: Self.peer)
        pacer.enqueue(Self.pieces(of: .hashing([1]), count: 10), digest: .hashing([1]), to: Self.peer)
        pacer.enqueue(Self.pieces(of: .hashing([2]), count: 2), digest: .hashing([2]), to: Self.other)
        pacer.remove(Self.peer)
        #expect(pacer.queuedBytes == 2000 && pacer.queuedBytes(for: Self.peer) == 0)
    }

    /// A seed times its seeding interval from a copy's departure (`SeedingPolicy.verdict`).
    @Test("when a chunk's last piece left: now while it is queued, the time it left after, the latest 64 chunks kept")
    func whenAChunkLeft() {
        var pacer = PiecePacer()
        // 1,052 bytes per piece on the wire at 105,200 B/s: one every 10 ms.
        pacer.setRate(100 * (1000 + ChunkPiece.overhead), for: Self.peer)
        let digest = SHA256Digest.hashing([7])
        pacer.enqueue(Self.pieces(of: digest, count: 5), digest: digest, to: Self.peer)
        #expect(pacer.leftAt(digest, for: Self.peer, now: Self.ms(1)) == Self.ms(1), "still queued")
        #expect(pacer.leftAt(digest, for: Self.other, now: Self.ms(1)) == nil)
        var now = Self.ms(0), last = Self.ms(0)
        while !pacer.isEmpty, now < Self.ms(10_000) {
            if !pacer.due(now: now).isEmpty { last = now }
            now = pacer.nextDeadline ?? now
        }
        #expect(pacer.leftAt(digest, for: Self.peer, now: Self.ms(10_000)) == last)
        for index in 0..<PiecePacer.recentlyLeftLimit {
            let later = SHA256Digest.hashing([8, UInt8(index)])
            pacer.enqueue(Self.pieces(of: later, count: 1), digest: later, to: Self.peer)
            _ = pacer.due(now: Self.ms(20_000 + Int64(index) * 100))
        }
        #expect(
            pacer.leftAt(digest, for: Self.peer, now: Self.ms(30_000)) == nil,
            "the earliest is forgotten past the limit")
    }
}
