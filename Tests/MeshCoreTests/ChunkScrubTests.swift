@testable import MeshCore
import MeshCrypto
import Testing

@Suite("Chunk scrub")
struct ChunkScrubTests {
    static let chunks = (0..<4).map { SHA256Digest.hashing([UInt8($0)]) }

    /// Drives a scrub from `start` for `duration` in 10 ms steps, each read coming back at once;
    /// returns what it read, in order.
    static func drive(
        _ scrub: inout ChunkScrub, settings: ChunkScrub.Settings, from start: MeshInstant, for duration: Duration,
        held: [SHA256Digest] = chunks, busy: (MeshInstant) -> Bool = { _ in false },
        stillHeld: ((SHA256Digest) -> Bool)? = nil, intact: (SHA256Digest) -> Bool = { _ in true }
    ) -> [(SHA256Digest, MeshInstant)] {
        var reads: [(SHA256Digest, MeshInstant)] = []
        var now = start
        while now < start + duration {
            if let next = scrub.due(
                now: now, settings: settings, busy: busy(now), held: { held },
                stillHeld: stillHeld ?? { held.contains($0) })
            {
                reads.append((next, now))
                scrub.read(intact: intact(next), now: now, settings: settings)
            }
            now = now + .milliseconds(10)
        }
        return reads
    }

    @Test("a pass reads every chunk held once, spaced, from a minute after start, and the next a day later")
    func passes() {
        var scrub = ChunkScrub()
        let settings = ChunkScrub.Settings()
        let start = MeshInstant(nanoseconds: 5_000_000_000)
        let first = Self.drive(&scrub, settings: settings, from: start, for: .seconds(120))
        #expect(first.map(\.0) == Self.chunks)
        #expect(first.first.map { $0.1 >= start + settings.firstAfter } == true)
        for (earlier, later) in zip(first, first.dropFirst()) { #expect(later.1 - earlier.1 >= settings.spacing) }
        #expect(scrub.chunksChecked == 4 && scrub.chunksDamaged == 0)
        // Nothing more until a day after the pass.
        #expect(scrub.nextDeadline.map { $0 >= first.last!.1 + .seconds(86_399) } == true)
    }

    @Test("while the node fetches or serves, the pass waits; what is no longer held is skipped; damage is counted")
    func waitsSkipsAndCounts() {
        var scrub = ChunkScrub()
        let settings = ChunkScrub.Settings()
        let start = MeshInstant.zero
        let busyUntil = start + settings.firstAfter + .seconds(12)
        // The pass starts from all four; the third is no longer held when its turn comes.
        let reads = Self.drive(
            &scrub, settings: settings, from: start, for: .seconds(120), busy: { $0 < busyUntil },
            stillHeld: { $0 != Self.chunks[2] }, intact: { $0 != Self.chunks[1] })
        #expect(reads.map(\.0) == [Self.chunks[0], Self.chunks[1], Self.chunks[3]])
        #expect(reads.first.map { $0.1 >= busyUntil } == true, "read while busy")
        #expect(scrub.chunksChecked == 3 && scrub.chunksDamaged == 1)
    }

    @Test("a tick passes over at most 256 chunks no longer held: a removed library costs short ticks")
    func skipsAreBoundedPerTick() {
        var scrub = ChunkScrub()
        let settings = ChunkScrub.Settings()
        let held = (0..<600).map { SHA256Digest.hashing([UInt8($0 % 256), UInt8($0 / 256)]) }
        var now = MeshInstant.zero
        var calls = 0
        var checked = 0
        _ = scrub.due(now: now, settings: settings, busy: false, held: { held }, stillHeld: { _ in true })
        now = now + settings.firstAfter
        while calls < 10, scrub.nextDeadline.map({ $0 < now + .seconds(3600) }) == true {
            now = max(now, scrub.nextDeadline ?? now)
            calls += 1
            #expect(
                scrub.due(
                    now: now, settings: settings, busy: false, held: { held },
                    stillHeld: { _ in
                        checked += 1; return false
                    }) == nil)
        }
        #expect(checked == 600 && calls == 3, "\(checked) chunks looked at in \(calls) ticks")
    }

    @Test("no scrub when its interval is nil")
    func off() {
        var scrub = ChunkScrub()
        var settings = ChunkScrub.Settings()
        settings.every = nil
        #expect(Self.drive(&scrub, settings: settings, from: .zero, for: .seconds(300)).isEmpty)
    }
}
