/// The pace a holder was last told, and whether what it sent since shows that it heard.
///
/// A pace travels in one datagram, with a want or alone when it changes, and nothing
/// acknowledges it: a lost cut stood until the holder's next want, which at a low rate comes
/// seconds later (in simulation, the cut to an eighth that starts a slowdown test was lost on a
/// 0.5% lossy line, and that holder sent at its old pace through the whole test). So the pieces
/// that arrive once the pace could show are counted: a holder sending well past it did not hear
/// it, and is told again.
struct ToldPace: Sendable {
    /// What the holder was asked to send, bytes per second.
    let rate: Int
    let at: MeshInstant
    /// Pieces sent at the new pace arrive from here on (counted from here).
    private var countFrom: MeshInstant
    private var bytes = 0

    /// Arrivals past the pace by this factor, over a window, say it was not heard. A holder's
    /// pacer keeps to its pace within a slice, far less than this.
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

    /// Whether the holder sent more than `unheardFactor` times the pace over the last `window`
    /// (judged once a window with enough bytes has passed; counting then starts again).
    mutating func unheard(now: MeshInstant, window: Duration) -> Bool {
        guard now >= countFrom + window, bytes >= Self.judgedBytes else { return false }
        let seconds = (now - countFrom).milliseconds / 1000
        let sent = Double(bytes) / seconds
        countFrom = now
        bytes = 0
        return rate > 0 && sent > Double(rate) * Self.unheardFactor
    }
}
