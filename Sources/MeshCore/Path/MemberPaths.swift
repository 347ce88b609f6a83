import MeshCrypto

/// Where each member is reached, as this node has proven it: the path state per member.
///
/// A member's authenticated pairwise datagram (its key, a packet number never seen) shows where
/// it is: a NAT in front of it maps its datagrams to that address, and lets back in what we send
/// there. So that source is the address in use from then on (WireGuard's roaming; only a newer
/// packet of the same boot moves it, so a late, reordered datagram cannot move it back). Nobody's
/// claim moves it: an address is proven by the member's own datagram, or not used.
///
/// When a live member is silent towards us (nothing pairwise of its own for `silence`), we ask a
/// member both sides hear to introduce us (`PunchRequest`); its introduction starts a simultaneous
/// open (`Punch` to each candidate address, `punchRounds` times every `punchInterval`), which the
/// first authenticated datagram of the peer ends: the path is then `punched`, and a keepalive
/// goes every `keepalive` to hold the NAT mappings on the way open. The state is per member and
/// pure: the node feeds it what arrives and asks it what to send (NodeInstance+Paths).
public struct MemberPaths: Sendable {
    public struct Settings: Sendable, Equatable {
        /// A member silent this long (at least; the node stretches it with the probe round) is
        /// introduced again.
        public var silence: Duration = .seconds(5)
        /// Between two introductions asked for one member; doubles to `maximumRequestInterval`.
        public var requestInterval: Duration = .seconds(5)
        public var maximumRequestInterval: Duration = .seconds(60)
        /// A simultaneous open's budget: rounds of punches to every candidate, this far apart.
        public var punchRounds = 10
        public var punchInterval: Duration = .milliseconds(100)
        /// Punches under way at once (each one an introduction a member asked us to follow).
        public var maxPunches = 8
        /// Of those, opens one member introduced.
        public var maxPunchesPerIntroducer = 2
        /// Under common UDP mapping lifetimes (30 s unanswered on Linux, as little as 30–60 s on
        /// home routers).
        public var keepalive: Duration = .seconds(25)
        /// Introductions made for one requester.
        public var introductionInterval: Duration = .seconds(1)

        public init() {}
    }

    public enum State: String, Sendable, Equatable {
        /// Reached at its record's address, or where its own datagrams come from.
        case direct
        /// A simultaneous open is under way.
        case punching
        /// Reached where a simultaneous open found it.
        case punched
    }

    public struct Path: Sendable, Equatable {
        public var state = State.direct
        /// Where the member's latest authenticated datagram came from.
        public var learned: PeerAddress?
        var boot: UInt64 = 0
        var packet: UInt64 = 0
        public var lastHeard: MeshInstant?
        var nextRequest: MeshInstant?
        var requestWait: Duration?
        var lastKeepalive: MeshInstant?
        /// The last open toward it each member introduced: budgets per introducer, so that one
        /// member sending false introductions cannot use up an honest introducer's.
        var lastPunch: [NodeID: MeshInstant] = [:]
    }

    struct Punching: Sendable {
        var introducer: NodeID
        var candidates: [PeerAddress]
        var roundsLeft: Int
        var nextAt: MeshInstant
    }

    /// What to send for the paths: the node seals and sends it.
    public enum Action: Sendable, Equatable {
        case punch(NodeID, to: PeerAddress, isReply: Bool)
        case request(introductionTo: NodeID, from: NodeID)
    }

    /// How stale `lastHeard` may be before a datagram from the same address updates it: silences
    /// are seconds long, and a stream of datagrams should not write the table for each one.
    static let heardGranularity: Duration = .milliseconds(100)

    public let settings: Settings
    public private(set) var paths: [NodeID: Path] = [:]
    var punching: [NodeID: Punching] = [:]
    var introduced: [NodeID: MeshInstant] = [:]
    public private(set) var punchesSucceeded: UInt64 = 0
    public private(set) var punchesFailed: UInt64 = 0

    public init(settings: Settings = .init()) {
        self.settings = settings
    }

    /// The address in use for `member`, when a datagram of its own proved one.
    /// Where `member`'s boot `boot` was heard from (another boot's address says nothing of this
    /// one: a restarted member listens elsewhere).
    public func address(of member: NodeID, boot: UInt64?) -> PeerAddress? {
        guard let path = paths[member], path.boot == boot else { return nil }
        return path.learned
    }

    public func state(of member: NodeID) -> State {
        paths[member]?.state ?? .direct
    }

    /// An authenticated pairwise datagram of `member`'s boot `boot`, number `packet`, came from
    /// `source`. True when the address in use for it changed.
    public mutating func heard(_ member: NodeID, boot: UInt64, packet: UInt64, from source: PeerAddress,
                               now: MeshInstant) -> Bool {
        // Most datagrams (a stream of pieces) change nothing: a read, no write, on that path.
        if punching.isEmpty, let known = paths[member], known.boot == boot, known.learned == source,
           let heard = known.lastHeard, now < heard + Self.heardGranularity, known.requestWait == nil {
            return false
        }
        var path = paths[member] ?? Path()
        path.lastHeard = now
        path.requestWait = nil
        var changed = false
        if path.boot != boot || packet > path.packet {
            changed = path.learned != source
            path.learned = source
            path.boot = boot
            path.packet = packet
        }
        if let attempt = punching.removeValue(forKey: member) {
            // Punched only where the introduction said, by a datagram newer than any before: an
            // answer from where we already reached it (an introduction it did not need), or a late
            // one, leaves the path as it was.
            if attempt.candidates.contains(source), path.learned == source {
                path.state = .punched
                punchesSucceeded += 1
                changed = true
            } else {
                path.state = .direct
            }
        }
        paths[member] = path
        return changed
    }

    /// A member gone: its path is forgotten with it.
    public mutating func forget(_ member: NodeID) {
        paths[member] = nil
        punching[member] = nil
        introduced[member] = nil
    }

    /// `introducer` told us to meet `peer` at `candidates` now. False when over budget.
    public mutating func introduced(to peer: NodeID, at candidates: [PeerAddress], by introducer: NodeID,
                                    now: MeshInstant) -> Bool {
        // One open per peer per introducer per `requestInterval`: an honest introducer answers a
        // silence that long at most, and a member sending introductions without end cannot keep
        // us punching, nor hold more than `maxPunchesPerIntroducer` of the opens at once.
        guard !candidates.isEmpty, punching[peer] == nil, punching.count < settings.maxPunches,
              punching.values.count(where: { $0.introducer == introducer }) < settings.maxPunchesPerIntroducer,
              paths[peer]?.lastPunch[introducer].map({ now >= $0 + settings.requestInterval }) ?? true else { return false }
        paths[peer, default: Path()].lastPunch[introducer] = now
        punching[peer] = Punching(introducer: introducer, candidates: Array(candidates.prefix(PunchIntroduction.maxAddresses)),
                                  roundsLeft: settings.punchRounds, nextAt: now)
        paths[peer, default: Path()].state = .punching
        return true
    }

    /// Whether to introduce `requester` to someone now (at most one introduction per
    /// `introductionInterval` per requester: a member cannot make us send floods of them).
    public mutating func mayIntroduce(_ requester: NodeID, now: MeshInstant) -> Bool {
        if let last = introduced[requester], now < last + settings.introductionInterval { return false }
        introduced[requester] = now
        return true
    }

    /// What is due: punch rounds, keepalives on punched paths, and introductions to ask for
    /// members in `live` (with their silence threshold) that have been silent, through one of
    /// `introducers` (members heard lately, best first).
    public mutating func due(now: MeshInstant, live: [NodeID], silence: Duration,
                             introducers: [NodeID]) -> [Action] {
        var actions: [Action] = []
        for (peer, attempt) in punching.sorted(by: { $0.key < $1.key }) where attempt.nextAt <= now {
            for address in attempt.candidates { actions.append(.punch(peer, to: address, isReply: false)) }
            var next = attempt
            next.roundsLeft -= 1
            next.nextAt = now + settings.punchInterval
            if next.roundsLeft <= 0 {
                punching[peer] = nil
                punchesFailed += 1
                paths[peer]?.state = .direct
            } else {
                punching[peer] = next
            }
        }
        for peer in live {
            var path = paths[peer] ?? Path(lastHeard: now)
            defer { paths[peer] = path }
            if path.state == .punched, let address = path.learned,
               path.lastKeepalive.map({ now >= $0 + settings.keepalive }) ?? true {
                path.lastKeepalive = now
                actions.append(.punch(peer, to: address, isReply: true))
            }
            // Silent: the path (punched or not) is dead or was never there.
            guard punching[peer] == nil, let heard = path.lastHeard, now >= heard + silence else { continue }
            if path.state == .punched { path.state = .direct }
            guard path.nextRequest.map({ now >= $0 }) ?? true,
                  let introducer = introducers.first(where: { $0 != peer }) else { continue }
            let wait = min((path.requestWait ?? settings.requestInterval / 2) * 2, settings.maximumRequestInterval)
            path.requestWait = wait
            path.nextRequest = now + wait
            actions.append(.request(introductionTo: peer, from: introducer))
        }
        return actions
    }

    /// When `due` has something to do next, other than the silence checks (the node runs those
    /// once a second).
    public var nextDeadline: MeshInstant? {
        punching.values.map(\.nextAt).min()
    }
}
