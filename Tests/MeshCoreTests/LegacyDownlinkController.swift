import MeshCrypto
@testable import MeshCore

/// A frozen copy of `DownlinkController` before it was reshaped, for the differential test only.
struct LegacyDownlinkController: Sendable {
    typealias Priority = DownlinkController.Priority
    typealias Settings = DownlinkController.Settings

    struct Holder: Sendable {
        /// The lowest one-way delay sample (our clock minus its, in microseconds, wrapping) in
        /// this period of the base history and in the one before.
        var base: UInt32?
        var previousBase: UInt32?
        var highestPacket: UInt64?
        /// This interval's datagrams with pieces, and those missing before them.
        var received = 0
        var lost = 0
    }

    let settings: Settings
    private(set) var rate: Double
    private(set) var slowStart = true
    private(set) var priority = Priority.background
    /// The lowest want-to-first-piece time seen lately; nil before the first.
    private(set) var roundTrip: Duration?
    private var roundTripAt = MeshInstant.zero
    private var holders: [NodeID: Holder] = [:]
    private var baseRolledAt: MeshInstant?
    /// No decrease before this: the last one has not shown yet.
    private var holdUntil = MeshInstant.zero
    private var lastClose: MeshInstant?
    /// Whether the last interval's queue was over a quarter of the target.
    private var wasOver = false
    /// When the queue was last seen near empty.
    private var drainedAt = MeshInstant.zero
    /// Competing with a flow that fills the queue (foreground only).
    private(set) var competing = false
    /// Competing just began: the rate grows by `competitiveStartGain` per interval until the first
    /// loss (or `competeAfter`), as a TCP that starts beside another does (slow start into the
    /// other flow's queue). Added a few datagrams per round trip from the delay-mode rate, a
    /// latecomer took seconds to reach its share.
    private(set) var competingSlowStart = false
    private var competingSlowStartEnds = MeshInstant.zero
    /// Since when the queue was at a quarter of the target or more (foreground).
    private var atTargetSince: MeshInstant?
    /// While competing, since when the queue was under a quarter of the target.
    private var drainedSince: MeshInstant?
    /// The slowdown under way: the rate to go back to, when to judge and when it ends, and the
    /// lowest queue a piece showed since `judgeFrom`.
    private struct Slowdown {
        var rate: Double
        /// What arrived before it, from all holders (the more of the last two intervals).
        var delivered: Double
        var judgeFrom: MeshInstant
        var until: MeshInstant
        var lowest: Duration?
    }
    private var slowdown: Slowdown?
    /// The probe under way after a test that found the queue our own: the rate to go back to,
    /// what arrived before the test, and the bytes that arrived since `judgeFrom`. Bytes from all
    /// holders, proven or not: they share one line, and a holder proven during the probe must not
    /// pass for a larger share of it.
    private struct Probe {
        var rate: Double
        var deliveredBefore: Double
        /// When deliveries were back (nil: not yet), and when it ends.
        var judgeFrom: MeshInstant?
        var until: MeshInstant
        var bytes = 0
    }
    private var probe: Probe?
    /// What the last probe delivered, as a share of what arrived before its test, for tracing.
    private(set) var lastProbeGain: Double?
    /// Slow start ended on a queue that was there before any holder proved itself, at the first
    /// rate: a queue that rate could hardly have built. Until this deadline the first test goes
    /// as soon as the queue reaches a quarter of the target, without waiting for it to last (a latecomer
    /// beside a TCP download spent its first seconds at a sixth of the line, waiting to test).
    /// So does the repeat after a first test found the queue its own while competing.
    private var testAtOnceUntil: MeshInstant?
    /// Slow start raised the rate (a queue seen after that may be our own).
    private var slowStartGrew = false
    private var nextSlowdownAt = MeshInstant.zero
    private var slowdownSpacing: Duration
    /// A test found the queue our own, and the next one (or the probe after it) confirmed it: one
    /// such verdict alone may have met the other flow's trough (its queue drains for a moment
    /// after each of its losses), so the first is tested again as soon as the queue is back,
    /// before the tests space out.
    private var ownQueueConfirmed = false
    /// Slowdowns, and those that found another flow's queue (for tests and tracing).
    private(set) var slowdowns: UInt64 = 0
    private(set) var slowdownsFoundAnotherFlow: UInt64 = 0
    /// The lowest queue the last test judged (nil: none yet, or no piece came), for tracing.
    private(set) var lastSlowdownLowest: Duration?

    // The interval being measured.
    private var intervalStart: MeshInstant?
    private var intervalBytes = 0
    /// Bytes from holders not proven yet: counted only in an interval no proven holder fed.
    private var intervalUntrustedBytes = 0
    private var intervalQueue: Duration?
    /// The highest queue an untrusted holder's pieces showed this interval.
    private var intervalUntrustedQueue: Duration?
    /// The same, of the last interval closed on their pieces alone (nil: a proven holder fed it),
    /// for tracing.
    private(set) var lastUnprovenQueue: Duration?
    /// Untrusted holders' queue brought the rate down once: no more growth or cuts on their
    /// word (a second cut, and a third, would spiral down: deliveries lag the rate), except the
    /// one drain below.
    private var untrustedHeld = false
    /// Slow start had grown when that happened (the queue was likely its own overshoot), and when.
    private var untrustedHeldAfterGrowth = false
    private var untrustedHeldAt = MeshInstant.zero
    /// That queue stayed and was drained once (`closeInterval`); the rate to go back to at the
    /// next close, and the drained rate (a rate changed meanwhile by anything else stays).
    private var untrustedDrained = false
    /// After that drain: the rate the unproven queue's rise may cut to at the lowest, and the
    /// highest queues of the last two unproven intervals that show the rate it went back to.
    private var untrustedFloor = 0.0
    private var untrustedRise: (older: Duration?, newer: Duration?) = (nil, nil)
    /// Intervals that start from here show the rate the drain went back to (its own queue, still
    /// rising a round trip into it, is not a rise at that rate).
    private var untrustedRiseFrom = MeshInstant.zero
    private var drainReturn: (rate: Double, drained: Double, until: MeshInstant)?
    /// The rates set at the last two closes, older first. An interval's deliveries answer to the
    /// older one: a new rate reaches the holders half a round trip after a close, and their
    /// pieces reach us another half later, as the next interval ends.
    private var askedRates: (older: Double, newer: Double)
    /// In slow start, since when every proven piece showed a queue.
    private var queuedSince: MeshInstant?
    /// The same for pieces of holders not proven yet.
    private var untrustedQueuedSince: MeshInstant?
    /// What arrived in the last interval from all holders asked, proven or not. Slow start ends
    /// at it: as the first holders prove themselves, the proven alone bring a fraction of it,
    /// and ending there once left a fetch at a twentieth of its line for seconds.
    private var lastArrived = 0.0
    /// What arrived in the interval before that.
    private var previousArrived = 0.0
    /// Datagrams received and lost in the intervals with no queue lately, decaying by an eighth
    /// per interval (see `quietLossThreshold`).
    private var quietLoss = (received: 0.0, lost: 0.0)
    /// Datagrams received and lost in the intervals under the target, decaying by a 64th per such
    /// interval (see `lossyLine`). Kept through cuts and pauses: it describes the line.
    private var lineLoss = (received: 0.0, lost: 0.0)
    /// Where slow start's overshoot stands for a lossy line's target, which applies only once the
    /// overshoot drained under it. Slow start ends past the line with a queue of its own; cut at
    /// the lower target, that queue halved the rate where the usual one takes three tenths off,
    /// and a fetch on a lossy 50 ms path, bound by its window (repairs hold chunks), grew back too
    /// slowly: it fell from 0.87× to 0.81× of its loss-free twin (simulation, 4 seeds).
    private enum LossyTargetPhase {
        /// In slow start, or no interval's queue has reached the lower target since.
        case waiting
        /// An interval's queue reached it (the overshoot showed).
        case overshot
        /// A later one fell under it: the lower target applies.
        case armed
    }
    private var lossyTargetPhase = LossyTargetPhase.waiting
    /// The line's rate as the last measurement found it (see `lossyLineBackgroundShare`): the most
    /// that arrived in an interval with a queue of a quarter of the target, over the first two
    /// such intervals after the cap was lifted (slow start's end, or a refresh). Measured only
    /// while no cap holds the rate down: under the cap, beside another flow, what arrives is our
    /// share, and taken as the line it would shrink the cap at every refresh.
    private struct LineRate {
        var rate: Double
        var measuredAt: MeshInstant
        /// Intervals with a queue that the measurement has seen (it ends at two).
        var samples: Int
    }
    private var lineRate: LineRate?

    /// The latest queueing delay measured (the interval's lowest), for status and tests.
    private(set) var queueingDelay: Duration = .zero
    /// The last interval closed: what came, and what was lost (for tests and tracing).
    private(set) var lastInterval = (delivered: 0.0, received: 0, lost: 0, closedAt: MeshInstant.zero)
    /// Intervals that cut the rate for loss, for tests and counters.
    private(set) var lossBackoffs: UInt64 = 0

    init(settings: Settings = .init()) {
        self.settings = settings
        rate = Double(settings.initialRate)
        askedRates = (rate, rate)
        slowdownSpacing = settings.slowdownSpacing
    }

    /// Whether a slowdown is under way (its rate is the one asked).
    var isSlowingDown: Bool { slowdown != nil }

    /// Whether a probe is under way (after a test that found the queue our own).
    var isProbing: Bool { probe != nil }

    var target: Duration {
        let target = priority == .foreground ? settings.foregroundTarget : settings.backgroundTarget
        guard lossyTargetPhase == .armed, let lossy = lossyLineTarget else { return target }
        return min(target, lossy)
    }

    /// The target of a line that loses at random (nil: not such a line, or no round trip yet).
    private var lossyLineTarget: Duration? {
        guard isLossyLine, let roundTrip else { return nil }
        return max(settings.lossyLineTargetFloor, roundTrip * settings.lossyLineTarget)
    }

    /// Whether the line loses datagrams at random (see `lossyLine`).
    var isLossyLine: Bool {
        lineLoss.lost >= Double(settings.lineLossMinimum)
            && lineLoss.lost / (lineLoss.lost + lineLoss.received) >= settings.lossyLine
    }

    /// The most background replication asks on a line that loses at random (nil: no cap).
    var backgroundCap: Double? { cap(now: nil) }

    private func cap(now: MeshInstant?) -> Double? {
        guard priority == .background, isLossyLine, let line = lineRate, line.samples >= 2 else { return nil }
        if let now, now >= line.measuredAt + settings.lineRateRefresh { return nil }
        return max(Double(settings.minimumRate), line.rate * settings.lossyLineBackgroundShare)
    }

    /// An interval closed with the line full (`over`): a sample of its rate while no cap holds.
    private mutating func measureLine(arrived: Double, now: MeshInstant) {
        if var line = lineRate, line.samples < 2 {
            line.rate = max(line.rate, arrived)
            line.samples += 1
            line.measuredAt = now
            lineRate = line
        } else if lineRate.map({ now >= $0.measuredAt + settings.lineRateRefresh }) ?? true {
            lineRate = LineRate(rate: arrived, measuredAt: now, samples: 1)
        }
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

    mutating func setPriority(_ priority: Priority) {
        if priority != self.priority { testAtOnceUntil = nil }
        self.priority = priority
    }

    private var competeAfter: Duration {
        max(settings.competeAfterAtLeast, interval * settings.competeAfterIntervals)
    }

    /// Any pairwise datagram from `holder`: its packet numbers show what was lost on the way.
    /// Only a gap before a datagram that carries a piece counts, and a holder is never believed to
    /// have lost more than it delivered in an interval: a member numbers its own datagrams, and
    /// one jumping ahead must not pass for congestion on our line.
    mutating func onDatagram(from holder: NodeID, packetNumber: UInt64, carriesPiece: Bool) {
        var state = holders[holder] ?? Holder()
        if let highest = state.highestPacket {
            if packetNumber > highest {
                // A jump of thousands is a restarted peer or a long pause, not loss to react to.
                let gap = packetNumber - highest - 1
                if carriesPiece, intervalStart != nil, gap < 1000 { state.lost += Int(gap) }
                state.highestPacket = packetNumber
            } else if state.lost > 0 {
                // A late one was counted as lost.
                state.lost -= 1
            }
        } else {
            state.highestPacket = packetNumber
        }
        if carriesPiece, intervalStart != nil { state.received += 1 }
        holders[holder] = state
    }

    /// A piece of `bytes` stamped `sentAt` by `holder`'s clock arrived. Returns whether it
    /// closed an interval (the rate may have changed). A piece that is not `trusted` (its holder
    /// has not proven itself yet) can only hold slow start (once, at what arrives; see
    /// `brakeSlowStart`), and after slow start grew drain it once for a round trip and cut it
    /// while its queue rises, never below half of what arrived at the drain (see
    /// `closeInterval`): its queue counts as the highest of the interval, never as the line's
    /// lowest.
    @discardableResult
    mutating func onPiece(bytes: Int, sentAt: UInt32, from holder: NodeID, now: MeshInstant,
                                 trusted: Bool = true) -> Bool {
        rollBaseIfDue(now: now)
        let sample = UInt32(truncatingIfNeeded: now.nanoseconds / 1000) &- sentAt
        var state = holders[holder] ?? Holder()
        let current = state.base.map { Int32(bitPattern: sample &- $0) < 0 ? sample : $0 } ?? sample
        state.base = current
        var base = current
        if let previous = state.previousBase, Int32(bitPattern: previous &- current) < 0 { base = previous }
        holders[holder] = state
        let queue = Duration.microseconds(max(0, Int32(bitPattern: sample &- base)))
        if trusted {
            intervalQueue = intervalQueue.map { min($0, queue) } ?? queue
        } else {
            intervalUntrustedQueue = intervalUntrustedQueue.map { max($0, queue) } ?? queue
        }
        if trusted, let test = slowdown, now >= test.judgeFrom {
            slowdown?.lowest = test.lowest.map { min($0, queue) } ?? queue
        }
        if let from = probe?.judgeFrom, now >= from { probe?.bytes += bytes }
        if trusted { intervalBytes += bytes } else { intervalUntrustedBytes += bytes }
        if intervalStart == nil {
            intervalStart = now
            queuedSince = nil
            untrustedQueuedSince = nil
            // After a pause, what was seen before says nothing about the line now: the next
            // fetch probes it again from the rate it had (a queue ends that within 10 ms).
            if let closed = lastClose, now >= closed + max(.seconds(1), interval * 10) {
                drainedAt = now
                wasOver = false
                untrustedHeld = false
                untrustedDrained = false
                untrustedRise = (nil, nil)
                endDrain(now: nil)
                untrustedHeldAfterGrowth = false
                testAtOnceUntil = nil
                slowStartGrew = false
                competingSlowStart = false
                quietLoss = (0, 0)
                slowStart = !competing
                lossyTargetPhase = .waiting
                lastArrived = 0
                previousArrived = 0
                atTargetSince = nil
            }
        }
        // Unproven holders' queue brakes only an interval no proven holder fed (as at its close).
        if slowStart, trusted || (!untrustedHeld && intervalQueue == nil),
           brakeSlowStart(queue: queue, trusted: trusted, now: now) { return true }
        guard let start = intervalStart, now >= start + interval else { return false }
        closeInterval(now: now)
        return true
    }

    /// A want's first piece came this long after it was sent. Returns whether the rate rose
    /// (the first round trip known, on a path short enough for the initial window to be more
    /// than the initial rate): the holders, paced at the initial rate, must hear it at once.
    @discardableResult
    mutating func onRoundTrip(_ sample: Duration, now: MeshInstant) -> Bool {
        guard sample > .zero else { return false }
        var rose = false
        if roundTrip.map({ sample <= $0 }) ?? true || now >= roundTripAt + settings.roundTripHistory {
            // The first round trip known: slow start begins from a window's worth per round trip
            // (as TCP's initial window), which on a LAN is far more than the initial rate.
            if roundTrip == nil, slowStart {
                let start = min(Double(settings.maximumRate),
                                max(rate, Double(settings.initialWindow) / max(1e-6, sample.milliseconds / 1000)))
                rose = start > rate
                rate = start
            }
            roundTrip = sample
            roundTripAt = now
        }
        return rose
    }

    /// A member is gone.
    mutating func removeHolder(_ holder: NodeID) {
        holders[holder] = nil
    }

    /// Closes an interval that is over (pieces stopped coming: nothing is learned from it).
    mutating func onTick(now: MeshInstant) {
        if let test = slowdown, now >= test.until, intervalStart == nil { endSlowdown(test, now: now) }
        // Pieces stopped: the silence says nothing about a share of the line.
        if let probe, now >= probe.until, intervalStart == nil { endProbe(probe, judged: false, now: now) }
        guard let start = intervalStart, now >= start + interval else { return }
        closeInterval(now: now)
    }

    var nextDeadline: MeshInstant? {
        let close = intervalStart.map { $0 + interval }
        guard intervalStart == nil else { return close }
        return slowdown?.until ?? probe?.until
    }

    /// A foreground fetch whose queue sat at a quarter of the target long enough, and whose last test is
    /// far enough behind, slows down to see whose queue it is: in delay mode, to compete if it is
    /// another flow's; while competing, to stop once that flow is gone (the queue is then ours,
    /// and TCP's rules alone would keep it full for as long as the fetch runs).
    private mutating func startSlowdownIfDue(queueSeconds: Double, target: Double, now: MeshInstant) -> Bool {
        guard priority == .foreground, !slowStart, queueSeconds >= target / 4 else {
            atTargetSince = nil
            return false
        }
        let since = atTargetSince ?? now
        atTargetSince = since
        let atOnce = testAtOnceUntil.map { now < $0 } ?? false
        guard now >= since + (atOnce ? .zero : settings.slowdownAfter), now >= nextSlowdownAt else { return false }
        atTargetSince = nil
        testAtOnceUntil = nil
        slowdowns += 1
        // The slower rate reaches the holders half a round trip on, and what the queue held before
        // takes its own time to drain: only the second half is judged.
        let length = max(settings.slowdownAtLeast, interval * settings.slowdownRoundTrips)
        slowdown = Slowdown(rate: rate, delivered: max(lastArrived, previousArrived),
                            judgeFrom: now + length / 2, until: now + length)
        rate = max(Double(settings.minimumRate), rate * settings.slowdownShare)
        return true
    }

    /// The test is over: back to the rate before it, competing if the queue stayed.
    private mutating func endSlowdown(_ test: Slowdown, now: MeshInstant) {
        slowdown = nil
        rate = test.rate
        holdUntil = now + interval * 2
        let target = self.target
        lastSlowdownLowest = test.lowest
        guard let lowest = test.lowest else {
            // No piece came in the judged half (a trickle at an eighth): no verdict either way.
            nextSlowdownAt = now + slowdownSpacing
            return
        }
        if lowest < target { drainedAt = now }
        if priority == .foreground, lowest >= target * settings.slowdownVerdict {
            slowdownsFoundAnotherFlow += 1
            ownQueueConfirmed = false
            if !competing { beginCompeting(now: now) }
            drainedSince = nil
            // While competing, a test every two spacings (about 4% of the fetch's time at an
            // eighth): the other flow may leave at any moment.
            slowdownSpacing = settings.slowdownSpacing
            nextSlowdownAt = now + settings.slowdownSpacing * 2
        } else if priority == .foreground, !competing, settings.probeGain > 1 {
            // Our own queue, or another flow's whose trough our base delay holds: ask for more
            // and see whether more comes.
            let limit = max(settings.probeAtLeast, interval * settings.probeLimit)
            probe = Probe(rate: test.rate, deliveredBefore: test.delivered, until: now + limit)
            rate = min(Double(settings.maximumRate), test.rate * settings.probeGain)
        } else {
            if competing { endCompeting(now: now) }
            foundOwnQueue(now: now)
        }
    }

    /// The probe is over: competing if asking more brought more; if not, drained to what arrived
    /// (`drainProbe`); without a verdict, back to the rate before the test.
    private mutating func endProbe(_ probe: Probe, judged: Bool = true, now: MeshInstant) {
        self.probe = nil
        let asked = rate
        rate = probe.rate
        holdUntil = now + interval * 2
        // The test and the probe both left the queue below the target (the test drained it; a
        // lone fetch's probe refills a part): competing's clock starts here, not before the test
        // (a lone fetch on a long path would otherwise compete at once).
        drainedAt = now
        let seconds = probe.judgeFrom.map { (now - $0).milliseconds / 1000 } ?? 0
        let gain = judged && seconds > 0 && probe.deliveredBefore > 0
            ? Double(probe.bytes) / seconds / probe.deliveredBefore : nil
        lastProbeGain = gain
        guard priority == .foreground else { return }
        guard let gain else {
            // No verdict: the test's own stands, unconfirmed (tested again once the queue is back).
            foundOwnQueue(now: now)
            return
        }
        if gain >= settings.probeVerdict {
            slowdownsFoundAnotherFlow += 1
            ownQueueConfirmed = false
            beginCompeting(now: now)
            drainedSince = nil
            slowdownSpacing = settings.slowdownSpacing
            nextSlowdownAt = now + settings.slowdownSpacing * 2
        } else {
            // Asking more confirmed what the test saw: no repeat (it would only cost a lone
            // fetch another eighth of a test).
            ownQueueConfirmed = true
            foundOwnQueue(now: now)
            drainProbe(asked: asked, arrived: gain * probe.deliveredBefore, now: now)
        }
    }

    /// A probe that found the line ours alone asked more than it carries, and that excess stands
    /// in the queue: the rate goes to what arrived during the probe (the line's rate; the rate
    /// before the test, which a lasting queue set off, is often past it), drained for two intervals
    /// by what the queue holds and what is still on its way at the probe's rate, as slow start's
    /// overshoot is.
    /// Back at the rate before the test, a lone get on a 10 Mbit/s, 80 ms line left the probe's
    /// queue (97 ms, overflowing) to delay mode's cuts: down to a third of the line, and 5 s to
    /// grow back (in simulation).
    private mutating func drainProbe(asked: Double, arrived: Double, now: MeshInstant) {
        guard arrived > Double(settings.minimumRate) else { return }
        let line = min(rate, arrived)
        let intervalSeconds = interval.milliseconds / 1000
        let excess = queueingDelay.milliseconds / 1000 + max(0, asked / arrived - 1) * intervalSeconds
        drain(from: line, excess: excess, overSeconds: 2 * intervalSeconds, until: now + interval * 2)
        holdUntil = now + interval * 3
    }

    /// Below `held` by enough to drain `excess` seconds of queue over `seconds` (at least half of
    /// it), back to `held` at the first close past `until` (`endDrain`).
    private mutating func drain(from held: Double, excess: Double, overSeconds seconds: Double, until: MeshInstant) {
        rate = max(Double(settings.minimumRate), held * max(0.5, 1 - excess / seconds))
        drainReturn = (held, rate, until)
    }

    /// A test found the queue our own: the next waits longer, except the first repeat.
    private mutating func foundOwnQueue(now: MeshInstant) {
        if ownQueueConfirmed {
            slowdownSpacing = min(settings.slowdownSpacingLimit, slowdownSpacing * 2)
            nextSlowdownAt = now + slowdownSpacing
        } else {
            // The repeat goes as soon as the queue is back at a quarter of the target (within two
            // seconds): waiting a second of queue for it cost the get beside TCP 7% in
            // simulation (2.11 → 1.96 MiB/s, mean of 9 seeds).
            ownQueueConfirmed = true
            nextSlowdownAt = now
            testAtOnceUntil = now + settings.slowdownAfter * 2
        }
    }

    /// Competing begins (a test found another flow's queue, or the queue never drained), with a
    /// slow start of its own.
    private mutating func beginCompeting(now: MeshInstant) {
        competing = true
        competingSlowStart = true
        competingSlowStartEnds = now + competeAfter
    }

    /// The other flow is gone (or this fetch became replication): back to delay mode.
    private mutating func endCompeting(now: MeshInstant) {
        competing = false
        competingSlowStart = false
        drainedSince = nil
        drainedAt = now
    }

    /// Slow start ends on a queue: one that held it at its first rate, before any holder proved
    /// itself, is tested at once (within two seconds).
    private mutating func endSlowStartOnAQueue(now: MeshInstant) {
        slowStart = false
        testAtOnceUntil = untrustedHeld && !slowStartGrew ? now + settings.slowdownAfter * 2 : nil
    }

    /// A queue that lasts `slowStartBrake` ends slow start at what arrives. Returns whether it did.
    /// Holders not proven yet only hold it there, once, as at an interval's close: on an 80 ms
    /// line whose first rate was its whole capacity, waiting for two closes let slow start run
    /// at 3× the line for two round trips, and its queue overflowed (3.5% of the get's packets).
    private mutating func brakeSlowStart(queue: Duration, trusted: Bool, now: MeshInstant) -> Bool {
        guard queue >= target / 4 else {
            if trusted { queuedSince = nil } else { untrustedQueuedSince = nil }
            return false
        }
        guard let since = trusted ? queuedSince : untrustedQueuedSince else {
            if trusted { queuedSince = now } else { untrustedQueuedSince = now }
            return false
        }
        guard now >= since + settings.slowStartBrake else { return false }
        // What arrives: the last interval if it was just now, and this one once long enough.
        var delivered = lastClose.map { now < $0 + interval * 2 } == true ? lastArrived : 0
        if let start = intervalStart, now >= start + settings.slowStartBrake {
            delivered = max(delivered, Double(intervalBytes + intervalUntrustedBytes) / ((now - start).milliseconds / 1000))
        }
        guard delivered > 0 else { return false }
        if trusted {
            endSlowStartOnAQueue(now: now)
            queuedSince = nil
        } else {
            untrustedHeld = true
            untrustedHeldAfterGrowth = slowStartGrew
            untrustedHeldAt = now
            untrustedQueuedSince = nil
        }
        rate = min(rate, max(delivered, Double(settings.minimumRate)))
        holdUntil = now + interval * 2
        return true
    }

    private mutating func closeInterval(now: MeshInstant) {
        endDrain(now: now)
        // What the deliveries of this interval answered to; the rate set below shows two closes on.
        let shownRate = askedRates.older
        defer { askedRates = (askedRates.newer, rate) }
        // Replication on a lossy line stays under its cap whichever way the interval went (run
        // before the line above: the rate recorded is the capped one).
        defer { if let cap = cap(now: now) { rate = min(rate, cap) } }
        defer {
            intervalStart = nil
            intervalBytes = 0
            intervalUntrustedBytes = 0
            intervalQueue = nil
            intervalUntrustedQueue = nil
            for id in holders.keys {
                holders[id]?.received = 0
                holders[id]?.lost = 0
            }
        }
        guard let start = intervalStart else { return }
        guard let queue = intervalQueue else {
            // Only holders not proven yet: their timestamps may be lies, so they can only hold
            // slow start back (drain once what it overshot, and cut while that queue goes on
            // rising), never below half of what arrived at that drain. It
            // doubles on what arrives while none of them sees a queue (a fetch would otherwise
            // sit at its first rate until a whole chunk verified: 1.5 s on a 50 ms path).
            let elapsed = max(1e-6, (now - start).milliseconds / 1000)
            let delivered = Double(intervalUntrustedBytes) / elapsed
            lastInterval = (delivered, 0, 0, now)
            previousArrived = lastArrived
            lastArrived = delivered
            lastClose = now
            lastUnprovenQueue = intervalUntrustedQueue ?? .zero
            let rise = untrustedRise
            untrustedRise = untrustedDrained && start >= untrustedRiseFrom ? (rise.newer, intervalUntrustedQueue ?? .zero) : (nil, nil)
            // A test or probe whose proven holders went quiet ends on time, without their word.
            if let test = slowdown, now >= test.until { return endSlowdown(test, now: now) }
            if let probe, now >= probe.until { return endProbe(probe, judged: false, now: now) }
            let highest = (intervalUntrustedQueue ?? .zero).milliseconds / 1000
            let targetSeconds = target.milliseconds / 1000
            let over = highest >= targetSeconds / 4
            defer { wasOver = over }
            guard !untrustedHeld else {
                // Held after slow start grew: the queue is most likely that growth's overshoot,
                // which went on arriving for a round trip after the hold, and at what arrives it
                // stands (on a 10 Mbit/s, 80 ms line: 92–98 ms for a second, until the first proof).
                // Drained once, for two round trips at what arrives less the queue over them (at
                // least half). Over one round trip, at most half of the rate takes only half a round
                // trip of queue.
                if slowStart, untrustedHeldAfterGrowth, !untrustedDrained, over, wasOver, now >= untrustedHeldAt + interval * 2 {
                    untrustedDrained = true
                    let held = max(Double(settings.minimumRate), min(rate, delivered))
                    untrustedFloor = held / 2
                    untrustedRiseFrom = now + interval * 3
                    drain(from: held, excess: highest, overSeconds: 2 * interval.milliseconds / 1000, until: now + interval * 2)
                } else if slowStart, drainReturn == nil, now >= holdUntil,
                          let older = rise.older, let newer = rise.newer, let current = untrustedRise.newer,
                          newer > older, current > newer, current - older >= target / 8 {
                    // Back at the rate held, the queue rises interval after interval: that rate is
                    // past what the line gives us (what arrived during the overshoot was more).
                    // Through the emulator a get beside CUBIC on a 10 Mbit/s, 80 ms line stood
                    // 15–74 ms of queue from the drain to its first proof. Cut by twice the rise's
                    // slope (that stops the rise, and the excess of our share of the line), at most
                    // every other interval, never below half the rate first held: a holder's lie
                    // can cost no more until one is proven.
                    let slope = (current - older).milliseconds / 1000 / (2 * interval.milliseconds / 1000)
                    let cut = min(rate, delivered) * max(0.5, 1 - 2 * slope)
                    rate = min(rate, max(untrustedFloor, Double(settings.minimumRate), cut))
                    holdUntil = now + interval * 2
                }
                return
            }
            if slowStart, !over, delivered >= shownRate * settings.caughtUp {
                // Nothing proven follows an overshoot down: near a queue, grow less far ahead.
                let gain = highest >= targetSeconds / 8 ? settings.unprovenSlowStartGain : settings.slowStartGain
                let grown = min(Double(settings.maximumRate), max(rate, min(rate * 2, delivered * gain)))
                slowStartGrew = slowStartGrew || grown > rate
                rate = grown
            } else if over, wasOver, now >= holdUntil {
                // A queue that lasts: ask no more than arrives, once (a lie can stop growth until
                // a holder proves itself, and buy the cuts above, down to half of this at most).
                rate = max(Double(settings.minimumRate), min(rate, delivered))
                untrustedHeld = true
                untrustedHeldAfterGrowth = slowStart && slowStartGrew
                untrustedHeldAt = now
            }
            return
        }
        lastUnprovenQueue = nil
        let intervalReceived = holders.values.reduce(0) { $0 + $1.received }
        let intervalLost = holders.values.reduce(0) { $0 + min($1.lost, $1.received) }
        let previousQueue = queueingDelay
        queueingDelay = queue
        let elapsed = max(1e-6, (now - start).milliseconds / 1000)
        let delivered = Double(intervalBytes) / elapsed
        lastInterval = (delivered, intervalReceived, intervalLost, now)
        previousArrived = lastArrived
        lastArrived = Double(intervalBytes + intervalUntrustedBytes) / elapsed
        lastClose = now
        // The rate asked for shows in what arrives a round trip or two later (the holders hear
        // it, then pieces cross the line). So it grows only once deliveries caught up with it,
        // and shrinks once per two intervals, from what arrived: reacting again before the last
        // change could show would overshoot both ways.
        let caughtUp = delivered >= rate * settings.caughtUp
        let target = target.milliseconds / 1000
        let queueSeconds = queue.milliseconds / 1000
        let mayShrink = now >= holdUntil
        // A queue seen in one interval only may be our own: a receiver that stalled (a disk
        // flush, a busy core) reads a backlog late. A bottleneck's queue lasts.
        let over = queueSeconds >= target / 4
        let lasting = over && wasOver
        defer { wasOver = over }
        if over { measureLine(arrived: lastArrived, now: now) }
        // Once per interval: the loss it judges is summed over the quiet ones.
        let overflow = overflowing(queueSeconds: queueSeconds, target: target, received: intervalReceived, lost: intervalLost)
        if !slowStart, lossyTargetPhase != .armed, let lossy = lossyLineTarget {
            if queue >= lossy { lossyTargetPhase = .overshot } else if lossyTargetPhase == .overshot { lossyTargetPhase = .armed }
        }
        if let test = slowdown {
            guard now >= test.until || priority == .background else { return }
            endSlowdown(test, now: now)
            return
        }
        if let probe {
            if priority == .background {
                endProbe(probe, judged: false, now: now)
                return
            }
            if overflow {
                // The probe overflowed the queue: that says the line was full, not whose it was.
                // Back to the rate before it, and the overflow's cut below.
                endProbe(probe, judged: false, now: now)
            } else {
                if probe.judgeFrom == nil, lastArrived >= probe.deliveredBefore * settings.probeReturned {
                    // Deliveries are back at the probe's rate: judged from here.
                    let from = now + interval, until = from + interval * settings.probeRoundTrips
                    self.probe?.judgeFrom = from
                    self.probe?.until = until
                    return
                }
                guard now >= probe.until else { return }
                endProbe(probe, now: now)
                return
            }
        }
        // A queue that never falls below our target while we keep to it is another flow's:
        // a fetch someone waits for then competes (Copa's mode switch); replication never does.
        if queueSeconds < target || drainedAt == .zero { drainedAt = now }
        if priority == .foreground, !competing, now >= drainedAt + competeAfter {
            beginCompeting(now: now)
            slowStart = false
        }
        if priority == .background, competing { endCompeting(now: now) }
        if competingSlowStart, now >= competingSlowStartEnds { competingSlowStart = false }
        if overflow {
            if mayShrink {
                rate = min(rate, delivered) * settings.lossBackoff
                holdUntil = now + interval * 2
                lossBackoffs += 1
                quietLoss = (0, 0)
            }
            slowStart = false
            competingSlowStart = false
            atTargetSince = nil
        } else if competing, startSlowdownIfDue(queueSeconds: queueSeconds, target: target, now: now) {
            return
        } else if competing {
            // Another flow keeps the queue full (a loss-based TCP): holding back would leave it
            // the whole line. Like TCP: a few datagrams more per round trip, and back off on any
            // loss, as that flow does (where random loss holds it down, so are we).
            // A drain must last to end it: the other flow's own cycle empties the queue for a
            // moment after each of its losses (below its floor, which our base delay may hold).
            let drained = queueSeconds < target / 4
            if drained, drainedSince == nil { drainedSince = now }
            if !drained { drainedSince = nil }
            if let since = drainedSince, now >= since + competeAfter {
                endCompeting(now: now)
            } else if drained, !competingSlowStart {
                // Room on the line, for now: grow as delay mode would.
                if caughtUp { rate *= 1 + settings.increaseGain }
            } else if intervalLost > 0 {
                // The first loss ends the start (a loss with the queue drained is random: no cut).
                competingSlowStart = false
                if mayShrink, !drained {
                    rate = min(rate, delivered) * settings.competitiveBackoff
                    holdUntil = now + interval * 2
                }
            } else if competingSlowStart {
                // Growing on what arrives, as TCP's window does on its acknowledgements: the
                // deliveries show the rate of two closes ago, and must have caught up with it.
                if delivered >= shownRate * settings.caughtUp {
                    let gain = settings.competitiveStartGain
                    rate = max(rate, min(rate * gain, delivered * gain))
                }
            } else {
                let roundTrip = max(0.001, assumedRoundTrip.milliseconds / 1000)
                let step = Double(settings.competitiveIncrease) / roundTrip * (interval.milliseconds / 1000) / roundTrip
                // Clocked by what arrives, as a window is: deliveries show the rate of two
                // intervals back, so the rate may run ahead of them by a few steps; beyond that
                // the excess only fills the queue and then overflows it (let run up to twice
                // what arrived, the line beside CUBIC dropped 0.9-2.1% of its packets in
                // simulation; at 4 steps 0.2-1.3%, the get's share unchanged; at 3 it lost 7%).
                // Never past twice what arrives either: on a short path a step is large.
                if rate + step <= min(2 * delivered, delivered + Double(settings.competitiveLead) * step) { rate += step }
            }
        } else if slowStart {
            atTargetSince = nil
            if untrustedHeldAfterGrowth {
                // Slow start grew, and then a queue held it before any holder was proven, at what
                // arrived then: a line that full gave no more. Doubled again from there once a
                // holder was proven (that queue had drained meanwhile), a lone get overflowed an
                // 80 ms line's queue and was cut to a third of it (in simulation). A queue that
                // held the first rate, before any growth, says less: it may be another flow's
                // trough, and growing on is how to learn more.
                endSlowStartOnAQueue(now: now)
                // Its overshoot showed (and drained) before the proof: a lossy line's target
                // applies from the first interval under it, not after a queue of ours at 25 ms.
                lossyTargetPhase = .overshot
            } else if queueSeconds < target / 4 {
                // The deliveries show the rate asked two closes ago: once they caught up with
                // it, the rate doubles, up to `slowStartGain` times them (the brake above stops
                // it within a few milliseconds of a queue that lasts).
                // After a queue held the first rate, each doubling waits until it has shown: that
                // line may be near full, and two doublings on the same deliveries ran at 3× it
                // for a round trip (a replication beside TCP overflowed an 80 ms line's queue).
                let shown = !untrustedHeld || shownRate >= rate
                if shown, delivered >= shownRate * settings.caughtUp {
                    let grown = max(rate, min(rate * 2, delivered * settings.slowStartGain))
                    slowStartGrew = slowStartGrew || grown > rate
                    rate = grown
                }
            } else if !lasting {
                // A first sign of a queue: stop growing, and see whether it lasts.
            } else {
                endSlowStartOnAQueue(now: now)
                rate = min(rate, max(lastArrived, Double(settings.minimumRate)))
                holdUntil = now + interval * 2
            }
        } else if startSlowdownIfDue(queueSeconds: queueSeconds, target: target, now: now) {
            return
        } else {
            let room = (target - queueSeconds) / target
            if room > 0 {
                if over, queue > previousQueue + .milliseconds(1) {
                    // A queue still rising (since the last interval proven holders fed) is a rate
                    // past the line's: no growth into the room left, and the rate comes to what
                    // arrives, the more of this interval and the last, as a cut does: only once
                    // the last change (or a test's) could show, and then held until this one
                    // can. (To one interval's arrivals, again each interval while another flow's
                    // queue climbs, it would spiral down as the bound below would.)
                    let arrived = max(lastArrived, previousArrived, Double(settings.minimumRate))
                    if mayShrink, arrived < rate {
                        rate = arrived
                        holdUntil = now + interval * 2
                    }
                } else if caughtUp {
                    // With a queue the line is full, and what arrives is all it gives (or our
                    // share): growing past that by more than the room left only fills the queue.
                    // Grown from the rate asked alone, a lone get ran a fifth past the line before
                    // its queue showed, built 40–60 ms, was cut by half, and left the line idle
                    // (67% of a 50 Mbit/s cap through the emulator). With no queue too: a rate
                    // past what arrives that shows no queue is one the holders could not send
                    // (their chunks ran out), and will at once when they can. Bounded only with a
                    // queue, a lone get on a 10 Mbit/s, 80 ms line asked 1.36 MiB/s of its 1.19
                    // (growing while 85% of it arrived), built 54 ms and was halved, again and
                    // again; a ping across it took 148 ms at the 90th percentile against 80 idle.
                    // Only growth is bounded: cut to it, replication beside TCP, whose share lags
                    // what it asks while that flow's queue grows, spiralled down to its floor.
                    let grown = rate * (1 + settings.increaseGain * room)
                    let bound = max(lastArrived, previousArrived) * (1 + settings.increaseGain * room)
                    rate = max(rate, min(grown, bound))
                }
            } else if mayShrink, lasting {
                let cut = max(0.5, 1 + settings.decreaseGain * room)
                rate = min(rate, delivered) * cut
                // The excess drains at the share cut, after the cut shows: judged sooner, the same
                // queue cut a lone get twice, to a sixth of its line (through the emulator). (At
                // the target exactly nothing is cut and nothing needs to drain.)
                let drain = min(1, max(0, queueSeconds - target) / max(1 - cut, 0.01))
                holdUntil = now + interval * 2 + .seconds(drain)
            }
        }
        rate = min(Double(settings.maximumRate), max(Double(settings.minimumRate), rate))
    }

    /// A drain lasts until the first close past its end (or a pause, `now` nil): back to the rate
    /// held, unless something else cut the rate meanwhile (a proven holder's brake, a test),
    /// whose word stands. Growth during the drain (a probe's queue under the target) does not
    /// keep the rate drained.
    private mutating func endDrain(now: MeshInstant?) {
        guard let back = drainReturn else { return }
        let drained = rate >= back.drained && slowdown == nil && probe == nil
        if let now, now < back.until, drained { return }
        if drained { rate = max(rate, back.rate) }
        drainReturn = nil
    }

    /// Whether this interval's losses are a queue overflowing (see `lossThreshold`, `quietQueue`).
    /// The quiet intervals' sum decays by an eighth per interval (about the last eight count);
    /// the cut it leads to empties it. Intervals under the target also count toward `lineLoss`.
    private mutating func overflowing(queueSeconds: Double, target: Double, received: Int, lost: Int) -> Bool {
        quietLoss = (quietLoss.received * 7 / 8, quietLoss.lost * 7 / 8)
        if queueSeconds < target {
            lineLoss = (lineLoss.received * 63 / 64 + Double(received), lineLoss.lost * 63 / 64 + Double(lost))
        }
        guard queueSeconds < target * settings.quietQueue else {
            return lost >= settings.lossMinimum
                && Double(lost) / Double(lost + received) > settings.lossThreshold
        }
        quietLoss = (quietLoss.received + Double(received), quietLoss.lost + Double(lost))
        return quietLoss.lost >= Double(settings.lossMinimum)
            && quietLoss.lost / (quietLoss.lost + quietLoss.received) > settings.quietLossThreshold
    }

    private mutating func rollBaseIfDue(now: MeshInstant) {
        guard let rolled = baseRolledAt else { baseRolledAt = now; return }
        guard now >= rolled + settings.baseHistory / 2 else { return }
        baseRolledAt = now
        for (id, state) in holders {
            holders[id]?.previousBase = state.base
            holders[id]?.base = nil
        }
    }
}
