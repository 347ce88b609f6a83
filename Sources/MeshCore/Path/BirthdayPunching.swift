import MeshCrypto

/// Birthday punching (PROTOCOL.md §1c, "Birthday rounds"): a member behind a symmetric NAT (a new
/// mapping per destination) and one behind an endpoint-independent NAT meet directly by chance.
/// The hard side (symmetric) opens many sockets of its own, each sending one short-lived datagram
/// to the easy side's public address, so its NAT holds that many mappings towards it; the easy
/// side probes random ports of the hard side's public host from its one socket, whose mapping is
/// the same for all of them, each probe opening its own firewall for that port. A probe that lands
/// on one of the mappings reaches the hard side, whose answer goes back through the same mapping:
/// the path is direct. With 256 mappings and 1,024 probes over 64,512 ports, a round finds one
/// about 98 times in 100.
///
/// The pair coordinates through the path it has (a relay, or TURN): the member with the lower id
/// offers a round (`BirthdayRound.offer`, with its NAT and public addresses), the other answers
/// `ready` once its sockets are asked for (or at once, with none to open), the leader opens its
/// own if it has a hard role and answers `ready` in turn, and each side with an easy role probes
/// after the other's `ready` (its sockets are open by then). Roles come from both NATs
/// (`roles(local:peer:)`), the same on both sides. Pure: time and randomness come in, actions go
/// out (NodeInstance+Birthday carries them out).
package struct BirthdayPunching: Sendable {
    package struct Settings: Sendable, Equatable {
        /// Off: no round is offered or taken (a simulation about relays, whose pair a lucky probe
        /// could punch).
        package var enabled = true
        /// Sockets the hard side opens for one round (each one a mapping on its NAT).
        package var sockets = 256
        /// Probes the easy side sends in one round, and how fast.
        package var probes = 1024
        package var probesPerSecond = 256
        /// Probes go in batches this far apart (a batch is `probesPerSecond` × this).
        package var probeInterval: Duration = .milliseconds(50)
        /// The easy side starts this long after the hard side's `ready`: its sockets are bound and
        /// their mappings made before the first probe reaches its router (a probe that arrives
        /// first leaves a flow there that a later mapping avoids).
        package var probeDelay: Duration = .milliseconds(250)
        /// The hard side's sockets stay open this long unless one is hit (the probes take
        /// `probes / probesPerSecond`, four seconds).
        package var socketLifetime: Duration = .seconds(8)
        /// The hard side's datagrams expire this many hops out, before the easy side's router
        /// (one that reached it unasked could be taken as a flow to the router itself).
        package var hops: UInt8 = 2
        /// An offer not answered this long after is given up (an older member ignores it).
        package var answerWait: Duration = .seconds(3)
        /// Between two rounds offered to one member while the pair stays relayed: doubling.
        package var retryInterval: Duration = .seconds(30)
        package var maximumRetryInterval: Duration = .seconds(600)
        /// Rounds another member may start with us, at most one per this long.
        package var acceptInterval: Duration = .seconds(10)
        /// An offer not answered goes again this often, at most this many times (same token: the
        /// follower answers it again), so one lost datagram does not cost a round.
        package var offerResendInterval: Duration = .seconds(1)
        package var offerResends = 2
        /// Ports probed are drawn from here to 65,535.
        package var lowestPort: UInt16 = 1024
        /// Probes for every round together, at most this many per `probeBudgetInterval`: a member
        /// that names another host as its own, or chains rounds, gets no more from us than this.
        package var probeBudget = 1024
        package var probeBudgetInterval: Duration = .seconds(60)
        /// Whether a loopback, private or link-local host may be a round's target (the
        /// simulator's hosts are on 127/8); on a real network a round is for public hosts only.
        package var localHostsAllowed = false

        package init() {}
    }

    package struct Roles: OptionSet, Sendable, Hashable {
        package let rawValue: UInt8
        package init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Opens many sockets towards the other's one public address.
        package static let hard = Roles(rawValue: 1)
        /// Probes many ports of the other's public host.
        package static let easy = Roles(rawValue: 2)
    }

    /// Who plays what, from the two NATs: a symmetric side is hard, an endpoint-independent (or
    /// no) NAT easy. A side whose NAT is not known yet is taken as hard against an easy one
    /// (ordinary punches failed, and they get through from an endpoint-independent NAT to
    /// anything but a symmetric one) and as easy against a hard one; when neither is known,
    /// or both look easy, both sides play both roles. Two symmetric NATs: no round (each probe
    /// would leave from a new port of its own).
    package static func roles(local: NATBehaviour, peer: NATBehaviour) -> (local: Roles, peer: Roles)? {
        enum Side { case hard, easy, unknown }
        func side(_ nat: NATBehaviour) -> Side {
            switch nat {
            case .symmetric: .hard
            case .endpointIndependent, .none: .easy
            case .unknown: .unknown
            }
        }
        switch (side(local), side(peer)) {
        case (.hard, .hard): return nil
        case (.hard, _), (.unknown, .easy): return (.hard, .easy)
        case (_, .hard), (.easy, .unknown): return (.easy, .hard)
        case (.unknown, .unknown), (.easy, .easy): return ([.hard, .easy], [.hard, .easy])
        }
    }

    package enum Phase: Sendable, Equatable {
        /// We offered; waiting for the other's `ready`.
        case offered
        /// Answered or going: waiting for the other's `ready` (if it has a hard role), probing
        /// (if we have an easy one), and for a datagram of the other's that comes directly.
        case running
    }

    package struct Round: Sendable, Equatable {
        package var token: UInt64
        package var phase: Phase
        package var leads: Bool
        package var localRoles: Roles = []
        package var peerRoles: Roles = []
        /// Where our sockets aim (the other's public address), when we play hard.
        package var target: PeerAddress?
        /// The host we probe, when we play easy and the other is hard.
        package var probedHost: PeerAddress.Host?
        package var heardReady = false
        var probesSent = 0
        var probedPorts: Set<UInt16> = []
        var probeStart: MeshInstant?
        var nextProbeAt: MeshInstant?
        package var endsAt: MeshInstant
        /// The offer goes again (a datagram may be lost) at most `offerResends` times, this far apart.
        var resendAt: MeshInstant?
        var resends = 0
    }

    /// What to do: the node sends the frames and carries out the rest.
    package enum Action: Sendable, Equatable {
        case offer(NodeID, token: UInt64)
        case ready(NodeID, token: UInt64)
        /// Open `count` sockets, each sending one short-lived punch to `target`, for `lifetime`.
        case openSockets(NodeID, target: PeerAddress, count: Int, lifetime: Duration)
        /// Send one punch to each of these ports of `host`.
        case probe(NodeID, host: PeerAddress.Host, ports: [UInt16])
        /// The round ended without a direct path.
        case failed(NodeID)
    }

    package let settings: Settings
    /// At most one round at a time: its sockets and its probes are the whole budget.
    package private(set) var round: (peer: NodeID, state: Round)?
    /// Per member we lead for: when the next round may be offered, and the wait after it.
    var nextOffer: [NodeID: (at: MeshInstant, wait: Duration)] = [:]
    var lastAccepted: [NodeID: MeshInstant] = [:]
    package private(set) var roundsTried: UInt64 = 0
    package private(set) var roundsSucceeded: UInt64 = 0
    package private(set) var probesSent: UInt64 = 0
    package private(set) var socketsAsked: UInt64 = 0
    /// Probes left in the node-wide budget, and when it was last filled.
    private var probeTokens: Double?
    private var probeTokensAt = MeshInstant.zero

    package init(settings: Settings = .init()) {
        self.settings = settings
    }

    /// What is due: offers to `eligible` members (relayed after ordinary punches failed, and
    /// led by us; nil: not looked at this time, no offer), batches of probes, and a round that
    /// ran out.
    package mutating func due(
        now: MeshInstant, eligible: [NodeID]?,
        random: inout some RandomNumberGenerator
    ) -> [Action] {
        var actions: [Action] = []
        // A member no longer relayed starts afresh next time.
        if let eligible { nextOffer = nextOffer.filter { eligible.contains($0.key) } }
        if case let (peer, state)? = round {
            if state.phase == .offered, let at = state.resendAt, now >= at, now < state.endsAt {
                var next = state
                next.resends += 1
                next.resendAt = next.resends < settings.offerResends ? now + settings.offerResendInterval : nil
                round = (peer, next)
                actions.append(.offer(peer, token: state.token))
            }
            if now >= state.endsAt {
                round = nil
                schedule(after: peer, now: now)
                actions.append(.failed(peer))
            } else if let host = state.probedHost, let next = state.nextProbeAt, now >= next {
                var state = state
                let ports = probeBatch(&state, now: now, random: &random)
                round = (peer, state)
                if !ports.isEmpty { actions.append(.probe(peer, host: host, ports: ports)) }
            }
        }
        guard settings.enabled, round == nil, let eligible else { return actions }
        for peer in eligible.sorted() where nextOffer[peer].map({ now >= $0.at }) ?? true {
            let token = (random.next() as UInt64) | 1
            round = (
                peer,
                Round(
                    token: token, phase: .offered, leads: true, endsAt: now + settings.answerWait,
                    resendAt: settings.offerResends > 0 ? now + settings.offerResendInterval : nil)
            )
            if nextOffer[peer] == nil { nextOffer[peer] = (now, .zero) }
            roundsTried += 1
            actions.append(.offer(peer, token: token))
            break
        }
        return actions
    }

    /// The next wait for `peer`, doubling from `retryInterval`.
    private mutating func schedule(after peer: NodeID, now: MeshInstant) {
        guard let last = nextOffer[peer] else { return }
        let wait = min(max(last.wait * 2, settings.retryInterval), settings.maximumRetryInterval)
        nextOffer[peer] = (now + wait, wait)
    }

    /// Ports for the probes due now, at `probesPerSecond` since the first, distinct, at random.
    private mutating func probeBatch(
        _ state: inout Round, now: MeshInstant,
        random: inout some RandomNumberGenerator
    ) -> [UInt16] {
        guard let start = state.probeStart else { return [] }
        let elapsed = Double((now - start).milliseconds) / 1000
        // The node-wide budget, filled at `probeBudget` per `probeBudgetInterval`.
        let capacity = Double(settings.probeBudget)
        let fill =
            Double((now - probeTokensAt).milliseconds) / Double(max(1, settings.probeBudgetInterval.milliseconds))
        let tokens = min(capacity, (probeTokens ?? capacity) + max(0, fill) * capacity)
        probeTokensAt = now
        let allowed = min(
            settings.probes, Int(elapsed * Double(settings.probesPerSecond)) + 1,
            state.probesSent + Int(tokens))
        let span = UInt32(UInt16.max - settings.lowestPort) + 1
        var ports: [UInt16] = []
        while state.probesSent < allowed, state.probedPorts.count < Int(span) {
            let port = settings.lowestPort + UInt16(UInt32(truncatingIfNeeded: random.next() as UInt64) % span)
            guard state.probedPorts.insert(port).inserted else { continue }
            ports.append(port)
            state.probesSent += 1
        }
        probeTokens = tokens - Double(ports.count)
        state.nextProbeAt = state.probesSent < settings.probes ? now + settings.probeInterval : nil
        return ports
    }

    /// A `BirthdayRound` frame from `peer` (`peerLeads`: its id is the lower), with our own NAT
    /// and public addresses for the answer.
    package mutating func receive(
        _ frame: BirthdayRound, from peer: NodeID, peerLeads: Bool, localNAT: NATBehaviour,
        now: MeshInstant
    ) -> [Action] {
        switch frame.step {
        case .offer:
            // The same offer again (our `ready` was lost): answered again, nothing else.
            if case let (current, state)? = round, current == peer, state.token == frame.token, !state.leads {
                return [.ready(peer, token: frame.token)]
            }
            // Only the leader offers; one round at a time; an offer repeated within
            // `acceptInterval` is ignored (a member cannot keep us opening sockets).
            guard settings.enabled, peerLeads, round == nil,
                lastAccepted[peer].map({ now >= $0 + settings.acceptInterval }) ?? true,
                let roles = Self.roles(local: localNAT, peer: frame.nat)
            else { return [] }
            lastAccepted[peer] = now
            roundsTried += 1
            var state = Round(token: frame.token, phase: .running, leads: false, endsAt: now + roundLength)
            var actions = start(&state, roles: roles, peerAddresses: frame.addresses, peer: peer)
            actions.append(.ready(peer, token: frame.token))
            round = (peer, state)
            return actions
        case .ready:
            guard case let (current, state)? = round, current == peer, state.token == frame.token,
                !state.heardReady
            else {
                return []
            }
            var next = state
            next.heardReady = true
            next.resendAt = nil
            var actions: [Action] = []
            if next.phase == .offered {
                guard let roles = Self.roles(local: localNAT, peer: frame.nat) else {
                    round = nil
                    schedule(after: peer, now: now)
                    return [.failed(peer)]
                }
                next.phase = .running
                next.endsAt = now + roundLength
                actions = start(&next, roles: roles, peerAddresses: frame.addresses, peer: peer)
                // Our sockets are asked for: the other may probe now. With none, it has nothing to wait for.
                if next.target != nil { actions.append(.ready(peer, token: next.token)) }
            }
            // The other's sockets are open: probe its host, if we play easy against its hard.
            if next.localRoles.contains(.easy), next.peerRoles.contains(.hard),
                let host = next.probedHost ?? frame.addresses.first(where: isTarget)?.host
            {
                next.probedHost = host
                next.probeStart = now + settings.probeDelay
                next.nextProbeAt = now + settings.probeDelay
            }
            round = (peer, next)
            return actions
        }
    }

    /// Roles taken for a round: a hard side asks for its sockets, aimed at the other's first
    /// public address; an easy side notes the host it will probe once told to.
    private mutating func start(
        _ state: inout Round, roles: (local: Roles, peer: Roles), peerAddresses: [PeerAddress],
        peer: NodeID
    ) -> [Action] {
        state.localRoles = roles.local
        state.peerRoles = roles.peer
        let usable = peerAddresses.filter(isTarget)
        var actions: [Action] = []
        if roles.local.contains(.hard), roles.peer.contains(.easy), let target = usable.first {
            state.target = target
            socketsAsked += UInt64(settings.sockets)
            actions.append(
                .openSockets(
                    peer, target: target, count: settings.sockets,
                    lifetime: settings.socketLifetime))
        }
        if roles.local.contains(.easy), roles.peer.contains(.hard) {
            // Where the other itself says it is: the only host we ever probe for it.
            state.probedHost = usable.first?.host
        }
        return actions
    }

    /// An address a round may aim at: a port, and a host that can be a home's public one (not
    /// this network, loopback, private, link-local, multicast or reserved, unless
    /// `localHostsAllowed`), so a member cannot turn a round on our own machine or LAN.
    func isTarget(_ address: PeerAddress) -> Bool {
        guard address.port != 0, !address.isUnspecified else { return false }
        switch address.host {
        case let .ipv4(value):
            let first = value >> 24
            if first == 0 || first >= 224 { return false }
            let local =
                first == 127 || first == 10 || value >> 20 == 0xAC1 || value >> 16 == 0xC0A8
                || value >> 16 == 0xA9FE || value >> 22 == (100 << 2 | 1)
            return settings.localHostsAllowed || !local
        case let .ipv6(high, _):
            if high >> 56 == 0xFF { return false }  // multicast
            let local = address.isLoopback || high >> 54 == 0x3FA || high >> 57 == 0x7E  // fe80::/10, fc00::/7
            return settings.localHostsAllowed || !local
        }
    }

    /// How long a round runs once going: the other's answer, the probes, and the sockets' life.
    var roundLength: Duration {
        settings.answerWait + settings.probeDelay + settings.socketLifetime
    }

    /// A datagram of `peer`'s own came to us directly while a round with it runs: it worked.
    /// True when it was the round's success.
    package mutating func heardDirectly(_ peer: NodeID) -> Bool {
        guard case let (current, state)? = round, current == peer, state.phase == .running else { return false }
        round = nil
        roundsSucceeded += 1
        nextOffer[peer] = nil
        return true
    }

    /// Probes sent, for the counters (the node counts each as it sends it).
    package mutating func countProbes(_ count: Int) {
        probesSent += UInt64(count)
    }

    /// A member gone: its round and schedule go.
    package mutating func forget(_ member: NodeID) {
        if round?.peer == member { round = nil }
        nextOffer[member] = nil
        lastAccepted[member] = nil
    }

    /// When `due` has something to do next.
    package var nextDeadline: MeshInstant? {
        guard let state = round?.state else { return nil }
        // The resend only while offered: a past instant left here would make the driver spin.
        let next = [state.nextProbeAt, state.phase == .offered ? state.resendAt : nil].compactMap { $0 }.min()
        return next.map { min($0, state.endsAt) } ?? state.endsAt
    }
}
