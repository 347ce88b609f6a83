import MeshCrypto

/// What a fetch learned of a set of paths: the most its holders delivered in one interval, the
/// round trip it measured, and when (draft-ietf-tsvwg-careful-resume's saved parameters).
package struct SavedPathCapacity: Sendable, Equatable {
    /// Bytes per second.
    package var rate: Double
    package var roundTrip: Duration
    package var savedAt: MeshInstant

    package init(rate: Double, roundTrip: Duration, savedAt: MeshInstant) {
        self.rate = rate
        self.roundTrip = roundTrip
        self.savedAt = savedAt
    }
}

extension DownlinkController {
    /// Careful resume's phases (draft-ietf-tsvwg-careful-resume), for a start from idle over paths
    /// a fetch measured before.
    package enum ResumePhase: Sendable, Equatable {
        /// A round trip as slow start would send it: the round trip must match the saved one, and
        /// show no loss and no queue, before anything jumps.
        case reconnaissance
        /// Paced at `jump` (at most half the saved rate) for a round trip, not yet known to be
        /// carried.
        case unvalidated(jump: Double)
        /// Waiting for the deliveries that answer the jump (`closes` so far): carried without loss
        /// or queue, slow start goes on from it.
        case validating(jump: Double, closes: Int)
    }

    struct Resume: Sendable {
        var saved: SavedPathCapacity
        var phase: ResumePhase
        /// Since when every proven piece showed a queue, after the jump.
        var queuedSince: MeshInstant?
    }

    /// What the node offered for the next start from idle (`offerResume`).
    struct ResumeOffer: Sendable {
        var saved: SavedPathCapacity?
        var probedRoundTrip: Duration?
        var at: MeshInstant
    }

    /// The phase of a careful resume under way (nil: none).
    package var resumePhase: ResumePhase? {
        if case .resuming(let resume) = mode { return resume.phase }
        return nil
    }

    /// What the node knows of the paths of a fetch about to start: the capacity a fetch over them
    /// reached (nil: nothing, or forgotten) and the round trip membership probes measured to them
    /// (the longest). Applied at the next start from idle (the first interval, or the first after a
    /// pause); an offer made before the last interval closed is stale by then.
    package mutating func offerResume(_ saved: SavedPathCapacity?, probedRoundTrip: Duration?, now: MeshInstant) {
        offer = ResumeOffer(saved: saved, probedRoundTrip: probedRoundTrip, at: now)
        // Idle: the holders are told the initial window's rate with the first wants, not a round
        // trip later (the probes measured the round trip already).
        guard measuring == nil else { return }
        switch mode {
        case .slowStart, .congestionAvoidance, .resuming: break
        case .competing, .slowdown, .probe: return
        }
        if let closed = lastClose {
            guard now >= closed + max(.seconds(1), interval * 10) else { return }
            rate = startRate(probedRoundTrip: probedRoundTrip)
        } else {
            rate = max(rate, startRate(probedRoundTrip: probedRoundTrip))
        }
    }

    /// What to save when a fetch ends: the most delivered in an interval since the start from
    /// idle, with the round trip (nil: nothing measured).
    package func capacityToSave(now: MeshInstant) -> SavedPathCapacity? {
        guard reached > 0, let roundTrip else { return nil }
        return SavedPathCapacity(rate: reached, roundTrip: roundTrip, savedAt: now)
    }

    /// The rate slow start begins from: the initial window over the round trip (the measured one,
    /// or what membership probes measured, whichever is longer), or the initial rate if neither.
    func startRate(probedRoundTrip: Duration?) -> Double {
        let known = [roundTrip, probedRoundTrip].compactMap { $0 }.max()
        guard let known else { return Double(settings.initialRate) }
        let seconds = max(1e-6, known.milliseconds / 1000)
        return min(
            Double(settings.maximumRate),
            max(Double(settings.initialRate), Double(settings.initialWindow) / seconds))
    }

    /// A start from idle: slow start from the initial window, or a careful resume from what the
    /// node offered while idle.
    mutating func startFromIdle(firstEver: Bool, now: MeshInstant) {
        reached = 0
        let offer = offer.flatMap { offer in now >= offer.at && offer.at >= (lastClose ?? .zero) ? offer : nil }
        self.offer = nil
        let start = startRate(probedRoundTrip: offer?.probedRoundTrip)
        // The node's very first interval keeps a rate the first round trip already raised.
        rate = firstEver ? max(rate, start) : start
        // As at the node's first fetch: the first interval's deliveries answer to the initial rate.
        if !firstEver { deliveries = DeliveryRates(rate: min(rate, Double(settings.initialRate))) }
        if let saved = offer?.saved, now < saved.savedAt + settings.resumeLifetime,
            saved.rate * settings.resumeJumpShare > rate
        {
            mode = .resuming(Resume(saved: saved, phase: .reconnaissance))
        }
    }

    /// A proven interval closed during a resume. Returns whether the resume settled the rate (false:
    /// the close goes on to the usual phases, which the resume may have handed it to).
    mutating func closeResumeInterval(_ resume: Resume, _ close: ProvenClose, now: MeshInstant) -> Bool {
        let congested = close.over || close.lost > 0 || close.overflow
        switch resume.phase {
        case .reconnaissance:
            mode = .slowStart(SlowStart())
            guard !congested, let jump = resumeJump(resume.saved), jump > rate else { return false }
            rate = jump
            mode = .resuming(Resume(saved: resume.saved, phase: .unvalidated(jump: jump)))
            resumeJumps += 1
            return true
        case .unvalidated(let jump):
            if congested { return retreat(delivered: close.delivered, now: now) }
            mode = .resuming(Resume(saved: resume.saved, phase: .validating(jump: jump, closes: 1)))
            return true
        case .validating(let jump, let closes):
            if congested { return retreat(delivered: close.delivered, now: now) }
            // The deliveries show the rate asked two closes ago: once that was the jump, it was carried.
            guard close.shownRate < jump * 0.99, closes < settings.resumeValidatingLimit else {
                mode = .slowStart(SlowStart(grew: true))
                return false
            }
            mode = .resuming(
                Resume(
                    saved: resume.saved, phase: .validating(jump: jump, closes: closes + 1),
                    queuedSince: resume.queuedSince))
            return true
        }
    }

    /// The jump: half the saved rate, less where the round trip is longer than the saved one (the
    /// draft halves the saved window, not the rate); nil when the round trip is not similar.
    func resumeJump(_ saved: SavedPathCapacity) -> Double? {
        guard let roundTrip, roundTrip >= saved.roundTrip * settings.resumeRoundTripRange.lowerBound,
            roundTrip <= saved.roundTrip * settings.resumeRoundTripRange.upperBound
        else { return nil }
        let longer = max(1, roundTrip.milliseconds / max(1e-6, saved.roundTrip.milliseconds))
        return min(Double(settings.maximumRate), saved.rate * settings.resumeJumpShare / longer)
    }

    /// The jump met loss or a queue: the draft's safe retreat, to half of what arrived, and delay
    /// mode from there once its queue drained.
    @discardableResult
    mutating func retreat(delivered: Double, now: MeshInstant) -> Bool {
        rate = max(Double(settings.minimumRate), min(rate, delivered) * settings.resumeRetreat)
        mode = .congestionAvoidance
        holdUntil = now + interval * 3
        resumeRetreats += 1
        return true
    }

    /// A proven piece during a resume: a queue in the reconnaissance hands it to slow start (whose
    /// brake follows); one that lasts `slowStartBrake` after the jump retreats at once. Returns
    /// whether it retreated.
    mutating func brakeResume(_ resume: Resume, queue: Duration, now: MeshInstant) -> Bool {
        var resume = resume
        guard queue >= target / 4 else {
            resume.queuedSince = nil
            mode = .resuming(resume)
            return false
        }
        if case .reconnaissance = resume.phase {
            mode = .slowStart(SlowStart())
            return false
        }
        guard let since = resume.queuedSince else {
            resume.queuedSince = now
            mode = .resuming(resume)
            return false
        }
        guard now >= since + settings.slowStartBrake else { return false }
        var delivered = deliveries.last
        if let open = measuring, now >= open.start + settings.slowStartBrake {
            let seconds = (now - open.start).milliseconds / 1000
            delivered = max(delivered, Double(open.bytes + open.unprovenBytes) / seconds)
        }
        return retreat(delivered: max(delivered, Double(settings.minimumRate)), now: now)
    }
}
