extension DownlinkController {
    /// A foreground fetch whose queue sat at a quarter of the target long enough, and whose last
    /// test is far enough behind (`SlowdownSchedule`), slows down to see whose queue it is: in
    /// delay mode, to compete if it is another flow's; while competing (`interrupting`), to stop
    /// once that flow is gone (the queue is then ours, and TCP's rules alone would keep it full
    /// for as long as the fetch runs).
    mutating func startSlowdownIfDue(_ close: ProvenClose, interrupting: Competing?, now: MeshInstant) -> Bool {
        let queued = priority == .foreground && close.queueSeconds >= close.target / 4
        guard schedule.due(queued: queued, now: now) else { return false }
        slowdowns += 1
        // The slower rate reaches the holders half a round trip on, and what the queue held before
        // takes its own time to drain: only the second half is judged.
        let length = max(settings.slowdownAtLeast, interval * settings.slowdownRoundTrips)
        mode = .slowdown(
            Slowdown(
                rate: rate, delivered: deliveries.recent, judgeFrom: now + length / 2,
                until: now + length, interrupted: interrupting))
        rate = max(Double(settings.minimumRate), rate * settings.slowdownShare)
        return true
    }

    /// The test is over: back to the rate before it, competing if the queue stayed; if it
    /// drained, a probe checks from the other side (in delay mode), or competing ends.
    mutating func endSlowdown(_ test: Slowdown, now: MeshInstant) {
        mode = test.interrupted.map(Mode.competing) ?? .congestionAvoidance
        rate = test.rate
        holdUntil = now + interval * 2
        let target = self.target
        lastSlowdownLowest = test.lowest
        guard let lowest = test.lowest else {
            // No piece came in the judged half (a trickle at an eighth): no verdict either way.
            schedule.noVerdict(now: now)
            return
        }
        if lowest < target { drainedAt = now }
        if priority == .foreground, lowest >= target * settings.slowdownVerdict {
            slowdownsFoundAnotherFlow += 1
            // While competing, a test every two spacings (about 4% of the fetch's time at an
            // eighth): the other flow may leave at any moment.
            var competing = test.interrupted ?? Competing(startEnds: now + competeAfter)
            competing.drainedSince = nil
            mode = .competing(competing)
            schedule.foundAnotherFlow(now: now)
        } else if priority == .foreground, test.interrupted == nil, settings.probeGain > 1 {
            // Our own queue, or another flow's whose trough our base delay holds: ask for more
            // and see whether more comes.
            let limit = max(settings.probeAtLeast, interval * settings.probeLimit)
            mode = .probe(Probe(rate: test.rate, deliveredBefore: test.delivered, until: now + limit))
            rate = min(Double(settings.maximumRate), test.rate * settings.probeGain)
        } else {
            if test.interrupted != nil { endCompeting(now: now) }
            schedule.foundOwnQueue(now: now)
        }
    }

    /// The probe is over: competing if asking more brought more; if not, drained to what arrived
    /// (`drainProbe`); without a verdict, back to the rate before the test.
    mutating func endProbe(_ probe: Probe, judged: Bool = true, now: MeshInstant) {
        mode = .congestionAvoidance
        let asked = rate
        rate = probe.rate
        holdUntil = now + interval * 2
        // The test and the probe both left the queue below the target (the test drained it; a
        // lone fetch's probe refills a part): competing's clock starts here, not before the test
        // (a lone fetch on a long path would otherwise compete at once).
        drainedAt = now
        let seconds = probe.judgeFrom.map { (now - $0).milliseconds / 1000 } ?? 0
        let gain =
            judged && seconds > 0 && probe.deliveredBefore > 0
            ? Double(probe.bytes) / seconds / probe.deliveredBefore : nil
        lastProbeGain = gain
        guard priority == .foreground else { return }
        guard let gain else {
            // No verdict: the test's own stands, unconfirmed (tested again once the queue is back).
            schedule.foundOwnQueue(now: now)
            return
        }
        if gain >= settings.probeVerdict {
            slowdownsFoundAnotherFlow += 1
            beginCompeting(now: now)
            schedule.foundAnotherFlow(now: now)
        } else {
            // Asking more confirmed what the test saw: no repeat (it would only cost a lone
            // fetch another eighth of a test).
            schedule.foundOwnQueue(now: now, confirmed: true)
            drainProbe(asked: asked, arrived: gain * probe.deliveredBefore, now: now)
        }
    }

    /// A probe that found the line ours alone asked more than it carries, and that excess stands
    /// in the queue: the rate goes to what arrived during the probe (the line's rate; the rate
    /// before the test, which a lasting queue set off, is often past it), drained for two intervals
    /// by what the queue holds and what is still on its way at the probe's rate, as slow start's
    /// overshoot is.
    /// Back at the rate before the test, a lone get would leave the probe's queue (overflowing)
    /// to delay mode's cuts, far below its line and seconds to grow back (Docs/DESIGN-NOTES.md).
    private mutating func drainProbe(asked: Double, arrived: Double, now: MeshInstant) {
        guard arrived > Double(settings.minimumRate) else { return }
        let line = min(rate, arrived)
        let intervalSeconds = interval.milliseconds / 1000
        let excess = queueingDelay.milliseconds / 1000 + max(0, asked / arrived - 1) * intervalSeconds
        drain(from: line, excess: excess, overSeconds: 2 * intervalSeconds, until: now + interval * 2)
        holdUntil = now + interval * 3
    }

    /// Competing begins (a test found another flow's queue, or the queue never drained), with a
    /// slow start of its own.
    mutating func beginCompeting(now: MeshInstant) {
        mode = .competing(Competing(startEnds: now + competeAfter))
    }

    /// The other flow is gone (or this fetch became replication): back to delay mode.
    mutating func endCompeting(now: MeshInstant) {
        mode = .congestionAvoidance
        drainedAt = now
    }
}
