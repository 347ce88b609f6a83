/// Which control connections a node keeps. Every CLI command opens one, so a script (or a
/// hostile local process of the same user) that opens connections and says nothing would
/// otherwise hold a descriptor each until the node has none left (past 1,024 of
/// them every command failed). At most `limit` are open; one that has nothing in flight (no
/// request waiting for its answer, no `listen`) for `idleTimeout` is closed; a new connection
/// when all `limit` are open takes the place of the one idle longest, and is refused only
/// when every one is busy. Pure: times come in as arguments.
struct ControlConnectionTable {
    struct Settings {
        var limit = 64
        var idleTimeout: Duration = .seconds(20)
        /// A connection this new that has not sent its request yet is not taken for idle: a
        /// burst of CLI commands must not close each other before they are read.
        var grace: Duration = .seconds(2)
    }

    enum Admission: Equatable {
        case admitted
        /// Admitted in place of this connection, which must be closed.
        case admittedEvicting(Int)
        /// Every open connection is busy.
        case refused
    }

    private struct Entry {
        let opened: Duration
        var lastActive: Duration
        var inFlight = 0
        var isSubscribed = false
        var hasAsked = false
        var isBusy: Bool { inFlight > 0 || isSubscribed }
    }

    let settings: Settings
    private var entries: [Int: Entry] = [:]
    private var nextID = 0

    init(settings: Settings = Settings()) { self.settings = settings }

    var count: Int { entries.count }

    /// `now` is any monotonic reading (time since an arbitrary origin).
    mutating func admit(now: Duration) -> (id: Int, admission: Admission) {
        var admission = Admission.admitted
        if entries.count >= settings.limit {
            guard let idlest = evictIdlest(now: now) else { return (-1, .refused) }
            admission = .admittedEvicting(idlest)
        }
        let id = nextID
        nextID += 1
        entries[id] = Entry(opened: now, lastActive: now)
        return (id, admission)
    }

    /// Forgets the connection idle longest (the caller closes it); nil when all are busy. Also
    /// used when `accept` fails for want of a descriptor, so the next one can succeed.
    mutating func evictIdlest(now: Duration) -> Int? {
        let idle = entries.filter { !$0.value.isBusy && ($0.value.hasAsked || now - $0.value.opened >= settings.grace) }
        guard let idlest = idle.min(by: { ($0.value.lastActive, $0.key) < ($1.value.lastActive, $1.key) }) else {
            return nil
        }
        entries[idlest.key] = nil
        return idlest.key
    }

    mutating func requestStarted(_ id: Int, now: Duration) {
        entries[id]?.inFlight += 1
        entries[id]?.hasAsked = true
        entries[id]?.lastActive = now
    }

    /// The final answer to a request went out (not a progress line).
    mutating func requestAnswered(_ id: Int, now: Duration) {
        guard let entry = entries[id] else { return }
        entries[id]?.inFlight = max(0, entry.inFlight - 1)
        entries[id]?.lastActive = now
    }

    mutating func subscribed(_ id: Int) { entries[id]?.isSubscribed = true }

    mutating func closed(_ id: Int) { entries[id] = nil }

    /// Connections idle past the timeout, forgotten here: the caller closes them.
    mutating func expired(now: Duration) -> [Int] {
        let expired = entries.filter { !$0.value.isBusy && now - $0.value.lastActive >= settings.idleTimeout }.map(
            \.key)
        for id in expired { entries[id] = nil }
        return expired.sorted()
    }
}
