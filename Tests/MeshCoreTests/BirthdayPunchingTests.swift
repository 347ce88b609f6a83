import MeshCrypto
import Testing
@testable import MeshCore

/// Birthday rounds (`BirthdayPunching`): who plays which role, the exchange that starts a round,
/// the probes' budget and rate, retries while the pair stays relayed, and what a member cannot
/// make us do.
@Suite struct BirthdayPunchingTests {
    static let leader = NodeID(high: 0, low: 1)
    static let follower = NodeID(high: 0, low: 2)
    static let easyAddress = PeerAddress(ipv4: [203, 0, 113, 7], port: 7946)
    static let hardAddress = PeerAddress(ipv4: [198, 51, 100, 101], port: 40_123)
    static let start = MeshInstant.zero + .seconds(100)

    @Test(
        "roles: symmetric is hard, endpoint-independent (or none) easy; unknown is hard against easy and easy against hard; two unknown (or two easy) play both; two symmetric none"
    )
    func rolesFollowTheNATs() throws {
        typealias B = BirthdayPunching
        let both: B.Roles = [.hard, .easy]
        func roles(_ local: NATBehaviour, _ peer: NATBehaviour) -> [B.Roles]? {
            B.roles(local: local, peer: peer).map { [$0.local, $0.peer] }
        }
        #expect(roles(.symmetric, .endpointIndependent) == [.hard, .easy])
        #expect(roles(.endpointIndependent, .symmetric) == [.easy, .hard])
        #expect(roles(.none, .symmetric) == [.easy, .hard])
        #expect(roles(.symmetric, .symmetric) == nil)
        #expect(roles(.unknown, .endpointIndependent) == [.hard, .easy])
        #expect(roles(.endpointIndependent, .unknown) == [.easy, .hard])
        #expect(roles(.symmetric, .unknown) == [.hard, .easy])
        #expect(roles(.unknown, .symmetric) == [.easy, .hard])
        #expect(roles(.unknown, .unknown) == [both, both])
        #expect(roles(.endpointIndependent, .endpointIndependent) == [both, both])
        // Both sides derive the same split from the same two NATs.
        for local in NATBehaviour.allCases {
            for peer in NATBehaviour.allCases {
                let mine = B.roles(local: local, peer: peer), theirs = B.roles(local: peer, peer: local)
                #expect(mine?.local == theirs?.peer && mine?.peer == theirs?.local, "\(local) × \(peer)")
            }
        }
    }

    /// The leader (endpoint-independent) offers; the follower (symmetric) opens its sockets and
    /// says ready; the leader probes the follower's host, within the budget and the rate.
    @Test(
        "a round: offer, the hard side's sockets then ready, the easy side's probes: 1,024 distinct ports of the hard side's host, at most 256 a second, starting after the hard side's ready"
    )
    func aRoundOpensSocketsThenProbes() throws {
        var easy = BirthdayPunching(), hard = BirthdayPunching()
        var random = SplitMix64(seed: 19)
        var now = Self.start
        let offers = easy.due(now: now, eligible: [Self.follower], random: &random)
        guard case let .offer(peer, token)? = offers.first else { Issue.record("no offer: \(offers)"); return }
        #expect(peer == Self.follower && offers.count == 1)
        #expect(easy.due(now: now, eligible: [Self.follower], random: &random).isEmpty, "one offer at a time")
        let offer = BirthdayRound(token: token, step: .offer, nat: .endpointIndependent, addresses: [Self.easyAddress])
        let answer = hard.receive(offer, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: now)
        #expect(
            answer == [
                .openSockets(Self.leader, target: Self.easyAddress, count: 256, lifetime: .seconds(8)),
                .ready(Self.leader, token: token),
            ], "sockets first, then ready")
        let ready = BirthdayRound(token: token, step: .ready, nat: .symmetric, addresses: [Self.hardAddress])
        #expect(
            easy.receive(ready, from: Self.follower, peerLeads: false, localNAT: .endpointIndependent, now: now)
                .isEmpty,
            "the easy side opens nothing and says nothing more")
        #expect(
            easy.receive(ready, from: Self.follower, peerLeads: false, localNAT: .endpointIndependent, now: now).isEmpty
        )
        // Nothing before the hard side's sockets have had time to make their mappings.
        #expect(easy.due(now: now, eligible: nil, random: &random).isEmpty)
        var ports: [UInt16] = []
        var perSecond: [Int: Int] = [:]
        let end = now + .seconds(8)
        while now < end {
            for action in easy.due(now: now, eligible: nil, random: &random) {
                guard case let .probe(peer, host, batch) = action else { continue }
                #expect(peer == Self.follower && host == Self.hardAddress.host)
                #expect(now >= Self.start + easy.settings.probeDelay)
                ports += batch
                perSecond[Int((now - Self.start - easy.settings.probeDelay).milliseconds / 1000), default: 0] +=
                    batch.count
            }
            now = easy.nextDeadline.map { max($0, now + .milliseconds(1)) } ?? now + .milliseconds(50)
        }
        #expect(ports.count == 1024)
        #expect(Set(ports).count == ports.count, "no port twice")
        #expect(ports.allSatisfy { $0 >= 1024 })
        #expect(perSecond.values.allSatisfy { $0 <= 256 + 13 }, "\(perSecond.sorted { $0.key < $1.key })")
        let worked = hard.heardDirectly(Self.leader)
        #expect(worked, "a probe reached a socket: the round worked")
        #expect(hard.roundsSucceeded == 1 && hard.round == nil)
    }

    @Test(
        "the leader with the hard role opens its sockets when the easy follower is ready, and says ready in turn; the follower probes then"
    )
    func aHardLeaderOpensOnTheFollowersReady() throws {
        var hard = BirthdayPunching(), easy = BirthdayPunching()
        var random = SplitMix64(seed: 7)
        guard case let .offer(_, token)? = hard.due(now: Self.start, eligible: [Self.follower], random: &random).first
        else {
            Issue.record("no offer"); return
        }
        let offer = BirthdayRound(token: token, step: .offer, nat: .symmetric, addresses: [Self.hardAddress])
        #expect(
            easy.receive(offer, from: Self.leader, peerLeads: true, localNAT: .endpointIndependent, now: Self.start)
                == [.ready(Self.leader, token: token)])
        let ready = BirthdayRound(token: token, step: .ready, nat: .endpointIndependent, addresses: [Self.easyAddress])
        #expect(
            hard.receive(ready, from: Self.follower, peerLeads: false, localNAT: .symmetric, now: Self.start)
                == [
                    .openSockets(Self.follower, target: Self.easyAddress, count: 256, lifetime: .seconds(8)),
                    .ready(Self.follower, token: token),
                ])
        let hardReady = BirthdayRound(token: token, step: .ready, nat: .symmetric, addresses: [Self.hardAddress])
        _ = easy.receive(hardReady, from: Self.leader, peerLeads: true, localNAT: .endpointIndependent, now: Self.start)
        let probes = easy.due(now: Self.start + easy.settings.probeDelay, eligible: nil, random: &random)
        guard case let .probe(peer, host, _)? = probes.first else { Issue.record("no probes: \(probes)"); return }
        #expect(peer == Self.leader && host == Self.hardAddress.host)
        #expect(
            hard.due(now: Self.start + .seconds(1), eligible: nil, random: &random).isEmpty,
            "the hard side never probes")
    }

    @Test("with 256 mappings and 1,024 probes over 64,512 ports, rounds find a mapping at least 95 times in 100")
    func theBudgetsFindAMappingAlmostAlways() {
        var random = SplitMix64(seed: 0xB1D)
        var found = 0
        let rounds = 400
        for _ in 0..<rounds {
            var state = BirthdayPunching()
            var mappings = Set<UInt16>()
            while mappings.count < state.settings.sockets {
                mappings.insert(UInt16.random(in: 1024...UInt16.max, using: &random))
            }
            guard
                case let .offer(_, token)? = state.due(now: Self.start, eligible: [Self.follower], random: &random)
                    .first
            else {
                continue
            }
            let ready = BirthdayRound(token: token, step: .ready, nat: .symmetric, addresses: [Self.hardAddress])
            _ = state.receive(
                ready, from: Self.follower, peerLeads: false, localNAT: .endpointIndependent, now: Self.start)
            var now = Self.start
            var hit = false
            while !hit, let next = state.nextDeadline, now < Self.start + .seconds(10) {
                now = max(next, now)
                for case let .probe(_, _, ports) in state.due(now: now, eligible: nil, random: &random) {
                    hit = hit || ports.contains(where: mappings.contains)
                }
                now = now + .milliseconds(1)
            }
            if hit { found += 1 }
        }
        #expect(found * 100 >= rounds * 95, "\(found) of \(rounds)")
    }

    @Test(
        "a round that finds nothing is offered again after 30 s, then 60 s, doubling to 10 min while the pair stays relayed; one no longer relayed starts afresh"
    )
    func retriesBackOff() {
        var state = BirthdayPunching()
        var random = SplitMix64(seed: 3)
        var now = Self.start
        var offeredAt: [MeshInstant] = []
        var tokens: Set<UInt64> = []
        var resent = 0
        while now < Self.start + .seconds(2000) {
            for action in state.due(now: now, eligible: [Self.follower], random: &random) {
                // A round's offer goes up to three times (one may be lost); a new round has a new token.
                if case let .offer(_, token) = action {
                    if tokens.insert(token).inserted { offeredAt.append(now) } else { resent += 1 }
                }
            }
            now = now + .seconds(1)
        }
        #expect(
            resent == 2 * offeredAt.count, "each unanswered offer went twice more: \(resent) for \(offeredAt.count)")
        // Each offer goes unanswered for `answerWait` (3 s), then waits.
        let gaps = zip(offeredAt, offeredAt.dropFirst()).map { Int(($1 - $0).milliseconds / 1000) }
        #expect(gaps.prefix(6) == [33, 63, 123, 243, 483, 603], "\(gaps)")
        #expect(gaps.allSatisfy { $0 <= 603 })
        // No longer relayed: forgotten; relayed again: at once.
        _ = state.due(now: now, eligible: [], random: &random)
        now = now + .seconds(5)
        let again = state.due(now: now, eligible: [Self.follower], random: &random)
        #expect(again.contains { if case .offer = $0 { true } else { false } } || state.round != nil)
    }

    @Test(
        "an offer from a member that does not lead, a second within 10 s, one while another round runs, or between two symmetric NATs starts nothing"
    )
    func offersThatStartNothing() {
        var state = BirthdayPunching()
        let offer = BirthdayRound(token: 5, step: .offer, nat: .endpointIndependent, addresses: [Self.easyAddress])
        #expect(
            state.receive(offer, from: Self.follower, peerLeads: false, localNAT: .symmetric, now: Self.start).isEmpty)
        let symmetric = BirthdayRound(token: 5, step: .offer, nat: .symmetric, addresses: [Self.hardAddress])
        #expect(
            state.receive(symmetric, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: Self.start).isEmpty)
        #expect(
            !state.receive(offer, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: Self.start).isEmpty)
        let other = NodeID(high: 0, low: 0)
        #expect(
            state.receive(offer, from: other, peerLeads: true, localNAT: .symmetric, now: Self.start).isEmpty,
            "one round at a time: its sockets are the whole budget")
        // The round runs out; the same member offers again too soon, then late enough.
        var random = SplitMix64(seed: 1)
        var now = Self.start
        while state.round != nil { _ = state.due(now: now, eligible: nil, random: &random); now = now + .seconds(1) }
        let later = BirthdayRound(token: 6, step: .offer, nat: .endpointIndependent, addresses: [Self.easyAddress])
        #expect(now >= Self.start + state.settings.acceptInterval, "the round outlived the accept interval")
        #expect(!state.receive(later, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: now).isEmpty)
        // A ready with the wrong token, or from another member, does nothing.
        let stray = BirthdayRound(token: 99, step: .ready, nat: .endpointIndependent, addresses: [Self.easyAddress])
        #expect(state.receive(stray, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: now).isEmpty)
    }

    @Test(
        "a member that names our machine, a private, link-local or multicast host as its own gets no probe and no socket"
    )
    func localHostsAreNeverTargets() {
        var random = SplitMix64(seed: 11)
        let local = [
            PeerAddress(ipv4: [127, 0, 0, 1], port: 7946), PeerAddress(ipv4: [192, 168, 1, 1], port: 53),
            PeerAddress(ipv4: [169, 254, 1, 1], port: 80), PeerAddress(ipv4: [224, 0, 0, 251], port: 5353),
        ]
        // We play easy against a "symmetric" leader that names local hosts: nothing is probed.
        var easy = BirthdayPunching()
        let offer = BirthdayRound(token: 5, step: .offer, nat: .symmetric, addresses: local)
        #expect(
            easy.receive(offer, from: Self.leader, peerLeads: true, localNAT: .endpointIndependent, now: Self.start)
                == [.ready(Self.leader, token: 5)])
        let ready = BirthdayRound(token: 5, step: .ready, nat: .symmetric, addresses: local)
        _ = easy.receive(ready, from: Self.leader, peerLeads: true, localNAT: .endpointIndependent, now: Self.start)
        var now = Self.start
        while now < Self.start + .seconds(12) {
            let actions = easy.due(now: now, eligible: nil, random: &random)
            #expect(!actions.contains { if case .probe = $0 { true } else { false } }, "probed: \(actions)")
            now = now + .milliseconds(50)
        }
        // We play hard against an "endpoint-independent" leader that names local hosts: no sockets.
        var hard = BirthdayPunching()
        let easyOffer = BirthdayRound(token: 6, step: .offer, nat: .endpointIndependent, addresses: local)
        #expect(
            hard.receive(easyOffer, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: Self.start)
                == [.ready(Self.leader, token: 6)])
    }

    @Test("rounds one after another share one budget: at most 1,024 probes a minute, whoever asks")
    func probesShareOneBudget() {
        var random = SplitMix64(seed: 12)
        var easy = BirthdayPunching()
        var now = Self.start
        var probed = 0
        // Members (each leading) offer rounds back to back; we probe each of them.
        for index in 0..<4 {
            let leader = NodeID(high: 0, low: UInt64(index))
            let offer = BirthdayRound(
                token: UInt64(index + 1), step: .offer, nat: .symmetric, addresses: [Self.hardAddress])
            _ = easy.receive(offer, from: leader, peerLeads: true, localNAT: .endpointIndependent, now: now)
            let ready = BirthdayRound(
                token: UInt64(index + 1), step: .ready, nat: .symmetric, addresses: [Self.hardAddress])
            _ = easy.receive(ready, from: leader, peerLeads: true, localNAT: .endpointIndependent, now: now)
            while easy.round != nil {
                for case let .probe(_, _, ports) in easy.due(now: now, eligible: nil, random: &random) {
                    probed += ports.count
                }
                now = now + .milliseconds(50)
            }
        }
        let minutes = Double((now - Self.start).milliseconds) / 60_000
        #expect(Double(probed) <= 1024 * (1 + minutes) + 1, "\(probed) probes in \(minutes * 60) s")
        #expect(probed >= 1024, "the first round had its whole budget: \(probed)")
    }

    @Test(
        "an offer unanswered goes twice more, a second apart, with its token; once answered, no deadline of the round lies in the past"
    )
    func offersAreSentAgainAndDeadlinesStayAhead() {
        var random = SplitMix64(seed: 13)
        var leader = BirthdayPunching()
        guard case let .offer(_, token)? = leader.due(now: Self.start, eligible: [Self.follower], random: &random).first
        else {
            Issue.record("no offer"); return
        }
        var again: [MeshInstant] = []
        var now = Self.start
        while now < Self.start + .milliseconds(2_500) {
            now = now + .milliseconds(100)
            for case let .offer(_, resent) in leader.due(now: now, eligible: nil, random: &random) where resent == token
            {
                again.append(now)
            }
        }
        #expect(again == [Self.start + .seconds(1), Self.start + .seconds(2)], "\(again)")
        // The follower's ready comes at last: the round runs, and its next deadline is ahead.
        let ready = BirthdayRound(token: token, step: .ready, nat: .symmetric, addresses: [Self.hardAddress])
        _ = leader.receive(ready, from: Self.follower, peerLeads: false, localNAT: .endpointIndependent, now: now)
        while let deadline = leader.nextDeadline, leader.round != nil, now < Self.start + .seconds(20) {
            #expect(deadline >= now, "a deadline in the past: \(deadline) at \(now)")
            now = max(deadline, now + .milliseconds(1))
            _ = leader.due(now: now, eligible: nil, random: &random)
        }
    }

    @Test("no unusable address is aimed at or probed: a hard side told nothing usable opens no sockets")
    func unusableAddressesAreNotUsed() {
        var state = BirthdayPunching()
        let offer = BirthdayRound(
            token: 5, step: .offer, nat: .endpointIndependent,
            addresses: [PeerAddress(ipv4: [203, 0, 113, 7], port: 0), PeerAddress(ipv4: [0, 0, 0, 0], port: 7946)])
        #expect(
            state.receive(offer, from: Self.leader, peerLeads: true, localNAT: .symmetric, now: Self.start)
                == [.ready(Self.leader, token: 5)])
    }
}
