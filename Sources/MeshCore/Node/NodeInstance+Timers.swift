/// Every timer of the node in one table: when it is due (`deadline(of:)`) and what runs then
/// (`fire(_:now:)`). `tick` runs them all in `NodeTimer.order`, each checking its own time, so a
/// tick that comes early is harmless. `nextDeadline` is the earliest of them.
enum NodeTimer: Sendable, CaseIterable {
    /// Probes, suspicion timeouts, gossip and anti-entropy.
    case membership
    /// Retransmissions and the give-up of messages.
    case delivery
    /// The journal's anti-entropy.
    case journal
    /// Fetch deadlines, retries of failed fetches, availability announcements.
    case fetch
    /// Pieces owed to members, paced.
    case pieces
    /// Beacons of the current key epoch.
    case epochBeacons
    /// Operations of others the journal log could not take yet.
    case journalBacklog
    /// A leave waiting for others to hold what only this node holds.
    case leaveHandover
    /// The grace of an ending session.
    case ending
    /// A notice of our removal, held for a rotation that keeps us.
    case removalNotice
    /// The next rotation of a removal that takes more than one.
    case stagedRemoval
    /// `ping` commands waiting for their answer.
    case ping
    /// Path checks and hole punching.
    case paths
    /// Birthday rounds with members behind a symmetric NAT.
    case birthday
    /// The protocol version exchange, and the request for our introduction.
    case versions
    /// LAN announcements.
    case lan
    /// The notice that nobody answers a join yet.
    case joinNotice
    /// The scrub of the chunks held whole.
    case scrub

    /// The order `tick` runs them in: membership first, so that everything after it sees this
    /// instant's member list. A stored array: `allCases` would be built anew on every call.
    static let order: [NodeTimer] = allCases
}

extension NodeInstance {
    func deadline(of timer: NodeTimer) -> MeshInstant? {
        switch timer {
        case .membership: membership.nextDeadline
        case .delivery: delivery.nextDeadline
        case .journal: journal.nextDeadline
        case .fetch: fetchDeadline
        case .pieces: serving.pacer.nextDeadline
        case .epochBeacons: keying.beaconAt
        case .journalBacklog: library.backlogRetryAt
        case .leaveHandover: handoverDeadline
        case .ending: closing.ending?.until
        case .removalNotice: keying.heldRemovalNotices.lazy.map(\.until).min()
        case .stagedRemoval: keying.stagedRemoval?.nextAt
        case .ping: pingDeadline
        case .paths: pathsDeadline
        case .birthday: links.birthday.nextDeadline
        case .versions:
            [versions.nextDeadline, directory.introductions.nextDeadline].compactMap { $0 }.min()
        case .lan: lanDeadline
        case .joinNotice: joinNoticeDeadline
        case .scrub: scrubDeadline
        }
    }

    mutating func fire(_ timer: NodeTimer, now: MeshInstant) {
        switch timer {
        case .membership:
            let directives = membership.onTick(now: now)
            apply(directives, now: now)
        case .delivery:
            let directives = delivery.onTick(now: now)
            apply(directives, now: now)
        case .journal:
            let directives = journal.onTick(now: now)
            apply(directives, now: now)
        case .fetch: fetchTick(now: now)
        case .pieces: releasePieces(now: now)
        case .epochBeacons: sendEpochBeacons(now: now)
        case .journalBacklog: retryJournalBacklog(now: now)
        case .leaveHandover: advanceHandover(now: now)
        case .ending: endingTick(now: now)
        case .removalNotice: decideHeldRemovalNotices(now: now)
        case .stagedRemoval: continueStagedRemoval(now: now)
        case .ping: pingTick(now: now)
        case .paths: pathsTick(now: now)
        case .birthday: birthdayTick(now: now)
        case .versions: versionsTick(now: now)
        case .lan: lanTick(now: now)
        case .joinNotice: joinTick(now: now)
        case .scrub: scrubTick(now: now)
        }
    }
}
