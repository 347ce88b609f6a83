import Testing
@testable import MeshCore

/// A pace goes in one unacknowledged datagram: whether the holder heard it shows in what it
/// sends once the pace could show.
@Suite struct ToldPaceTests {
    static let told = MeshInstant.zero + .seconds(1)

    /// Pieces of 1,400 bytes at `rate` bytes per second from `start` for `seconds`; judged at
    /// every piece. Returns when it first read as unheard.
    static func feed(
        _ pace: inout ToldPace, rate: Double, from start: MeshInstant, seconds: Double,
        window: Duration = .milliseconds(50)
    ) -> MeshInstant? {
        var t = 0.0
        while t < seconds {
            let now = start + .seconds(t)
            pace.onPiece(bytes: 1400, now: now)
            if pace.unheard(now: now, window: window) { return now }
            t += 1400 / rate
        }
        return nil
    }

    @Test("a holder that keeps to the pace, or sends less, reads as having heard it")
    func keptPaceIsHeard() {
        var pace = ToldPace(rate: 1_000_000, at: Self.told, showsAfter: .milliseconds(40))
        #expect(Self.feed(&pace, rate: 1_000_000, from: Self.told, seconds: 3) == nil)
        #expect(
            Self.feed(&pace, rate: 1_300_000, from: Self.told + .seconds(3), seconds: 3) == nil,
            "under the factor")
        #expect(Self.feed(&pace, rate: 100_000, from: Self.told + .seconds(6), seconds: 3) == nil)
    }

    @Test("a holder sending twice the pace once it could show reads as unheard within a window or two")
    func aPaceNotKeptIsUnheard() throws {
        var pace = ToldPace(rate: 1_000_000, at: Self.told, showsAfter: .milliseconds(40))
        let unheard = try #require(Self.feed(&pace, rate: 2_000_000, from: Self.told, seconds: 1))
        #expect(unheard >= Self.told + .milliseconds(90), "judged before a window past the round trip: \(unheard)")
        #expect(unheard <= Self.told + .milliseconds(150), "judged only at \(unheard)")
    }

    @Test("what arrives before the pace could show (sent at the old one) is not counted")
    func piecesSentBeforeTheTellDoNotCount() {
        var pace = ToldPace(rate: 1_000_000, at: Self.told, showsAfter: .milliseconds(100))
        // The old pace's pieces, four times the new one, for the round trip and the queue.
        #expect(Self.feed(&pace, rate: 4_000_000, from: Self.told, seconds: 0.1) == nil)
        #expect(Self.feed(&pace, rate: 1_000_000, from: Self.told + .milliseconds(100), seconds: 2) == nil)
    }

    @Test("at a trickle, a window is judged only once it holds enough bytes to say anything")
    func aFewPiecesSayNothing() {
        var pace = ToldPace(rate: 8_000, at: Self.told, showsAfter: .milliseconds(40))
        // Three pieces in 50 ms are 84 KB/s, ten times the pace, but only three pieces.
        var now = Self.told + .milliseconds(40)
        for _ in 0..<3 {
            pace.onPiece(bytes: 1400, now: now)
            now = now + .milliseconds(17)
        }
        let judged = pace.unheard(now: now, window: .milliseconds(50))
        #expect(!judged)
        // Enough of them at that rate is another matter.
        #expect(Self.feed(&pace, rate: 84_000, from: now, seconds: 1) != nil)
    }
}
