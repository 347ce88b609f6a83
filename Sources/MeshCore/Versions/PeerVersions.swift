import MeshCrypto

/// What each member speaks, learned from its `protocolVersion` frames (PROTOCOL.md §3, "Protocol
/// versions"). A member's boot is asked on first contact, again every `interval` until it
/// answers, at most `attempts` times while we reach it; one that never answered is a release that
/// knows no version frame, and speaks protocol 1. It is still asked once every `recheck`: a member
/// whose answers were all lost (or dropped by someone on the path) is found out, at the cost of
/// one datagram an older release drops. A pure value: the node sends what `due` says.
package struct PeerVersions: Sendable {
    package struct Settings: Sendable {
        /// Version frames sent to a member's boot before it is taken for protocol 1.
        package var attempts = 5
        package var interval: Duration = .seconds(2)
        /// How often a member taken for protocol 1 is asked again.
        package var recheck: Duration = .seconds(60)
        /// At most `answersPerWindow` answers to one member in `answerWindow`, whatever boot its
        /// frames name: an honest member asks at most twice at once (its first ask, and a re-ask
        /// with its introduction beside), then every `interval`; a storm of asks is not a storm of
        /// answers.
        package var answersPerWindow = 2
        package var answerWindow: Duration = .seconds(1)
        package init() {}
    }

    /// One member's boot, as far as its versions go.
    package struct Peer: Sendable, Equatable {
        package var boot: UInt64
        /// What it said, or `.unannounced` once it was heard from but never answered; nil while asking.
        package var versions: SpokenVersions?
        /// Whether `versions` came from a frame of its own.
        package var announced = false
        var attemptsLeft: Int
        var nextAt: MeshInstant?
        /// Whether the node reported that this boot and we have no version in common.
        var toldGap = false
        /// Asks sent again after it was known (`reask`): how many, when the last went, and
        /// whether one is due.
        package internal(set) var reasks = 0
        var reaskedAt: MeshInstant?
        var reasking = false
    }

    /// A member whose versions and ours do not meet: reported once per member boot.
    package struct Gap: Sendable, Equatable {
        package var member: NodeID
        package var theirs: SpokenVersions
        package var ours: SpokenVersions

        package init(member: NodeID, theirs: SpokenVersions, ours: SpokenVersions) {
            self.member = member
            self.theirs = theirs
            self.ours = ours
        }
    }

    package let settings: Settings
    /// What this node speaks (a test may claim other versions).
    package let ours: SpokenVersions
    package private(set) var peers: [NodeID: Peer] = [:]
    /// The latest answers to each member, and when it was last reported as a gap: kept across
    /// its boots, so that frames naming ever new boots buy neither answers nor terminal lines.
    private var answers: [NodeID: [MeshInstant]] = [:]
    private var gapReportedAt: [NodeID: MeshInstant] = [:]
    /// When `due` has members to ask or to give up on (kept, not searched for per input).
    package private(set) var nextDeadline: MeshInstant?

    package init(settings: Settings = .init(), ours: SpokenVersions = .this) {
        self.settings = settings
        self.ours = ours
    }

    /// The versions of `member`, as far as they are known.
    package func versions(of member: NodeID) -> SpokenVersions? { peers[member]?.versions }

    /// The version spoken to `member`: the newest both speak. Protocol 1 while it is unknown (a
    /// frame of a later version would make a member of an older release drop its datagram).
    package func spoken(with member: NodeID) -> Int {
        guard let theirs = peers[member]?.versions else { return ProtocolVersion.unannounced }
        return ours.common(with: theirs) ?? min(ours.current, theirs.current)
    }

    /// Whether a frame of this type may go to `member`: the one gate for frames after protocol 1.
    /// A version frame goes to every member: that is how versions are learned (what it costs a
    /// member of an older release is bounded by `due`'s pace).
    package func allows(_ type: FrameType, to member: NodeID) -> Bool {
        let introduced = type.introducedIn
        if introduced == 1 || type == .protocolVersion { return true }
        return spoken(with: member) >= introduced
    }

    /// A member's boot became known (its record, with keys for it): ask it from now on, unless
    /// this boot was asked already.
    package mutating func met(_ member: NodeID, boot: UInt64, now: MeshInstant) {
        guard peers[member]?.boot != boot else { return }
        peers[member] = Peer(boot: boot, attemptsLeft: settings.attempts, nextAt: now)
        nextDeadline = min(nextDeadline ?? now, now)
    }

    package mutating func forget(_ member: NodeID) {
        peers[member] = nil
        answers[member] = nil
        gapReportedAt[member] = nil
    }

    /// Ask a member whose versions we know once more, as on first contact: our version frame
    /// carries what changed beside it (our introduction), and its answer says whether that came.
    /// One interval after the last time, or a `recheck` once `attempts` went unheeded: a member
    /// whose every answer asks for more gets no more than that.
    package mutating func reask(_ member: NodeID, now: MeshInstant) {
        guard var peer = peers[member], peer.versions != nil, peer.attemptsLeft == 0 || peer.nextAt == nil else {
            return  // being asked
        }
        let spacing = peer.reasks < settings.attempts ? settings.interval : settings.recheck
        let at = peer.reaskedAt.map { max(now, $0 + spacing) } ?? now
        peer.reasking = true
        peer.attemptsLeft = settings.attempts
        peer.nextAt = at
        peers[member] = peer
        nextDeadline = min(nextDeadline ?? at, at)
    }

    private mutating func refreshDeadline() {
        nextDeadline = peers.values.compactMap(\.nextAt).min()
    }

    /// The members to send our version frame to now, and the gaps found. `reachable` says
    /// whether a member's own datagrams come to us on a path our answers take (straight, or
    /// through its relay): only then does a version frame count as an attempt, and one that never
    /// answered `attempts` of them is taken for protocol 1. One we do not reach (behind a NAT no
    /// punch has opened yet) is looked at again every `interval`, and sent nothing.
    package mutating func due(now: MeshInstant, reachable: (NodeID) -> Bool) -> (ask: [NodeID], gaps: [Gap]) {
        guard let deadline = nextDeadline, deadline <= now else { return ([], []) }
        var ask: [NodeID] = []
        var gaps: [Gap] = []
        for (member, peer) in peers.sorted(by: { $0.key < $1.key }) {
            guard let at = peer.nextAt, at <= now else { continue }
            var updated = peer
            if !reachable(member) {
                updated.nextAt = now + settings.interval
            } else if peer.attemptsLeft > 0 {
                updated.attemptsLeft -= 1
                updated.nextAt = now + settings.interval
                if updated.reasking {
                    updated.reasking = false
                    updated.reasks += 1
                    updated.reaskedAt = now
                }
                ask.append(member)
            } else if peer.versions == nil {
                updated.nextAt = now + settings.recheck
                updated.versions = .unannounced
                if ours.common(with: .unannounced) == nil {
                    updated.toldGap = true
                    gaps.append(Gap(member: member, theirs: .unannounced, ours: ours))
                }
            } else {
                // Taken for protocol 1: asked again now and then.
                updated.nextAt = now + settings.recheck
                ask.append(member)
            }
            peers[member] = updated
        }
        refreshDeadline()
        return (ask, gaps)
    }

    /// A member's version frame (of the boot `boot`): whether to answer it (unless it is an answer,
    /// within the member's answer window), and the gap when ours and its do not meet (once per
    /// boot, at most once a `recheck` per member).
    package mutating func received(
        _ announcement: VersionAnnouncement, from member: NodeID, boot: UInt64, now: MeshInstant
    ) -> (answer: Bool, gap: Gap?) {
        var peer =
            peers[member].flatMap { $0.boot == boot ? $0 : nil }
            ?? Peer(boot: boot, attemptsLeft: 0, nextAt: nil)
        peer.versions = announcement.versions
        peer.announced = true
        peer.nextAt = nil
        peer.attemptsLeft = 0
        var gap: Gap?
        if ours.common(with: announcement.versions) == nil, !peer.toldGap,
            gapReportedAt[member].map({ now >= $0 + settings.recheck }) ?? true
        {
            peer.toldGap = true
            gapReportedAt[member] = now
            gap = Gap(member: member, theirs: announcement.versions, ours: ours)
        }
        peers[member] = peer
        refreshDeadline()
        return (!announcement.isAnswer && mayAnswer(member, now: now), gap)
    }

    /// Whether an answer to `member` fits its window now (and counts it if so).
    private mutating func mayAnswer(_ member: NodeID, now: MeshInstant) -> Bool {
        var recent = answers[member, default: []].filter { now < $0 + settings.answerWindow }
        guard recent.count < settings.answersPerWindow else { return false }
        recent.append(now)
        answers[member] = recent
        return true
    }
}
