extension DownlinkController {
    package struct Settings: Sendable {
        /// Until the first round trip is known: about a TCP initial window per round trip on a home
        /// line (16 datagrams per 80 ms). A larger first rate takes most of a slow line before it
        /// knows anything of it, and beside a TCP download stands a queue for its first second
        /// (Docs/DESIGN-NOTES.md). On a short path the first round trip comes within a millisecond.
        package var initialRate = 1 << 18
        /// Bytes per round trip slow start begins from once the round trip is known (16
        /// datagrams): on a short path that is far more than `initialRate`.
        package var initialWindow = 16 * 1400
        /// Never less: a trickle keeps delay samples coming while others fill the line.
        package var minimumRate = 32 << 10
        package var maximumRate = 4 << 30
        /// Queueing delay aimed at, per priority.
        package var foregroundTarget: Duration = .milliseconds(25)
        package var backgroundTarget: Duration = .milliseconds(25)
        /// The shortest control interval (one round trip, at least this).
        package var minimumInterval: Duration = .milliseconds(20)
        /// Growth per interval at no queueing delay, in congestion avoidance.
        package var increaseGain = 0.125
        /// In slow start the rate grows to at most this many times what the last interval
        /// delivered (what was asked two intervals ago: the rate shows a round trip late).
        package var slowStartGain = 3.0
        /// The same while no holder has proven itself, once an interval's pieces show a queue of
        /// an eighth of the target (too small to brake on: a line filling up, or another flow's
        /// queue). Until the first chunk verifies, no delay mode follows a queue down, and slow
        /// start's overshoot stands, so beside a TCP download it should be smaller; at 2× everywhere
        /// a fetch on an uncapped long path, whose pieces show no queue, would fill it more slowly
        /// (Docs/DESIGN-NOTES.md).
        package var unprovenSlowStartGain = 2.0
        /// In slow start, a queue of a quarter of the target that lasts this long (every piece's)
        /// ends it at once, without waiting for the interval to close: the rate runs ahead of
        /// deliveries, and a home line's queue would overflow in the round trip it takes.
        package var slowStartBrake: Duration = .milliseconds(10)
        /// The rate grows only while what arrives is at least this share of it.
        package var caughtUp = 0.85
        /// Shrinking per interval per target's worth of excess delay (at most by half).
        package var decreaseGain = 0.5
        /// A loss rate in one interval over this (and at least `lossMinimum` datagrams), beside a
        /// queue of at least `quietQueue` of the target, is a queue overflowing (or an AQM
        /// dropping before it reaches our target), not random loss: the rate drops by `lossBackoff`.
        package var lossThreshold = 0.05
        package var lossMinimum = 4
        package var lossBackoff = 0.7
        /// With no queue to speak of (under `quietQueue` of the target) nothing is overflowing, so
        /// loss there is random (a lossy radio) unless it is heavy and lasting: it cuts only over
        /// `quietLossThreshold`, counted over the quiet intervals of about the last eight (a sum
        /// that decays by an eighth per interval). The per-interval rule alone would cut a fetch
        /// on a lossy radio to a small part of its line (Docs/DESIGN-NOTES.md). A policer, which
        /// drops without queueing, is then met at up to a tenth of loss instead of a twentieth.
        package var quietQueue = 1.0 / 8
        package var quietLossThreshold = 0.10
        /// A line that loses at least `lossyLine` of its datagrams (and `lineLossMinimum` of them)
        /// in intervals under the target, counted over about the last 64 of those, loses them at
        /// random (a radio, a noisy copper pair): the target drops to `lossyLineTarget` of the
        /// round trip, at least `lossyLineTargetFloor`, once slow start's overshoot drained
        /// (`LossyTargetPhase`). A TCP on such a line is held down by that loss, not by the line,
        /// and its rate goes as one over its round trip: the queue our target keeps is what it
        /// loses to us. The cost is ours: a smaller queue leaves more of the line idle at the
        /// troughs (what each side gains and loses: Docs/DESIGN-NOTES.md).
        package var lossyLine = 0.002
        package var lineLossMinimum = 4
        package var lossyLineTarget = 1.0 / 8
        package var lossyLineTargetFloor: Duration = .milliseconds(10)
        /// Background replication on such a line asks at most this share of the line's rate: what
        /// arrived in an interval whose queue showed the line full (`LineRate`), measured again
        /// every `lineRateRefresh`. A TCP held down by random loss averages a small share of the
        /// line, yet reaches most of it between its losses, and builds no queue for the delay
        /// signal to yield to until it is short already: even a steady flow with no queue at all
        /// takes from it (Docs/DESIGN-NOTES.md). The room left is what it grows into.
        package var lossyLineBackgroundShare = 0.5
        package var lineRateRefresh: Duration = .seconds(30)
        /// In a foreground fetch, a queue that did not drain for this many intervals (and at least
        /// `competeAfterAtLeast`) is another flow's: the controller competes.
        package var competeAfterIntervals = 8
        package var competeAfterAtLeast: Duration = .seconds(1)
        /// A foreground fetch whose queue sat at a quarter of its target or more for this long (at
        /// once when that queue held slow start at its first rate), without competing, slows to
        /// `slowdownShare` of its rate for `slowdownRoundTrips` control
        /// intervals (at least `slowdownAtLeast`). If the lowest queue of the second half of that
        /// stays at `slowdownVerdict` of the target, the queue is another flow's: it competes
        /// (a third, not half: a latecomer's base delay holds the other flow's trough, so that
        /// flow's queue shows as less than half of the target). If it drained, a probe
        /// checks (below); if that agrees, the queue was its own, and the next test waits twice as
        /// long (up to `slowdownSpacingLimit`), so a lone fetch on a full line pays a few percent
        /// at first and less and less later. A quarter, not half: delay mode, which grows no
        /// further than what arrives allows, can hold a latecomer beside TCP just under half for
        /// seconds (Docs/DESIGN-NOTES.md).
        package var slowdownAfter: Duration = .seconds(1)
        package var slowdownShare = 0.125
        package var slowdownRoundTrips = 3
        package var slowdownAtLeast: Duration = .milliseconds(200)
        package var slowdownVerdict = 1.0 / 3
        package var slowdownSpacing: Duration = .seconds(5)
        package var slowdownSpacingLimit: Duration = .seconds(40)
        /// A test that found the queue our own is checked from the other side, where the base delay
        /// plays no part: the rate goes to `probeGain` times what it was, and if what arrives over
        /// `probeRoundTrips` intervals, once it is back at `probeReturned` of what arrived before
        /// the test, reaches `probeVerdict` times that, the queue was not ours alone. Alone at a
        /// standing queue we had the whole line already, and asking more brings no more; beside
        /// another flow, the queue hands out the line in proportion to what comes in, and asking
        /// more takes a larger share (a quarter more asked, a fifth more delivered, when the other
        /// flow has five sixths). BBR probes bandwidth the same way. The wait for the return
        /// follows the path: behind another flow's queue our pieces come back a round trip and
        /// that queue after we ask (judged at a fixed time, the probe would miss it).
        /// A probe whose deliveries never return ends after `probeLimit` intervals (at least
        /// `probeAtLeast`), without a verdict.
        package var probeGain = 1.25
        package var probeRoundTrips = 2
        package var probeReturned = 0.75
        package var probeVerdict = 1.1
        package var probeLimit = 6
        package var probeAtLeast: Duration = .milliseconds(300)
        /// While competing: bytes more per round trip, and the cut on a loss with a queue.
        package var competitiveIncrease = 8 * 1400
        /// While competing, the rate grows only this many increases ahead of what arrives.
        package var competitiveLead = 4
        package var competitiveBackoff = 0.7
        /// When competing begins, growth per interval until the first loss, and how far ahead of
        /// what arrives (TCP doubles; here, where a loss shows an interval later than to a
        /// sender, doubling overflows the queue before the loss shows).
        package var competitiveStartGain = 1.5
        /// Careful resume (draft-ietf-tsvwg-careful-resume): what a fetch reached is kept this long.
        /// Ten minutes, as LEDBAT keeps a base delay: the span over which a path's properties are
        /// taken to hold; after that the cross traffic of a home line has come and gone.
        package var resumeLifetime: Duration = .seconds(600)
        /// The jump: at most this share of the rate saved, as the draft's half of the saved window.
        package var resumeJumpShare = 0.5
        /// The round trip measured in the reconnaissance, as a multiple of the saved one, must fall
        /// in here to jump (stricter than the draft's upper bound: twice as long is another route,
        /// a relay, whose line the saved rate says nothing of).
        package var resumeRoundTripRange: ClosedRange<Double> = 0.5...2
        /// Closes the validation waits for deliveries that answer the jump, at most.
        package var resumeValidatingLimit = 4
        /// On loss or a queue after the jump, the rate drops to this share of what arrived.
        package var resumeRetreat = 0.5
        /// The base delay is the lowest seen over about this long (LEDBAT keeps ten minutes; a
        /// shorter memory follows a path that changed sooner).
        package var baseHistory: Duration = .seconds(60)
        /// A round trip's lowest sample is kept this long.
        package var roundTripHistory: Duration = .seconds(10)
        package init() {}
    }
}
