import MeshCrypto

/// The requesting side of congestion control: how fast all holders together may send to this
/// node. A joiner's pieces usually share one bottleneck (its own line, whoever sends them), so
/// one controller per node governs them as one aggregate; holders pace what they owe at the
/// share of this rate that the node hands each (`PiecePacer`).
///
/// The signal is queueing delay, as LEDBAT (RFC 6817) measures it: every piece carries the
/// holder's clock, the lowest difference to ours seen lately is the path's base delay, and
/// anything above it is time spent in a queue. Below the target the rate grows (doubling per
/// round trip at first, then in proportion to the room left); above it, it shrinks in
/// proportion to the excess. Random loss does not move it: only a loss rate no random loss of a
/// working path reaches (a queue overflowing) cuts the rate. A fetch someone waits for that
/// finds the queue held full by another flow (a loss-based TCP) competes by TCP's rules, loss
/// included, until the queue drains (Copa's switch); background replication never does, so it
/// gives way (LEDBAT's purpose); on a line that loses at random, where a TCP held down by that
/// loss shows no queue to yield to, it leaves half the line (`lossyLineBackgroundShare`). A fetch
/// that came after that flow took its base delay with the flow's queue in it, and sees only the
/// rest: it tells the two apart by slowing to an eighth for a few round trips (LEDBAT++'s
/// slowdown, used as a test). Its own queue drains; another flow's stays, and then it competes.
/// When the base delay held its own queue too, the rest can drain with it: a queue that seemed its
/// own is checked by asking a quarter more (BBR's probe), which brings more only where the queue
/// shares the line with another flow.
///
/// Pure: pieces, datagram numbers and round-trip samples come in with their time; the rate
/// and the bytes that may be in flight come out.
///
/// Its phase is one `Mode` (slow start, congestion avoidance, competing, a slowdown, a probe), each
/// case with the state only it needs; what holds across phases is beside it: the estimators
/// (`BaseDelays`, `DatagramLosses`, `LossHistory`, `LineRate`, `RoundTripEstimate`,
/// `DeliveryRates`), when the next test goes (`SlowdownSchedule`), and what unproven holders did
/// to the rate (`UnprovenHold`). An interval's close is in `+Close` and `+Unproven`, tests and
/// probes in `+Slowdown`.
package struct DownlinkController: Sendable {
    package enum Priority: Sendable, Equatable {
        /// A fetch someone waits for (`get`, `Journal.load`).
        case foreground
        /// Replication nobody waits for.
        case background
    }

    package let settings: Settings
    package internal(set) var rate: Double
    package private(set) var priority = Priority.background
    /// The phase: slow start, delay mode, competing, a test or a probe.
    var mode = Mode.slowStart(SlowStart())
    /// What holders not proven yet did to the rate, across phases until a pause.
    var unproven = UnprovenHold.none
    var roundTrips: RoundTripEstimate
    var delays: BaseDelays
    var losses = DatagramLosses()
    var lossHistory: LossHistory
    var lineRate: LineRate
    var deliveries: DeliveryRates
    var schedule: SlowdownSchedule
    /// The interval being measured (nil: none, pieces stopped).
    var measuring: OpenInterval?
    /// A rate held below another for a while, and back to it after (`drain`, `endDrain`).
    var drainReturn: Drain?
    var lossyTargetPhase = LossyTargetPhase.waiting
    /// No decrease before this: the last one has not shown yet.
    var holdUntil = MeshInstant.zero
    var lastClose: MeshInstant?
    /// Whether the last interval's queue was over a quarter of the target.
    var wasOver = false
    /// When the queue was last seen near empty.
    var drainedAt = MeshInstant.zero

    /// What the last probe delivered, as a share of what arrived before its test, for tracing.
    package internal(set) var lastProbeGain: Double?
    /// Slowdowns, and those that found another flow's queue (for tests and tracing).
    package internal(set) var slowdowns: UInt64 = 0
    package internal(set) var slowdownsFoundAnotherFlow: UInt64 = 0
    /// The lowest queue the last test judged (nil: none yet, or no piece came), for tracing.
    var lastSlowdownLowest: Duration?
    /// The highest queue unproven holders' pieces showed in the last interval closed on their
    /// pieces alone (nil: a proven holder fed it), for tracing.
    var lastUnprovenQueue: Duration?
    /// What the node offered for the next start from idle, and the most delivered in an interval
    /// since the last one (`CarefulResume`).
    var offer: ResumeOffer?
    var reached = 0.0
    /// Careful resumes that jumped, and those that retreated (for tests and tracing).
    package internal(set) var resumeJumps: UInt64 = 0
    package internal(set) var resumeRetreats: UInt64 = 0
    /// The latest queueing delay measured (the interval's lowest), for status and tests.
    package internal(set) var queueingDelay: Duration = .zero
    /// The last interval closed: what came, and what was lost (for tests and tracing).
    package internal(set) var lastInterval = (delivered: 0.0, received: 0, lost: 0, closedAt: MeshInstant.zero)
    /// Intervals that cut the rate for loss, for tests and counters.
    package internal(set) var lossBackoffs: UInt64 = 0

    /// The interval being measured: bytes and queues of the pieces that came in it.
    struct OpenInterval: Sendable {
        var start: MeshInstant
        var bytes = 0
        /// Bytes from holders not proven yet: counted only in an interval no proven holder fed.
        var unprovenBytes = 0
        /// The lowest queue a proven holder's pieces showed.
        var queue: Duration?
        /// The highest queue an unproven holder's pieces showed.
        var unprovenQueue: Duration?
    }

    package init(settings: Settings = .init()) {
        self.settings = settings
        rate = Double(settings.initialRate)
        roundTrips = RoundTripEstimate(history: settings.roundTripHistory)
        delays = BaseDelays(history: settings.baseHistory)
        lossHistory = LossHistory(settings: settings)
        lineRate = LineRate(refresh: settings.lineRateRefresh)
        deliveries = DeliveryRates(rate: rate)
        schedule = SlowdownSchedule(settings: settings)
    }

    /// In slow start (doubling per round trip until a queue shows).
    package var slowStart: Bool { mode.isSlowStart }

    /// Competing with a flow that fills the queue (foreground only; also during a test that
    /// interrupted it).
    package var competing: Bool { mode.competing != nil }

    /// Competing just began, and grows by `competitiveStartGain` per interval until the first loss.
    var competingSlowStart: Bool { mode.competing?.startEnds != nil }

    /// Whether a slowdown is under way (its rate is the one asked).
    package var isSlowingDown: Bool {
        if case .slowdown = mode { return true }
        return false
    }

    /// Whether a probe is under way (after a test that found the queue our own).
    package var isProbing: Bool {
        if case .probe = mode { return true }
        return false
    }

    /// The lowest want-to-first-piece time seen lately; nil before the first.
    package var roundTrip: Duration? { roundTrips.value }

    package var target: Duration {
        let target = priority == .foreground ? settings.foregroundTarget : settings.backgroundTarget
        guard lossyTargetPhase == .armed, let lossy = lossyLineTarget else { return target }
        return min(target, lossy)
    }

    /// The target of a line that loses at random (nil: not such a line, or no round trip yet).
    var lossyLineTarget: Duration? {
        guard isLossyLine, let roundTrip else { return nil }
        return max(settings.lossyLineTargetFloor, roundTrip * settings.lossyLineTarget)
    }

    /// Whether the line loses datagrams at random (see `lossyLine`).
    package var isLossyLine: Bool { lossHistory.isLossyLine }

    /// The most background replication asks on a line that loses at random (nil: no cap).
    package var backgroundCap: Double? { cap(now: nil) }

    func cap(now: MeshInstant?) -> Double? {
        guard priority == .background, isLossyLine, let line = lineRate.rate(now: now) else { return nil }
        return max(Double(settings.minimumRate), line * settings.lossyLineBackgroundShare)
    }

    /// The round trip, or a guess of 100 ms until the first is measured.
    var assumedRoundTrip: Duration { roundTrip ?? .milliseconds(100) }

    /// The control interval: a round trip, at least the minimum.
    var interval: Duration { max(settings.minimumInterval, assumedRoundTrip) }

    /// Bytes that may be asked for and not yet arrived: the rate over two round trips, the
    /// target's queue and the repair of a lost piece, so that the pacing (not the window) sets
    /// the rate; chunks come whole, and a chunk that waits for one repaired piece must not
    /// leave the line idle.
    var inFlightBudget: Int {
        let horizon = assumedRoundTrip * 2 + target + .milliseconds(200)
        return Int(rate * horizon.milliseconds / 1000)
    }

    var competeAfter: Duration {
        max(settings.competeAfterAtLeast, interval * settings.competeAfterIntervals)
    }

    mutating func setPriority(_ priority: Priority) {
        if priority != self.priority { schedule.testAtOnce(until: nil) }
        self.priority = priority
    }

    /// Any pairwise datagram from `holder`: its packet numbers show what was lost on the way
    /// (`DatagramLosses`).
    mutating func onDatagram(from holder: NodeID, packetNumber: UInt64, carriesPiece: Bool) {
        losses.record(from: holder, packetNumber: packetNumber, carriesPiece: carriesPiece, counting: measuring != nil)
    }

    /// A piece of `bytes` stamped `sentAt` by `holder`'s clock arrived. Returns whether it
    /// closed an interval (the rate may have changed). A piece that is not `trusted` (its holder
    /// has not proven itself yet) can only hold slow start (once, at what arrives; see
    /// `brakeSlowStart`), and after slow start grew drain it once for a round trip and cut it
    /// while its queue rises, never below half of what arrived at the drain (see
    /// `closeUnprovenInterval`): its queue counts as the highest of the interval, never as the
    /// line's lowest.
    @discardableResult
    mutating func onPiece(
        bytes: Int, sentAt: UInt32, from holder: NodeID, now: MeshInstant,
        trusted: Bool = true
    ) -> Bool {
        let queue = delays.queue(sentAt: sentAt, from: holder, now: now)
        let opens = measuring == nil
        var open = measuring ?? OpenInterval(start: now)
        if trusted {
            open.queue = open.queue.map { min($0, queue) } ?? queue
            open.bytes += bytes
        } else {
            open.unprovenQueue = open.unprovenQueue.map { max($0, queue) } ?? queue
            open.unprovenBytes += bytes
        }
        measuring = open
        switch mode {
        case .slowdown(var test) where trusted && now >= test.judgeFrom:
            test.lowest = test.lowest.map { min($0, queue) } ?? queue
            mode = .slowdown(test)
        case .probe(var probe) where probe.judgeFrom.map({ now >= $0 }) ?? false:
            probe.bytes += bytes
            mode = .probe(probe)
        default: break
        }
        if opens { openInterval(now: now) }
        if trusted, case .resuming(let resume) = mode, brakeResume(resume, queue: queue, now: now) { return true }
        // Unproven holders' queue brakes only an interval no proven holder fed (as at its close).
        if mode.isSlowStart, trusted || (!unproven.isHeld && open.queue == nil),
            brakeSlowStart(queue: queue, trusted: trusted, now: now)
        {
            return true
        }
        guard now >= open.start + interval else { return false }
        closeInterval(now: now)
        return true
    }

    /// An interval begins with this piece.
    private mutating func openInterval(now: MeshInstant) {
        if case .slowStart(var state) = mode {
            state.queuedSince = nil
            state.unprovenQueuedSince = nil
            mode = .slowStart(state)
        }
        // After a pause, what was seen before says nothing about the line now: the next fetch
        // starts again from the initial window, or resumes carefully from what a fetch over the
        // same paths reached (`startFromIdle`).
        guard let closed = lastClose else { return startFromIdle(firstEver: true, now: now) }
        guard now >= closed + max(.seconds(1), interval * 10) else { return }
        drainedAt = now
        wasOver = false
        unproven = .none
        endDrain(now: nil)
        schedule.testAtOnce(until: nil)
        schedule.forgetQueue()
        lossHistory.forgetQuiet()
        lossyTargetPhase = .waiting
        deliveries.forget()
        switch mode {
        case .competing(var state):
            state.startEnds = nil
            mode = .competing(state)
        case .slowdown(var test):
            // Not when the node ticks at `nextDeadline`: a test ends long before a pause.
            test.interrupted?.startEnds = nil
            mode = .slowdown(test)
        case .probe:
            break
        case .slowStart, .congestionAvoidance, .resuming:
            mode = .slowStart(SlowStart())
        }
        if case .slowStart = mode { startFromIdle(firstEver: false, now: now) }
    }

    /// A want's first piece came this long after it was sent. Returns whether the rate rose
    /// (the first round trip known, on a path short enough for the initial window to be more
    /// than the initial rate): the holders, paced at the initial rate, must hear it at once.
    @discardableResult
    mutating func onRoundTrip(_ sample: Duration, now: MeshInstant) -> Bool {
        let first = roundTrips.value == nil
        let reconnoitring = resumePhase == .reconnaissance
        guard roundTrips.add(sample, now: now), first, mode.isSlowStart || reconnoitring else { return false }
        // The first round trip known: slow start begins from a window's worth per round trip
        // (as TCP's initial window), which on a LAN is far more than the initial rate.
        let start = min(
            Double(settings.maximumRate),
            max(rate, Double(settings.initialWindow) / max(1e-6, sample.milliseconds / 1000)))
        let rose = start > rate
        rate = start
        return rose
    }

    /// A member is gone.
    mutating func removeHolder(_ holder: NodeID) {
        delays.remove(holder)
        losses.remove(holder)
    }

    /// Closes an interval that is over (pieces stopped coming: nothing is learned from it).
    mutating func onTick(now: MeshInstant) {
        if case .slowdown(let test) = mode, now >= test.until, measuring == nil { endSlowdown(test, now: now) }
        // Pieces stopped: the silence says nothing about a share of the line.
        if case .probe(let probe) = mode, now >= probe.until, measuring == nil {
            endProbe(probe, judged: false, now: now)
        }
        guard let open = measuring, now >= open.start + interval else { return }
        closeInterval(now: now)
    }

    var nextDeadline: MeshInstant? {
        if let open = measuring { return open.start + interval }
        switch mode {
        case .slowdown(let test): return test.until
        case .probe(let probe): return probe.until
        case .slowStart, .congestionAvoidance, .competing, .resuming: return nil
        }
    }

    /// A queue that lasts `slowStartBrake` ends slow start at what arrives. Returns whether it did.
    /// Holders not proven yet only hold it there, once, as at an interval's close: on an 80 ms
    /// line whose first rate is its whole capacity, waiting for two closes would let slow start
    /// run at 3× the line for two round trips and overflow its queue (Docs/DESIGN-NOTES.md).
    private mutating func brakeSlowStart(queue: Duration, trusted: Bool, now: MeshInstant) -> Bool {
        guard case .slowStart(var state) = mode else { return false }
        guard queue >= target / 4 else {
            if trusted { state.queuedSince = nil } else { state.unprovenQueuedSince = nil }
            mode = .slowStart(state)
            return false
        }
        guard let since = trusted ? state.queuedSince : state.unprovenQueuedSince else {
            if trusted { state.queuedSince = now } else { state.unprovenQueuedSince = now }
            mode = .slowStart(state)
            return false
        }
        guard now >= since + settings.slowStartBrake else { return false }
        // What arrives: the last interval if it was just now, and this one once long enough.
        var delivered = lastClose.map { now < $0 + interval * 2 } == true ? deliveries.last : 0
        if let open = measuring, now >= open.start + settings.slowStartBrake {
            let seconds = (now - open.start).milliseconds / 1000
            delivered = max(delivered, Double(open.bytes + open.unprovenBytes) / seconds)
        }
        guard delivered > 0 else { return false }
        if trusted {
            endSlowStartOnAQueue(grew: state.grew, now: now)
        } else {
            unproven = .held(afterGrowth: state.grew, at: now)
            state.unprovenQueuedSince = nil
            mode = .slowStart(state)
        }
        rate = min(rate, max(delivered, Double(settings.minimumRate)))
        holdUntil = now + interval * 2
        return true
    }

    /// Slow start ends on a queue: one that held it at its first rate, before any holder proved
    /// itself, is tested at once (within two seconds).
    mutating func endSlowStartOnAQueue(grew: Bool, now: MeshInstant) {
        mode = .congestionAvoidance
        schedule.testAtOnce(until: unproven.isHeld && !grew ? now + settings.slowdownAfter * 2 : nil)
    }

    /// Below `held` by enough to drain `excess` seconds of queue over `seconds` (at least half of
    /// it), back to `held` at the first close past `until` (`endDrain`).
    mutating func drain(from held: Double, excess: Double, overSeconds seconds: Double, until: MeshInstant) {
        rate = max(Double(settings.minimumRate), held * max(0.5, 1 - excess / seconds))
        drainReturn = Drain(rate: held, drained: rate, until: until)
    }

    /// A drain lasts until the first close past its end (or a pause, `now` nil): back to the rate
    /// held, unless something else cut the rate meanwhile (a proven holder's brake, a test),
    /// whose word stands. Growth during the drain (a probe's queue under the target) does not
    /// keep the rate drained.
    mutating func endDrain(now: MeshInstant?) {
        guard let back = drainReturn else { return }
        let drained = rate >= back.drained && !isSlowingDown && !isProbing
        if let now, now < back.until, drained { return }
        if drained { rate = max(rate, back.rate) }
        drainReturn = nil
    }
}
