extension DownlinkController {
    /// An interval only holders not proven yet fed: their timestamps may be lies, so they can only
    /// hold slow start back (drain once what it overshot, and cut while that queue goes on
    /// rising), never below half of what arrived at that drain. It doubles on what arrives while
    /// none of them sees a queue (a fetch would otherwise sit at its first rate until a whole
    /// chunk verified: 1.5 s on a 50 ms path).
    mutating func closeUnprovenInterval(_ open: OpenInterval, shownRate: Double, now: MeshInstant) {
        let elapsed = max(1e-6, (now - open.start).milliseconds / 1000)
        let delivered = Double(open.unprovenBytes) / elapsed
        lastInterval = (delivered, 0, 0, now)
        deliveries.record(delivered)
        lastClose = now
        // No jump on holders not proven yet, and none kept: their word cannot validate it.
        if case .resuming(let resume) = mode {
            if case .reconnaissance = resume.phase {
                mode = .slowStart(SlowStart())
            } else {
                retreat(delivered: delivered, now: now)
                return
            }
        }
        let highestQueue = open.unprovenQueue ?? .zero
        lastUnprovenQueue = highestQueue
        var previousRise: (older: Duration?, newer: Duration?) = (nil, nil)
        if case .drained(var drain) = unproven {
            previousRise = drain.rise
            drain.rise = open.start >= drain.riseFrom ? (drain.rise.newer, highestQueue) : (nil, nil)
            unproven = .drained(drain)
        }
        // A test or probe whose proven holders went quiet ends on time, without their word.
        if case .slowdown(let test) = mode, now >= test.until { return endSlowdown(test, now: now) }
        if case .probe(let probe) = mode, now >= probe.until { return endProbe(probe, judged: false, now: now) }
        let highest = highestQueue.milliseconds / 1000
        let targetSeconds = target.milliseconds / 1000
        let over = highest >= targetSeconds / 4
        let lasting = over && wasOver
        wasOver = over
        if unproven.isHeld {
            answerUnprovenQueue(
                highest: highest, lasting: lasting, delivered: delivered, previousRise: previousRise,
                now: now)
        } else if case .slowStart(var state) = mode, !over, delivered >= shownRate * settings.caughtUp {
            // Nothing proven follows an overshoot down: near a queue, grow less far ahead.
            let gain = highest >= targetSeconds / 8 ? settings.unprovenSlowStartGain : settings.slowStartGain
            let grown = min(Double(settings.maximumRate), max(rate, min(rate * 2, delivered * gain)))
            state.grew = state.grew || grown > rate
            mode = .slowStart(state)
            rate = grown
        } else if lasting, now >= holdUntil {
            // A queue that lasts: ask no more than arrives, once (a lie can stop growth until
            // a holder proves itself, and buy the cuts below, down to half of this at most).
            rate = max(Double(settings.minimumRate), min(rate, delivered))
            let grew = if case .slowStart(let state) = mode { state.grew } else { false }
            unproven = .held(afterGrowth: grew, at: now)
        }
    }

    /// Unproven holders' queue held the rate already: after slow start grew, a queue that stays
    /// is drained once, and one that keeps rising after that drain is cut.
    private mutating func answerUnprovenQueue(
        highest: Double, lasting: Bool, delivered: Double,
        previousRise: (older: Duration?, newer: Duration?), now: MeshInstant
    ) {
        guard slowStart else { return }
        if case .held(afterGrowth: true, let heldAt) = unproven, lasting, now >= heldAt + interval * 2 {
            // Held after slow start grew: the queue is most likely that growth's overshoot,
            // which went on arriving for a round trip after the hold, and at what arrives it
            // stands (on a 10 Mbit/s, 80 ms line: 92–98 ms for a second, until the first proof).
            // Drained once, for two round trips at what arrives less the queue over them (at
            // least half). Over one round trip, at most half of the rate takes only half a round
            // trip of queue.
            let held = max(Double(settings.minimumRate), min(rate, delivered))
            unproven = .drained(UnprovenDrain(floor: held / 2, riseFrom: now + interval * 3))
            drain(from: held, excess: highest, overSeconds: 2 * interval.milliseconds / 1000, until: now + interval * 2)
        } else if drainReturn == nil, now >= holdUntil, case .drained(let drained) = unproven,
            let older = previousRise.older, let newer = previousRise.newer, let current = drained.rise.newer,
            newer > older, current > newer, current - older >= target / 8
        {
            // Back at the rate held, the queue rises interval after interval: that rate is
            // past what the line gives us (what arrived during the overshoot was more), and
            // the queue would stand until the first proof. Cut by twice the rise's
            // slope (that stops the rise, and the excess of our share of the line), at most
            // every other interval, never below half the rate first held: a holder's lie
            // can cost no more until one is proven.
            let slope = (current - older).milliseconds / 1000 / (2 * interval.milliseconds / 1000)
            let cut = min(rate, delivered) * max(0.5, 1 - 2 * slope)
            rate = min(rate, max(drained.floor, Double(settings.minimumRate), cut))
            holdUntil = now + interval * 2
        }
    }
}
