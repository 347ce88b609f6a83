extension DownlinkController {
    /// Whether loss is a queue overflowing or the line losing at random, from the datagrams
    /// received and lost interval by interval (see `Settings.lossThreshold`, `quietLossThreshold`
    /// and `lossyLine`).
    ///
    /// Invariants: counts are never negative. Beside a queue (at least `quietQueue` of the
    /// target) one interval's loss rate judges alone; with no queue, loss counts over the quiet
    /// intervals of about the last eight (a sum that decays by an eighth per interval, emptied by
    /// the cut it leads to). Intervals under the target count toward the line's loss over about
    /// the last 64 of them, kept through cuts and pauses: it describes the line.
    struct LossHistory: Sendable {
        let threshold: Double
        let minimum: Int
        let quietQueue: Double
        let quietThreshold: Double
        let lossyLine: Double
        let lineMinimum: Int
        private(set) var quiet = (received: 0.0, lost: 0.0)
        private(set) var line = (received: 0.0, lost: 0.0)

        init(settings: Settings) {
            threshold = settings.lossThreshold
            minimum = settings.lossMinimum
            quietQueue = settings.quietQueue
            quietThreshold = settings.quietLossThreshold
            lossyLine = settings.lossyLine
            lineMinimum = settings.lineLossMinimum
        }

        /// Whether the line loses datagrams at random.
        var isLossyLine: Bool {
            line.lost >= Double(lineMinimum) && line.lost / (line.lost + line.received) >= lossyLine
        }

        /// An interval closed with `queue` against `target` (seconds): whether its losses are a
        /// queue overflowing. Once per interval.
        mutating func overflowing(queue: Double, target: Double, received: Int, lost: Int) -> Bool {
            quiet = (quiet.received * 7 / 8, quiet.lost * 7 / 8)
            if queue < target {
                line = (line.received * 63 / 64 + Double(received), line.lost * 63 / 64 + Double(lost))
            }
            guard queue < target * quietQueue else {
                return lost >= minimum && Double(lost) / Double(lost + received) > threshold
            }
            quiet = (quiet.received + Double(received), quiet.lost + Double(lost))
            return quiet.lost >= Double(minimum) && quiet.lost / (quiet.lost + quiet.received) > quietThreshold
        }

        /// A cut for loss answered the quiet intervals' loss (or a pause made it stale).
        mutating func forgetQuiet() {
            quiet = (0, 0)
        }
    }
}
