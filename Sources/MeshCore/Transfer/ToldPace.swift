/// The pace a holder was last told, and whether what it sent since shows that it heard.
///
/// A pace travels in one datagram, with a want or alone when it changes, and nothing
/// acknowledges it: a lost cut would stand until the holder's next want, which at a low rate
/// comes seconds later (a lost cut that starts a slowdown test would spoil the whole test;
/// Docs/DESIGN-NOTES.md). So the pieces
/// that arrive once the pace could show are counted: a holder sending well past it did not hear
/// it, and is told again.
struct ToldPace: Sendable {
    /// The share asked of the holder, bytes per second (it hears it in whole KiB/s, at least 1).
    let rate: Int
    /// When it was told.
    let at: MeshInstant
    /// Pieces sent at the new pace arrive from here on (counted from here).
    private var countFrom: MeshInstant
    private var bytes = 0

    /// Arrivals past the pace by this factor say it was not heard. A holder's pacer keeps to its
    /// pace within a slice, but may send 10 ms of credit at once after a pause: over the shortest
    /// window (20 ms) that can read as up to this, and the retelling it brings changes nothing.
    static let unheardFactor = 1.5
    /// Fewer bytes than this in a window say nothing (a few pieces at a low pace).
    static let judgedBytes = 16 * 1024

    /// `showsAfter`: how long after telling the pieces sent at it can arrive (a round trip,
    /// and the queue on the way).
    init(rate: Int, at: MeshInstant, showsAfter: Duration) {
        self.rate = rate
        self.at = at
        countFrom = at + showsAfter
    }

    mutating func onPiece(bytes count: Int, now: MeshInstant) {
        if now >= countFrom { bytes += count }
    }

    /// Whether the holder sent more than `unheardFactor` times the pace it heard since counting
    /// began: judged once at least `window` has passed with enough bytes, and counting then
    /// starts again (so a verdict comes at most once a window).
    mutating func unheard(now: MeshInstant, window: Duration) -> Bool {
        guard now >= countFrom + window, bytes >= Self.judgedBytes else { return false }
        let seconds = (now - countFrom).milliseconds / 1000
        let sent = Double(bytes) / seconds
        countFrom = now
        bytes = 0
        let heard = ChunkPace.representable(rate)
        return heard > 0 && sent > Double(heard) * Self.unheardFactor
    }
}
