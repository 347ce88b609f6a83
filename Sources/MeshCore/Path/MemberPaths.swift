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
/// goes every `keepalive` to hold the NAT mappings on the way open.
///
/// When an introduction asked for `relayAfter` ago has not brought the member back (a symmetric
/// NAT maps a new port per destination, so a punch finds nothing), its datagrams go through a
/// relay: a member heard lately that relays, the closest first. A relay that goes silent, refuses
/// or leaves is replaced by the next; with none left the member is `unreachable` until one
/// appears. A relayed path keeps asking for introductions (backing off to a minute), and the
/// first datagram of the member's own that arrives directly ends the relaying. A member that
/// reaches us through a relay while we hear nothing of it directly is answered through the same
/// relay at once. The state is per member and pure: the node feeds it what arrives and asks it
/// what to send (NodeInstance+Paths, +Relay).
package struct MemberPaths: Sendable {
    package struct Settings: Sendable, Equatable {
        /// A member silent this long (at least; the node stretches it with the probe round) is
        /// introduced again.
        package var silence: Duration = .seconds(5)
        /// Between two introductions asked for one member; doubles to `maximumRequestInterval`.
        package var requestInterval: Duration = .seconds(5)
        package var maximumRequestInterval: Duration = .seconds(60)
        /// A simultaneous open's budget: rounds of punches to every candidate, this far apart.
        package var punchRounds = 10
        package var punchInterval: Duration = .milliseconds(100)
        /// The first rounds of a punch are short-lived: their datagrams leave our router (making
        /// our mapping towards the peer) and expire `shortPunchHops` hops out, before they reach
        /// the peer's router. A router with no firewall of its own would otherwise take the first
        /// punch to reach it as a flow to itself, and map its own host's punch back elsewhere.
        package var shortPunchRounds = 2
        package var shortPunchHops: UInt8 = 2
        /// A member reached through our TURN server is punched for a direct path this long after
        /// we first reached it so (past Linux's 30 s for a flow nobody answered), then at least
        /// this far apart.
        package var turnUpgradeWait: Duration = .seconds(35)
        /// Punches under way at once (each one an introduction a member asked us to follow).
        package var maxPunches = 8
        /// A punch given up still left mappings in our NAT towards its candidates: the member's
        /// own punch that comes through one of them this soon after opened a punched path.
        package var gaveUpPunchMemory: Duration = .seconds(30)
        /// Of those, opens one member introduced.
        package var maxPunchesPerIntroducer = 2
        /// Under common UDP mapping lifetimes (30 s unanswered on Linux, as little as 30–60 s on
        /// home routers). Each punched path that falls silent (its mapping expired, or the member
        /// is gone) shortens it by a third, down to `minimumKeepalive`.
        package var keepalive: Duration = .seconds(25)
        package var minimumKeepalive: Duration = .seconds(5)
        /// Introductions made for one requester.
        package var introductionInterval: Duration = .seconds(1)
        /// An introduction asked for this long ago that did not bring a silent member back: it is
        /// reached through a relay (a punch takes `punchRounds × punchInterval`, a second).
        package var relayAfter: Duration = .seconds(2)
        /// A relay that went silent or refused is not chosen again for this pair for this long.
        package var relayRetry: Duration = .seconds(60)
        /// A member heard through a relay is answered through it when nothing came directly for this long.
        package var relayAdoption: Duration = .seconds(2)

        package init() {}
    }

    package enum State: String, Sendable, Equatable {
        /// Reached at its record's address, or where its own datagrams come from.
        case direct
        /// A simultaneous open is under way.
        case punching
        /// Reached where a simultaneous open found it.
        case punched
        /// Reached through a relay (`Path.relay`).
        case relayed
        /// Silent, no introduction brought it back, and no member relays to it.
        case unreachable
    }

    package struct Path: Sendable, Equatable {
        package var state = State.direct
        /// Where the member's latest authenticated datagram came from.
        package var learned: PeerAddress?
        /// Whether `learned` came from a pairwise datagram of `boot` (a hello proves no source:
        /// any holder of the secret can seal one in the member's name).
        var learnedPairwise = false
        var boot: UInt64 = 0
        var packet: UInt64 = 0
        /// The member's latest datagram by any route, and the latest that came directly.
        package var lastHeard: MeshInstant?
        var lastDirect: MeshInstant?
        /// The member that carries our datagrams to it, while it is relayed.
        package var relay: NodeID?
        var relayedSince: MeshInstant?
        /// When its latest datagram came through our relay: a relay is judged by what comes
        /// back through it, not by what comes through another.
        var lastViaRelay: MeshInstant?
        /// The relay its latest relayed datagram came through (its own choice), and that
        /// datagram's boot and number: an older one, held back and delivered late, proves nothing.
        var peerRelay: NodeID?
        var relayedBoot: UInt64?
        var relayedPacket: UInt64 = 0
        /// Relays that went silent or refused for this member, and when.
        var failedRelays: [NodeID: MeshInstant] = [:]
        /// When an introduction was last asked for.
        var askedAt: MeshInstant?
        /// Its relay failed or left: the next one is chosen at the next check, without waiting.
        var seekRelay = false
        var nextRequest: MeshInstant?
        var requestWait: Duration?
        /// Reached through a TURN relay: when we next punch its record for a direct path, and the
        /// wait after that (doubling, as introductions for a relayed member do).
        var nextUpgrade: MeshInstant?
        var upgradeWait: Duration?
        var lastKeepalive: MeshInstant?
        /// Simultaneous opens towards it that ran out their rounds: a pair reached through TURN
        /// after one did is offered a birthday round.
        package internal(set) var punchesFailed = 0
        /// The last open toward it each member introduced: budgets per introducer, so that one
        /// member sending false introductions cannot use up an honest introducer's.
        var lastPunch: [NodeID: MeshInstant] = [:]
    }

    struct Punching: Sendable {
        var introducer: NodeID
        var candidates: [PeerAddress]
        var roundsLeft: Int
        var nextAt: MeshInstant
        /// The address the member is reached at meanwhile (a TURN relay's): its datagrams from
        /// there neither end the punch nor make it succeed.
        var keepsOn: PeerAddress?
    }

    /// What to send for the paths: the node seals and sends it.
    package enum Action: Sendable, Equatable {
        case punch(NodeID, to: PeerAddress, isReply: Bool)
        /// A punch sent with an IP TTL (hop limit) of `hops`: it opens our own NAT's mapping and
        /// dies before the peer's router (a peer on our own network still gets it).
        case shortPunch(NodeID, to: PeerAddress, hops: UInt8)
        case request(introductionTo: NodeID, from: NodeID)
        /// `member` is now reached through `relay`, or (nil) through nobody: it is unreachable.
        case relay(NodeID, through: NodeID?)
        /// A silent member and no member to introduce us: punch what its own record gives,
        /// ourselves (one of its addresses may be a TURN relay's, which needs nobody's help).
        case punchRecord(NodeID)
        /// `member` is reached through a TURN relay at `from`: punch its record's other
        /// addresses, to go direct.
        case upgrade(NodeID, from: PeerAddress)
    }

    /// How stale `lastHeard` may be before a datagram from the same address updates it: silences
    /// are seconds long, and a stream of datagrams should not write the table for each one.
    static let heardGranularity: Duration = .milliseconds(100)

    package let settings: Settings
    package private(set) var paths: [NodeID: Path] = [:]
    var punching: [NodeID: Punching] = [:]
    /// Punches given up lately: where they went, and until when that counts.
    var gaveUp: [NodeID: (candidates: [PeerAddress], until: MeshInstant)] = [:]
    var introduced: [NodeID: MeshInstant] = [:]
    package private(set) var punchesSucceeded: UInt64 = 0
    package private(set) var punchesFailed: UInt64 = 0
    /// Punched paths that fell silent: each one a mapping that may have expired.
    package private(set) var punchedPathsLost: UInt64 = 0
    /// Between two keepalives on a path, now (`Settings.keepalive`, shortened by lost paths).
    package private(set) var keepaliveInterval: Duration

    package init(settings: Settings = .init()) {
        self.settings = settings
        keepaliveInterval = settings.keepalive
    }

    /// The address in use for `member`, when a datagram of its own proved one.
    /// Where `member`'s boot `boot` was heard from (another boot's address says nothing of this
    /// one: a restarted member listens elsewhere).
    package func address(of member: NodeID, boot: UInt64?) -> PeerAddress? {
        guard let path = paths[member], path.boot == boot else { return nil }
        return path.learned
    }

    /// Where `member`'s boot `boot` sent a pairwise datagram of its own from, the latest: an
    /// address proven as no hello and no record proves one.
    package func pairwiseAddress(of member: NodeID, boot: UInt64?) -> PeerAddress? {
        guard let path = paths[member], path.boot == boot, path.learnedPairwise else { return nil }
        return path.learned
    }

    package func state(of member: NodeID) -> State {
        paths[member]?.state ?? .direct
    }

    /// The member our datagrams to `member` go through, while it is relayed.
    package func relay(of member: NodeID) -> NodeID? {
        paths[member]?.relay
    }

    /// Whether `member`'s own datagrams came straight to us within `silence`, and we answer it
    /// straight: such a member can introduce others to it, and carry datagrams to it.
    package func isDirect(_ member: NodeID, within silence: Duration, now: MeshInstant) -> Bool {
        guard let path = paths[member], path.relay == nil, let heard = path.lastDirect else { return false }
        return now < heard + silence
    }

    /// Members reached through a relay.
    package var relayedMembers: Set<NodeID> {
        Set(paths.compactMap { $0.value.relay == nil ? nil : $0.key })
    }

    /// Members reached through `relay`.
    package func relayed(through relay: NodeID) -> [NodeID] {
        paths.filter { $0.value.relay == relay }.map(\.key).sorted()
    }

    /// An authenticated pairwise datagram of `member`'s boot `boot`, number `packet`, came from
    /// `source`. True when the address in use for it changed.
    package mutating func heard(
        _ member: NodeID, boot: UInt64, packet: UInt64, from source: PeerAddress,
        now: MeshInstant
    ) -> Bool {
        // Most datagrams (a stream of pieces) change nothing: a read, no write, on that path.
        if punching.isEmpty, let known = paths[member], known.boot == boot, known.learned == source,
            known.learnedPairwise, let heard = known.lastDirect, now < heard + Self.heardGranularity,
            known.requestWait == nil, known.relay == nil
        {
            return false
        }
        var path = paths[member] ?? Path()
        path.lastHeard = now
        path.lastDirect = now
        path.requestWait = nil
        path.askedAt = nil
        path.seekRelay = false
        var changed = false
        if path.boot != boot || packet > path.packet {
            changed = path.learned != source
            path.learned = source
            path.boot = boot
            path.packet = packet
        }
        if path.learned == source { path.learnedPairwise = true }
        if let attempt = punching[member], attempt.keepsOn == source {
            // Traffic on the path in use (through TURN) while we punch for a direct one.
        } else if let attempt = punching.removeValue(forKey: member) {
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
        } else if let recent = gaveUp.removeValue(forKey: member), now < recent.until,
            recent.candidates.contains(source), path.learned == source
        {
            // The member punched later (an introduction reached it after ours gave up), and our
            // own punches' mappings let it in: as punched as if both had punched at once.
            path.state = .punched
            punchesSucceeded += 1
            changed = true
        }
        // Its own datagram came straight here: we answer where it came from, no relay needed.
        if path.relay != nil || path.state == .relayed || path.state == .unreachable {
            path.relay = nil
            path.relayedSince = nil
            if path.state != .punched { path.state = .direct }
            changed = true
        }
        paths[member] = path
        return changed
    }

    /// A hello of `member`'s boot `boot` came from `source`, an address its own signed record
    /// gives: where to send it until a pairwise datagram of its own proves where it is (any one
    /// moves it: the hello's packet number is not taken). True when that changed the address.
    package mutating func helloFrom(_ member: NodeID, boot: UInt64, at source: PeerAddress, now: MeshInstant) -> Bool {
        // Heard now: the silence checks (introductions, punching its record, relays) count from here.
        var path = paths[member] ?? Path(lastHeard: now)
        if path.lastHeard == nil { path.lastHeard = now }
        guard path.boot != boot || path.learned == nil, path.relay == nil, punching[member] == nil else { return false }
        path.boot = boot
        path.packet = 0
        path.learned = source
        path.learnedPairwise = false
        paths[member] = path
        return true
    }

    /// An authenticated datagram of `member` came through `relay`. True when we now answer it
    /// through that relay: we had none and heard nothing of it directly for `relayAdoption`, or
    /// we had another and `follows` (of two members that chose different relays, the one with
    /// the higher id takes the other's choice, so they meet on one and do not swap forever).
    package mutating func heardThroughRelay(
        _ member: NodeID, via relay: NodeID, boot: UInt64, packet: UInt64, follows: Bool,
        now: MeshInstant
    ) -> Bool {
        var path = paths[member] ?? Path()
        if path.relayedBoot != boot { path.relayedBoot = boot; path.relayedPacket = 0 }
        guard packet > path.relayedPacket else { return false }
        defer { paths[member] = path }
        path.relayedPacket = packet
        path.lastHeard = now
        path.peerRelay = relay
        if path.relay == relay { path.lastViaRelay = now }
        guard path.relay != relay, punching[member] == nil else { return false }
        if path.relay == nil {
            guard path.lastDirect.map({ now >= $0 + settings.relayAdoption }) ?? true else { return false }
        } else {
            guard follows else { return false }
        }
        // It carried the member's datagram to us: whatever we concluded of it before.
        path.failedRelays[relay] = nil
        path.relay = relay
        path.relayedSince = now
        path.lastViaRelay = now
        path.state = .relayed
        return true
    }

    /// `relay` will not carry our datagrams to `member`, or stopped answering for it: the next
    /// relay is chosen at the next check.
    package mutating func relayFailed(_ relay: NodeID, for member: NodeID, now: MeshInstant) {
        guard var path = paths[member] else { return }
        path.failedRelays[relay] = now
        if path.relay == relay {
            path.relay = nil
            path.relayedSince = nil
            path.state = .direct
            path.seekRelay = true
        }
        paths[member] = path
    }

    /// `relay` left or died: every member reached through it looks for another at the next check.
    /// The member it was is forgotten with its path; the paths it relayed are only moved.
    package mutating func relayGone(_ relay: NodeID, now: MeshInstant) {
        for member in relayed(through: relay) {
            paths[member]?.relay = nil
            paths[member]?.relayedSince = nil
            paths[member]?.state = .direct
            paths[member]?.seekRelay = true
        }
    }

    /// A birthday round found `member` (its own datagram just came directly): the path is
    /// `punched` where it came from, and kept alive as punched paths are.
    package mutating func birthdayPunched(_ member: NodeID) {
        guard paths[member]?.learned != nil else { return }
        paths[member]?.state = .punched
        punching[member] = nil
    }

    /// A member gone: its path is forgotten with it.
    package mutating func forget(_ member: NodeID) {
        paths[member] = nil
        punching[member] = nil
        gaveUp[member] = nil
        introduced[member] = nil
    }

    /// `introducer` told us to meet `peer` at `candidates` now. False when over budget.
    package mutating func introduced(
        to peer: NodeID, at candidates: [PeerAddress], by introducer: NodeID,
        keepingOn inUse: PeerAddress? = nil, now: MeshInstant
    ) -> Bool {
        // One open per peer per introducer per `requestInterval`: an honest introducer answers a
        // silence that long at most, and a member sending introductions without end cannot keep
        // us punching, nor hold more than `maxPunchesPerIntroducer` of the opens at once.
        guard !candidates.isEmpty, punching[peer] == nil, punching.count < settings.maxPunches,
            punching.values.count(where: { $0.introducer == introducer }) < settings.maxPunchesPerIntroducer,
            paths[peer]?.lastPunch[introducer].map({ now >= $0 + settings.requestInterval }) ?? true
        else { return false }
        paths[peer, default: Path()].lastPunch[introducer] = now
        punching[peer] = Punching(
            introducer: introducer, candidates: Array(candidates.prefix(PunchIntroduction.maxAddresses)),
            roundsLeft: settings.punchRounds, nextAt: now, keepsOn: inUse)
        paths[peer, default: Path()].state = .punching
        return true
    }

    /// Whether to introduce `requester` to someone now (at most one introduction per
    /// `introductionInterval` per requester: a member cannot make us send floods of them).
    package mutating func mayIntroduce(_ requester: NodeID, now: MeshInstant) -> Bool {
        if let last = introduced[requester], now < last + settings.introductionInterval { return false }
        introduced[requester] = now
        return true
    }

    /// What is due: punch rounds, keepalives on punched paths, introductions to ask for members
    /// in `live` (with their silence threshold) that have been silent, through one of
    /// `introducers` (members heard lately, best first), and relays for those an introduction
    /// did not bring back, among `relays` (members heard lately that relay, best first). Behind a
    /// NAT (`behindNAT`), every path a member's datagrams proved gets keepalives, not only punched
    /// ones: probes alone may visit a member less often than its mapping lives.
    package mutating func due(
        now: MeshInstant, live: [NodeID], silence: Duration,
        introducers: [NodeID], relays: [NodeID] = [], behindNAT: Bool = false,
        turnHost: PeerAddress.Host? = nil
    ) -> [Action] {
        var actions: [Action] = []
        for (peer, attempt) in punching.sorted(by: { $0.key < $1.key }) where attempt.nextAt <= now {
            let short = settings.punchRounds - attempt.roundsLeft < settings.shortPunchRounds
            for address in attempt.candidates {
                actions.append(
                    short
                        ? .shortPunch(peer, to: address, hops: settings.shortPunchHops)
                        : .punch(peer, to: address, isReply: false))
            }
            var next = attempt
            next.roundsLeft -= 1
            next.nextAt = now + settings.punchInterval
            if next.roundsLeft <= 0 {
                punching[peer] = nil
                gaveUp[peer] = (attempt.candidates, now + settings.gaveUpPunchMemory)
                punchesFailed += 1
                paths[peer]?.punchesFailed += 1
                let relayed = paths[peer]?.relay != nil
                paths[peer]?.state = relayed ? .relayed : .direct
            } else {
                punching[peer] = next
            }
        }
        for peer in live {
            var path = paths[peer] ?? Path(lastHeard: now)
            defer { paths[peer] = path }
            if path.state == .punched || (behindNAT && path.state == .direct && path.relay == nil),
                let address = path.learned,
                path.lastKeepalive.map({ now >= $0 + keepaliveInterval }) ?? true
            {
                path.lastKeepalive = now
                actions.append(.punch(peer, to: address, isReply: true))
            }
            guard punching[peer] == nil, let heard = path.lastHeard else { continue }
            // Reached through our TURN server (its relayed address): it works, and the pair keeps
            // trying to go direct, as a pair a member relays does.
            if path.relay == nil, let turnHost, let address = path.learned, address.host == turnHost,
                now < heard + silence
            {
                // The first try waits out what a router keeps of a flow nobody answered (the join's
                // first datagrams to our addresses may have left one on the far side), as does
                // each next one.
                guard let next = path.nextUpgrade else {
                    path.nextUpgrade = now + settings.turnUpgradeWait
                    continue
                }
                if now >= next {
                    let wait = min(
                        max((path.upgradeWait ?? .zero) * 2, settings.turnUpgradeWait), settings.maximumRequestInterval)
                    path.upgradeWait = wait
                    path.nextUpgrade = now + wait
                    actions.append(.upgrade(peer, from: address))
                }
                continue
            }
            if let relay = path.relay {
                // A relay that is gone from the lately heard, or through which the member fell
                // silent, is replaced; one that works stays while introductions try for better.
                let lastGood = max(path.lastViaRelay ?? .zero, path.relayedSince ?? heard)
                if relays.contains(relay), now < lastGood + silence {
                    request(for: peer, &path, introducers: [relay] + introducers, now: now, into: &actions)
                    continue
                }
                path.failedRelays[relay] = now
                path.relay = nil
                path.relayedSince = nil
                path.state = .direct
                path.seekRelay = true
            } else if now < heard + (path.lastDirect == nil ? firstSilence(silence) : silence), !path.seekRelay {
                continue
            }
            // Silent: the path (punched or not) is dead or was never there.
            if path.state == .punched {
                path.state = .direct
                punchedPathsLost += 1
                keepaliveInterval = max(settings.minimumKeepalive, keepaliveInterval * (2.0 / 3))
            }
            if path.seekRelay || path.askedAt.map({ now >= $0 + settings.relayAfter }) == true {
                path.seekRelay = false
                path.failedRelays = path.failedRelays.filter { now < $0.value + settings.relayRetry }
                // The relay the member itself uses first (where it is, both meet), then the closest.
                let preferred = path.peerRelay.map { [$0] + relays.filter { $0 != path.peerRelay } } ?? relays
                if let relay = preferred.first(where: {
                    $0 != peer && relays.contains($0) && path.failedRelays[$0] == nil
                }) {
                    path.relay = relay
                    path.relayedSince = now
                    path.state = .relayed
                    actions.append(.relay(peer, through: relay))
                    continue
                }
                if path.state != .unreachable { actions.append(.relay(peer, through: nil)) }
                path.state = .unreachable
            }
            request(for: peer, &path, introducers: introducers, now: now, into: &actions)
        }
        return actions
    }

    /// How long a member never heard directly may stay so before it is introduced: half the
    /// silence of a path that worked (which allows for a member that is only quiet), at least
    /// `Settings.silence`. A member behind another NAT is silent from the start; one on a
    /// working path answers our first probe, within one round.
    func firstSilence(_ silence: Duration) -> Duration {
        max(settings.silence, silence / 2)
    }

    /// An introduction to `peer` through the first of `introducers`, when the last one's wait is over.
    private func request(
        for peer: NodeID, _ path: inout Path, introducers: [NodeID], now: MeshInstant,
        into actions: inout [Action]
    ) {
        guard path.nextRequest.map({ now >= $0 }) ?? true else { return }
        let wait = min((path.requestWait ?? settings.requestInterval / 2) * 2, settings.maximumRequestInterval)
        guard let introducer = introducers.first(where: { $0 != peer }) else {
            // Nobody to ask: as if one had been asked and failed, so a relay is sought in time;
            // meanwhile its record's addresses are punched, as often as introductions are asked.
            if path.askedAt == nil { path.askedAt = now }
            path.requestWait = wait
            path.nextRequest = now + wait
            actions.append(.punchRecord(peer))
            return
        }
        path.requestWait = wait
        path.nextRequest = now + wait
        path.askedAt = now
        actions.append(.request(introductionTo: peer, from: introducer))
    }

    /// When `due` has something to do next, other than the silence checks (the node runs those
    /// once a second).
    package var nextDeadline: MeshInstant? {
        punching.values.map(\.nextAt).min()
    }
}
