extension DownlinkController {
    /// When a foreground fetch next slows down to see whose queue it is (LEDBAT++'s slowdown,
    /// used as a test; see `Settings.slowdownAfter`): once the queue sat at a quarter of the
    /// target for `after`, and the last test is far enough behind.
    ///
    /// Invariants: `spacing` stays within `[initialSpacing, spacingLimit]`; no test is due
    /// before `nextAt`; a test found the queue our own waits twice as long next time, except the
    /// first verdict of that kind, which is repeated as soon as the queue is back (one verdict
    /// alone may have met another flow's trough: its queue drains for a moment after each of its
    /// losses). A verdict of another flow's queue starts the spacing over.
    struct SlowdownSchedule: Sendable {
        let initialSpacing: Duration
        let spacingLimit: Duration
        /// How long the queue must last before a test, and the window a repeat goes at once in.
        let after: Duration
        private(set) var spacing: Duration
        private(set) var nextAt = MeshInstant.zero
        /// A test found the queue our own, and the next one (or the probe after it) confirmed it.
        private(set) var ownQueueConfirmed = false
        /// Until then the next test goes as soon as the queue reaches a quarter of the target,
        /// without waiting for it to last.
        private(set) var atOnceUntil: MeshInstant?
        /// Since when the queue was at a quarter of the target or more.
        private(set) var queuedSince: MeshInstant?

        init(settings: Settings) {
            initialSpacing = settings.slowdownSpacing
            spacingLimit = settings.slowdownSpacingLimit
            after = settings.slowdownAfter
            spacing = settings.slowdownSpacing
        }

        /// An interval closed; `queued`: a foreground fetch's queue at a quarter of the target.
        /// Returns whether a test is due now (and then starts the wait over).
        mutating func due(queued: Bool, now: MeshInstant) -> Bool {
            guard queued else {
                queuedSince = nil
                return false
            }
            let since = queuedSince ?? now
            queuedSince = since
            let atOnce = atOnceUntil.map { now < $0 } ?? false
            guard now >= since + (atOnce ? .zero : after), now >= nextAt else { return false }
            queuedSince = nil
            atOnceUntil = nil
            return true
        }

        /// The queue fell, or something else answered it (a cut, slow start): its wait starts over.
        mutating func forgetQueue() {
            queuedSince = nil
        }

        /// The next test goes at once until `until` (nil: waits as usual).
        mutating func testAtOnce(until: MeshInstant?) {
            atOnceUntil = until
        }

        /// A test had no verdict (no piece came while it was judged).
        mutating func noVerdict(now: MeshInstant) {
            nextAt = now + spacing
        }

        /// A test (or a probe) found another flow's queue: one every two spacings while competing.
        mutating func foundAnotherFlow(now: MeshInstant) {
            ownQueueConfirmed = false
            spacing = initialSpacing
            nextAt = now + initialSpacing * 2
        }

        /// A test found the queue our own (`confirmed`: a probe agreed): the next waits longer,
        /// except the first repeat.
        mutating func foundOwnQueue(now: MeshInstant, confirmed: Bool = false) {
            if confirmed { ownQueueConfirmed = true }
            if ownQueueConfirmed {
                spacing = min(spacingLimit, spacing * 2)
                nextAt = now + spacing
            } else {
                // The repeat goes as soon as the queue is back at a quarter of the target (within two
                // seconds): waiting a second of queue for it would leave the get beside TCP
                // yielding that much longer (Docs/DESIGN-NOTES.md).
                ownQueueConfirmed = true
                nextAt = now
                atOnceUntil = now + after * 2
            }
        }
    }
}
