import MeshCore

/// Why a bounded run stopped.
package enum SimRunOutcome: Sendable, Equatable, CustomStringConvertible {
    /// The predicate held.
    case satisfied
    /// The clock reached the deadline (the predicate, if any, never held).
    case deadlineReached
    /// `maxEvents` events were handled before the deadline; the clock stopped at the last one.
    /// Usually a node in a zero-delay loop.
    case eventBudgetExhausted

    package var description: String {
        switch self {
        case .satisfied: "satisfied"
        case .deadlineReached: "deadline reached"
        case .eventBudgetExhausted: "event budget exhausted"
        }
    }
}

extension Simulator {
    /// The default event budget of a bounded run: far above any sane test, low enough that a
    /// runaway loop fails in seconds instead of hanging the suite.
    package static let defaultEventBudget = 20_000_000

    /// Handles the next event that does something (skipping stale timers), moving the clock
    /// to it. False when nothing is pending.
    @discardableResult
    package func step() -> Bool {
        while let entry = queue.pop() {
            if now < entry.time { now = entry.time }
            if handle(entry.payload) { return true }
        }
        return false
    }

    /// Handles every event due up to `deadline`, then sets the clock to `deadline`.
    @discardableResult
    package func run(until deadline: MeshInstant, maxEvents: Int = Simulator.defaultEventBudget) -> SimRunOutcome {
        run(until: deadline, maxEvents: maxEvents, checkEvery: nil) { _ in false }
    }

    @discardableResult
    package func run(for duration: Duration, maxEvents: Int = Simulator.defaultEventBudget) -> SimRunOutcome {
        run(until: now + duration, maxEvents: maxEvents)
    }

    /// Runs until `predicate` holds, the clock would pass `deadline`, or `maxEvents` events
    /// have been handled — whichever comes first; it cannot run forever.
    ///
    /// The predicate is checked before the first event and then after every event, or, with
    /// `checkEvery`, only at each multiple of that interval of simulated time from now (for
    /// predicates that are costly, such as "all 1,000 nodes agree"); the clock then stops at
    /// the first such instant where it holds.
    @discardableResult
    package func run(
        until deadline: MeshInstant,
        maxEvents: Int = Simulator.defaultEventBudget,
        checkEvery interval: Duration? = nil,
        predicate: (Simulator) -> Bool
    ) -> SimRunOutcome {
        if predicate(self) { return .satisfied }
        let polling = interval.flatMap { $0 > .zero ? $0 : nil }
        var nextCheck = polling.map { now + $0 }
        var handled = 0
        while true {
            let nextEvent = queue.nextTime
            if let check = nextCheck, check <= deadline, nextEvent.map({ $0 > check }) ?? true {
                // Nothing is due before the next check instant: let time pass to it and look.
                if now < check { now = check }
                if predicate(self) { return .satisfied }
                let following = check + polling!
                nextCheck = following > check ? following : nil  // saturated at the far future
                continue
            }
            guard let due = nextEvent, due <= deadline else { break }
            guard handled < maxEvents else {
                return predicate(self) ? .satisfied : .eventBudgetExhausted
            }
            handled += 1
            let entry = queue.pop()!
            if now < entry.time { now = entry.time }
            if handle(entry.payload), polling == nil, predicate(self) { return .satisfied }
        }
        if now < deadline { now = deadline }
        return predicate(self) ? .satisfied : .deadlineReached
    }

    @discardableResult
    package func run(
        for duration: Duration,
        maxEvents: Int = Simulator.defaultEventBudget,
        checkEvery interval: Duration? = nil,
        predicate: (Simulator) -> Bool
    ) -> SimRunOutcome {
        run(until: now + duration, maxEvents: maxEvents, checkEvery: interval, predicate: predicate)
    }
}
