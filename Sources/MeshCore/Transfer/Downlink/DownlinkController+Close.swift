extension DownlinkController {
    /// What an interval proven holders fed measured, as the phases judge it.
    struct ProvenClose {
        var queue: Duration
        /// The queue of the last interval proven holders fed.
        var previousQueue: Duration
        var queueSeconds: Double
        /// The target, in seconds, as it stood when the interval closed.
        var target: Double
        /// What proven holders delivered, bytes per second.
        var delivered: Double
        /// The rate asked two closes ago, which these deliveries answer to.
        var shownRate: Double
        /// Deliveries kept up with the rate asked now.
        var caughtUp: Bool
        /// The last decrease has shown.
        var mayShrink: Bool
        /// The queue is over a quarter of the target, and (`lasting`) was in the interval before.
        var over: Bool
        var lasting: Bool
        /// Its losses are a queue overflowing (`LossHistory`).
        var overflow: Bool
        var lost: Int
    }

    mutating func closeInterval(now: MeshInstant) {
        guard let open = measuring else { return }
        endDrain(now: now)
        // What the deliveries of this interval answered to; the rate set below shows two closes on.
        let shownRate = deliveries.asked.older
        measuring = nil
        let datagrams = losses.closeInterval()
        if let queue = open.queue {
            closeProvenInterval(open, queue: queue, datagrams: datagrams, shownRate: shownRate, now: now)
        } else {
            closeUnprovenInterval(open, shownRate: shownRate, now: now)
        }
        // Replication on a lossy line stays under its cap whichever way the interval went (the
        // rate recorded as asked is the capped one).
        if let cap = cap(now: now) { rate = min(rate, cap) }
        deliveries.asked(rate)
    }

    /// An interval proven holders fed: the phase under way judges it.
    private mutating func closeProvenInterval(
        _ open: OpenInterval, queue: Duration,
        datagrams: (received: Int, lost: Int),
        shownRate: Double, now: MeshInstant
    ) {
        lastUnprovenQueue = nil
        let previousQueue = queueingDelay
        queueingDelay = queue
        let elapsed = max(1e-6, (now - open.start).milliseconds / 1000)
        let delivered = Double(open.bytes) / elapsed
        lastInterval = (delivered, datagrams.received, datagrams.lost, now)
        deliveries.record(Double(open.bytes + open.unprovenBytes) / elapsed)
        reached = max(reached, deliveries.last)
        lastClose = now
        // The rate asked for shows in what arrives a round trip or two later (the holders hear
        // it, then pieces cross the line). So it grows only once deliveries caught up with it,
        // and shrinks once per two intervals, from what arrived: reacting again before the last
        // change could show would overshoot both ways.
        let target = target.milliseconds / 1000
        let queueSeconds = queue.milliseconds / 1000
        // A queue seen in one interval only may be our own: a receiver that stalled (a disk
        // flush, a busy core) reads a backlog late. A bottleneck's queue lasts.
        let over = queueSeconds >= target / 4
        let lasting = over && wasOver
        wasOver = over
        if over { lineRate.measure(arrived: deliveries.last, now: now) }
        // Once per interval: the loss it judges is summed over the quiet ones.
        let overflow = lossHistory.overflowing(
            queue: queueSeconds, target: target,
            received: datagrams.received, lost: datagrams.lost)
        if !slowStart, lossyTargetPhase != .armed, let lossy = lossyLineTarget {
            if queue >= lossy {
                lossyTargetPhase = .overshot
            } else if lossyTargetPhase == .overshot {
                lossyTargetPhase = .armed
            }
        }
        let close = ProvenClose(
            queue: queue, previousQueue: previousQueue, queueSeconds: queueSeconds, target: target,
            delivered: delivered, shownRate: shownRate,
            caughtUp: delivered >= rate * settings.caughtUp, mayShrink: now >= holdUntil,
            over: over, lasting: lasting, overflow: overflow, lost: datagrams.lost)
        switch mode {
        case .slowdown(let test):
            guard now >= test.until || priority == .background else { return }
            return endSlowdown(test, now: now)
        case .probe(let probe):
            guard judgeProbe(probe, overflow: overflow, now: now) else { return }
        case .resuming(let resume):
            if closeResumeInterval(resume, close, now: now) { return }
        case .slowStart, .congestionAvoidance, .competing:
            break
        }
        adjustRate(close, now: now)
    }

    /// A probe's interval: returns whether the close goes on to adjust the rate (the probe ended
    /// on an overflow, whose cut follows).
    private mutating func judgeProbe(_ probe: Probe, overflow: Bool, now: MeshInstant) -> Bool {
        if priority == .background {
            endProbe(probe, judged: false, now: now)
            return false
        }
        if overflow {
            // The probe overflowed the queue: that says the line was full, not whose it was.
            // Back to the rate before it, and the overflow's cut below.
            endProbe(probe, judged: false, now: now)
            return true
        }
        if probe.judgeFrom == nil, deliveries.last >= probe.deliveredBefore * settings.probeReturned {
            // Deliveries are back at the probe's rate: judged from here.
            var probe = probe
            let from = now + interval, until = from + interval * settings.probeRoundTrips
            probe.judgeFrom = from
            probe.until = until
            mode = .probe(probe)
            return false
        }
        if now >= probe.until { endProbe(probe, now: now) }
        return false
    }

    /// Slow start, delay mode or competing sets the rate for the next interval.
    private mutating func adjustRate(_ close: ProvenClose, now: MeshInstant) {
        // A queue that never falls below our target while we keep to it is another flow's:
        // a fetch someone waits for then competes (Copa's mode switch); replication never does.
        if close.queueSeconds < close.target || drainedAt == .zero { drainedAt = now }
        if priority == .foreground, !competing, now >= drainedAt + competeAfter { beginCompeting(now: now) }
        if priority == .background, competing { endCompeting(now: now) }
        if case .competing(var state) = mode, let ends = state.startEnds, now >= ends {
            state.startEnds = nil
            mode = .competing(state)
        }
        if close.overflow {
            if close.mayShrink {
                rate = min(rate, close.delivered) * settings.lossBackoff
                holdUntil = now + interval * 2
                lossBackoffs += 1
                lossHistory.forgetQuiet()
            }
            switch mode {
            case .slowStart: mode = .congestionAvoidance
            case .competing(var state):
                state.startEnds = nil
                mode = .competing(state)
            case .congestionAvoidance, .slowdown, .probe, .resuming: break
            }
            schedule.forgetQueue()
        } else {
            switch mode {
            case .competing(let state):
                if startSlowdownIfDue(close, interrupting: state, now: now) { return }
                compete(state, close, now: now)
            case .slowStart(let state):
                schedule.forgetQueue()
                growSlowStart(state, close, now: now)
            case .congestionAvoidance:
                if startSlowdownIfDue(close, interrupting: nil, now: now) { return }
                avoidCongestion(close, now: now)
            case .slowdown, .probe, .resuming:
                break
            }
        }
        rate = min(Double(settings.maximumRate), max(Double(settings.minimumRate), rate))
    }

    /// Another flow keeps the queue full (a loss-based TCP): holding back would leave it the whole
    /// line. Like TCP: a few datagrams more per round trip, and back off on any loss, as that flow
    /// does (where random loss holds it down, so are we).
    private mutating func compete(_ state: Competing, _ close: ProvenClose, now: MeshInstant) {
        var state = state
        // A drain must last to end it: the other flow's own cycle empties the queue for a
        // moment after each of its losses (below its floor, which our base delay may hold).
        let drained = close.queueSeconds < close.target / 4
        if drained, state.drainedSince == nil { state.drainedSince = now }
        if !drained { state.drainedSince = nil }
        mode = .competing(state)
        if let since = state.drainedSince, now >= since + competeAfter {
            endCompeting(now: now)
        } else if drained, state.startEnds == nil {
            // Room on the line, for now: grow as delay mode would.
            if close.caughtUp { rate *= 1 + settings.increaseGain }
        } else if close.lost > 0 {
            // The first loss ends the start (a loss with the queue drained is random: no cut).
            state.startEnds = nil
            mode = .competing(state)
            if close.mayShrink, !drained {
                rate = min(rate, close.delivered) * settings.competitiveBackoff
                holdUntil = now + interval * 2
            }
        } else if state.startEnds != nil {
            // Growing on what arrives, as TCP's window does on its acknowledgements: the
            // deliveries show the rate of two closes ago, and must have caught up with it.
            if close.delivered >= close.shownRate * settings.caughtUp {
                let gain = settings.competitiveStartGain
                rate = max(rate, min(rate * gain, close.delivered * gain))
            }
        } else {
            let roundTrip = max(0.001, assumedRoundTrip.milliseconds / 1000)
            let step = Double(settings.competitiveIncrease) / roundTrip * (interval.milliseconds / 1000) / roundTrip
            // Clocked by what arrives, as a window is: deliveries show the rate of two
            // intervals back, so the rate may run ahead of them by a few steps; beyond that
            // the excess only fills the queue and then overflows it. Four steps keep the
            // share of a rate let run further, without its drops (Docs/DESIGN-NOTES.md).
            // Never past twice what arrives either: on a short path a step is large.
            let delivered = close.delivered
            if rate + step <= min(2 * delivered, delivered + Double(settings.competitiveLead) * step) { rate += step }
        }
    }

    private mutating func growSlowStart(_ state: SlowStart, _ close: ProvenClose, now: MeshInstant) {
        if unproven.afterGrowth {
            // Slow start grew, and then a queue held it before any holder was proven, at what
            // arrived then: a line that full gave no more. Doubled again from there once a
            // holder was proven (that queue had drained meanwhile), slow start would overflow
            // the line's queue once more, and be cut far below it. A queue that
            // held the first rate, before any growth, says less: it may be another flow's
            // trough, and growing on is how to learn more.
            endSlowStartOnAQueue(grew: state.grew, now: now)
            // Its overshoot showed (and drained) before the proof: a lossy line's target
            // applies from the first interval under it, not after a queue of ours at 25 ms.
            lossyTargetPhase = .overshot
        } else if close.queueSeconds < close.target / 4 {
            // The deliveries show the rate asked two closes ago: once they caught up with
            // it, the rate doubles, up to `slowStartGain` times them (the brake stops it within
            // a few milliseconds of a queue that lasts).
            // After a queue held the first rate, each doubling waits until it has shown: that
            // line may be near full, and two doublings on the same deliveries would run at 3×
            // it for a round trip and overflow its queue.
            let shown = !unproven.isHeld || close.shownRate >= rate
            if shown, close.delivered >= close.shownRate * settings.caughtUp {
                let grown = max(rate, min(rate * 2, close.delivered * settings.slowStartGain))
                var state = state
                state.grew = state.grew || grown > rate
                mode = .slowStart(state)
                rate = grown
            }
        } else if close.lasting {
            // (A first sign of a queue only stops growing, to see whether it lasts.)
            endSlowStartOnAQueue(grew: state.grew, now: now)
            rate = min(rate, max(deliveries.last, Double(settings.minimumRate)))
            holdUntil = now + interval * 2
        }
    }

    /// Delay mode: growth into the room left under the target, bounded by what arrives; a cut in
    /// proportion to the excess over it.
    private mutating func avoidCongestion(_ close: ProvenClose, now: MeshInstant) {
        let room = (close.target - close.queueSeconds) / close.target
        if room > 0 {
            if close.over, close.queue > close.previousQueue + .milliseconds(1) {
                // A queue still rising (since the last interval proven holders fed) is a rate
                // past the line's: no growth into the room left, and the rate comes to what
                // arrives, the more of this interval and the last, as a cut does: only once
                // the last change (or a test's) could show, and then held until this one
                // can. (To one interval's arrivals, again each interval while another flow's
                // queue climbs, it would spiral down as the bound below would.)
                let arrived = max(deliveries.last, deliveries.previous, Double(settings.minimumRate))
                if close.mayShrink, arrived < rate {
                    rate = arrived
                    holdUntil = now + interval * 2
                }
            } else if close.caughtUp {
                // With a queue the line is full, and what arrives is all it gives (or our
                // share): growing past that by more than the room left only fills the queue.
                // Grown from the rate asked alone, a lone get runs past the line before its
                // queue shows, builds one, is cut by half, and leaves the line idle. With no
                // queue too: a rate past what arrives that shows no queue is one the holders
                // could not send (their chunks ran out), and will at once when they can; bounded
                // only with a queue, a lone get asks more than its line (growing while 85% of it
                // arrives) and is halved again and again (Docs/DESIGN-NOTES.md). Only growth is
                // bounded: cut to it, replication beside TCP, whose share lags what it asks while
                // that flow's queue grows, would spiral down to its floor.
                let grown = rate * (1 + settings.increaseGain * room)
                let bound = max(deliveries.last, deliveries.previous) * (1 + settings.increaseGain * room)
                rate = max(rate, min(grown, bound))
            }
        } else if close.mayShrink, close.lasting {
            let cut = max(0.5, 1 + settings.decreaseGain * room)
            rate = min(rate, close.delivered) * cut
            // The excess drains at the share cut, after the cut shows: judged sooner, the same
            // queue would be cut twice, far below the line (Docs/DESIGN-NOTES.md). (At the
            // target exactly nothing is cut and nothing needs to drain.)
            let drain = min(1, max(0, close.queueSeconds - close.target) / max(1 - cut, 0.01))
            holdUntil = now + interval * 2 + .seconds(drain)
        }
    }
}
