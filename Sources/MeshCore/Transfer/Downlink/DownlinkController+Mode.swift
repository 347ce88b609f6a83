extension DownlinkController {
    /// The controller's phase. Each case carries what only that phase needs; what holds across
    /// phases (the estimators, the unproven holders' word, a drain) lives beside it.
    enum Mode: Sendable {
        /// Doubling per round trip from the first rate until a queue shows.
        case slowStart(SlowStart)
        /// Delay mode (LEDBAT): growth into the room under the target, a cut in proportion to
        /// the excess over it.
        case congestionAvoidance
        /// A foreground fetch beside another flow that keeps the queue full competes by TCP's
        /// rules, loss included, until the queue drains (Copa's switch).
        case competing(Competing)
        /// A test (LEDBAT++'s slowdown): at a fraction of the rate for a few round trips, to see
        /// whether the queue drains (ours) or stays (another flow's).
        case slowdown(Slowdown)
        /// After a test that found the queue our own: a quarter more asked, to see whether more
        /// comes (BBR's probe), which it does only where the queue is shared.
        case probe(Probe)
        /// A start from idle over paths a fetch measured before (careful resume): a round trip to
        /// confirm them, a jump to at most half the rate reached then, and its validation.
        case resuming(Resume)

        var isSlowStart: Bool {
            if case .slowStart = self { return true }
            return false
        }

        /// Competing, or a test that interrupted it (and goes back to it without a verdict).
        var competing: Competing? {
            switch self {
            case .competing(let state): state
            case .slowdown(let test): test.interrupted
            case .slowStart, .congestionAvoidance, .probe, .resuming: nil
            }
        }
    }

    struct SlowStart: Sendable {
        /// Slow start raised the rate (a queue seen after that may be our own).
        var grew = false
        /// Since when every proven piece showed a queue (reset as each interval begins).
        var queuedSince: MeshInstant?
        /// The same for pieces of holders not proven yet.
        var unprovenQueuedSince: MeshInstant?
    }

    struct Competing: Sendable {
        /// Competing just began: the rate grows by `competitiveStartGain` per interval until the
        /// first loss or this time (nil: that start is over), as a TCP that starts beside another
        /// does (slow start into the other flow's queue). Added a few datagrams per round trip
        /// from the delay-mode rate, a latecomer took seconds to reach its share.
        var startEnds: MeshInstant?
        /// Since when the queue was under a quarter of the target.
        var drainedSince: MeshInstant?
    }

    /// The slowdown under way: the rate to go back to, when to judge and when it ends, and the
    /// lowest queue a proven piece showed since `judgeFrom`.
    struct Slowdown: Sendable {
        var rate: Double
        /// What arrived before it, from all holders (the more of the last two intervals).
        var delivered: Double
        var judgeFrom: MeshInstant
        var until: MeshInstant
        var lowest: Duration?
        /// The competing it interrupted (nil: it began in delay mode).
        var interrupted: Competing?
    }

    /// The probe under way after a test that found the queue our own: the rate to go back to,
    /// what arrived before the test, and the bytes that arrived since `judgeFrom`. Bytes from all
    /// holders, proven or not: they share one line, and a holder proven during the probe must not
    /// pass for a larger share of it.
    struct Probe: Sendable {
        var rate: Double
        var deliveredBefore: Double
        /// When deliveries were back (nil: not yet), and when it ends.
        var judgeFrom: MeshInstant?
        var until: MeshInstant
        var bytes = 0
    }

    /// What holders not proven yet did to the rate. Their timestamps may be lies, so their word
    /// counts once: it can hold slow start back, and after slow start grew drain what it
    /// overshot once and cut while that queue goes on rising, never below half of what arrived
    /// at that drain. Kept across phases until a pause.
    enum UnprovenHold: Sendable {
        /// Their queue has not moved the rate.
        case none
        /// Their queue brought the rate down once, at `at`; `afterGrowth`: slow start had grown
        /// (the queue was likely its own overshoot).
        case held(afterGrowth: Bool, at: MeshInstant)
        /// After growth, that queue stayed and was drained once (`closeUnprovenInterval`).
        case drained(UnprovenDrain)

        var isHeld: Bool {
            if case .none = self { return false }
            return true
        }

        var afterGrowth: Bool {
            switch self {
            case .none: false
            case .held(let afterGrowth, _): afterGrowth
            case .drained: true
            }
        }
    }

    struct UnprovenDrain: Sendable {
        /// The lowest the unproven queue's rise may cut the rate to.
        var floor: Double
        /// Intervals that start from here show the rate the drain went back to (its own queue,
        /// still rising a round trip into it, is not a rise at that rate).
        var riseFrom: MeshInstant
        /// The highest queues of the last two unproven intervals that show that rate.
        var rise: (older: Duration?, newer: Duration?) = (nil, nil)
    }

    /// A rate held below `rate` for a while (`drained`), back to it at the first close past
    /// `until` unless something else cut it meanwhile (`endDrain`).
    struct Drain: Sendable {
        var rate: Double
        var drained: Double
        var until: MeshInstant
    }

    /// Where slow start's overshoot stands for a lossy line's target, which applies only once the
    /// overshoot drained under it. Slow start ends past the line with a queue of its own; cut at
    /// the lower target, that queue would halve the rate where the usual one takes three tenths
    /// off, and a fetch on a lossy long path, bound by its window (repairs hold chunks), grows back
    /// too slowly (Docs/DESIGN-NOTES.md).
    enum LossyTargetPhase: Sendable {
        /// In slow start, or no interval's queue has reached the lower target since.
        case waiting
        /// An interval's queue reached it (the overshoot showed).
        case overshot
        /// A later one fell under it: the lower target applies.
        case armed
    }
}
