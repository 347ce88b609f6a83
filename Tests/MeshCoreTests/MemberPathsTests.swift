import MeshCrypto
import Testing
@testable import MeshCore

/// The path state per member (`MemberPaths`): what proves an address, the punch budget,
/// keepalives, and when an introduction is asked for.
@Suite struct MemberPathsTests {
    static let peer = NodeID(high: 0, low: 1)
    static let helper = NodeID(high: 0, low: 2)
    static let record = PeerAddress(ipv4: [192, 168, 1, 5], port: 7946)
    static let mapped = PeerAddress(ipv4: [203, 0, 113, 9], port: 40_001)
    static let other = PeerAddress(ipv4: [203, 0, 113, 9], port: 40_002)
    static let start = MeshInstant.zero + .seconds(100)

    @Test(
        "a member reached through our TURN server is punched for a direct path after 35 s, again and again; its traffic through TURN meanwhile neither ends nor wins the punch"
    )
    func aPathThroughTURNKeepsTryingToGoDirect() {
        let relayed = PeerAddress(ipv4: [198, 51, 100, 10], port: 49_152)
        var paths = MemberPaths()
        var now = Self.start
        var packet: UInt64 = 1
        func hear(_ source: PeerAddress) -> Bool {
            packet += 1
            return paths.heard(Self.peer, boot: 1, packet: packet, from: source, now: now)
        }
        func upgrades() -> [PeerAddress] {
            paths.due(now: now, live: [Self.peer], silence: .seconds(5), introducers: [], turnHost: relayed.host)
                .compactMap {
                    if case let .upgrade(peer, from) = $0, peer == Self.peer { return from } else { return nil }
                }
        }
        _ = hear(relayed)
        #expect(upgrades().isEmpty, "not at once: a flow a router keeps for a datagram nobody answered expires first")
        now = now + paths.settings.turnUpgradeWait
        _ = hear(relayed)
        #expect(upgrades() == [relayed], "reached through TURN: punch for better")
        #expect(upgrades().isEmpty, "not again at once")
        do {
            let result = paths.introduced(
                to: Self.peer, at: [Self.mapped], by: Self.helper, keepingOn: relayed, now: now);
            #expect(result)
        }
        // Probes and acks keep coming through TURN: the punch goes on.
        now = now + .milliseconds(150)
        _ = hear(relayed)
        #expect(paths.state(of: Self.peer) == .punching)
        // The punch's answer, from the member's own address: direct, and no more upgrades.
        now = now + .milliseconds(150)
        do { let result = hear(Self.mapped); #expect(result) }
        #expect(paths.state(of: Self.peer) == .punched && paths.address(of: Self.peer, boot: 1) == Self.mapped)
        now = now + .seconds(30)
        _ = hear(Self.mapped)
        #expect(upgrades().isEmpty)
        // Without a TURN server of ours, a path is just a path.
        var plain = MemberPaths()
        _ = plain.heard(Self.peer, boot: 1, packet: 1, from: relayed, now: Self.start)
        #expect(
            !plain.due(now: Self.start, live: [Self.peer], silence: .seconds(5), introducers: [])
                .contains { if case .upgrade = $0 { true } else { false } })
    }

    @Test func onlyANewerDatagramOfTheMemberMovesItsAddress() {
        var paths = MemberPaths()
        #expect(paths.address(of: Self.peer, boot: 1) == nil)
        do {
            let result = paths.heard(Self.peer, boot: 1, packet: 10, from: Self.mapped, now: Self.start);
            #expect(result)
        }
        #expect(paths.address(of: Self.peer, boot: 1) == Self.mapped)
        // A late datagram from before a rebinding does not move it back.
        do {
            let result = paths.heard(Self.peer, boot: 1, packet: 9, from: Self.other, now: Self.start); #expect(!result)
        }
        #expect(paths.address(of: Self.peer, boot: 1) == Self.mapped)
        do {
            let result = paths.heard(Self.peer, boot: 1, packet: 11, from: Self.other, now: Self.start); #expect(result)
        }
        // A new boot numbers from 1 again; where the old boot was heard says nothing of it.
        do {
            let result = paths.heard(Self.peer, boot: 2, packet: 1, from: Self.mapped, now: Self.start); #expect(result)
        }
        #expect(paths.address(of: Self.peer, boot: 2) == Self.mapped)
        #expect(
            paths.address(of: Self.peer, boot: 3) == nil, "a restarted member listens elsewhere: its record says where")
        #expect(paths.state(of: Self.peer) == .direct)
    }

    @Test func aPunchRunsItsBudgetToEveryCandidateThenGivesUp() {
        var paths = MemberPaths()
        do {
            let result = paths.introduced(
                to: Self.peer, at: [Self.mapped, Self.record], by: Self.helper, now: Self.start);
            #expect(result)
        }
        #expect(paths.state(of: Self.peer) == .punching)
        var punches: [PeerAddress] = []
        var shortPunches: [PeerAddress] = []
        var now = Self.start
        for _ in 0..<50 {
            for action in paths.due(now: now, live: [], silence: .seconds(5), introducers: []) {
                switch action {
                case let .punch(peer, address, isReply):
                    #expect(peer == Self.peer && !isReply)
                    #expect(
                        shortPunches.count == 2 * paths.settings.shortPunchRounds, "the short-lived rounds come first")
                    punches.append(address)
                case let .shortPunch(peer, address, hops):
                    #expect(peer == Self.peer && hops == paths.settings.shortPunchHops)
                    shortPunches.append(address)
                default:
                    Issue.record("unexpected \(action)")
                }
            }
            now = now + .milliseconds(50)
        }
        #expect(shortPunches.count == 2 * paths.settings.shortPunchRounds)
        #expect(punches.count == 2 * (paths.settings.punchRounds - paths.settings.shortPunchRounds))
        #expect(Set(punches) == [Self.mapped, Self.record] && Set(shortPunches) == Set(punches))
        #expect(paths.punchesFailed == 1)
        #expect(paths.state(of: Self.peer) == .direct)
        #expect(paths.nextDeadline == nil)
        // Introduced again at once: refused, whoever asks.
        do {
            let result = paths.introduced(to: Self.peer, at: [Self.mapped], by: Self.helper, now: now); #expect(!result)
        }
        do {
            let result = paths.introduced(
                to: Self.peer, at: [Self.mapped], by: Self.helper, now: Self.start + paths.settings.requestInterval);
            #expect(result)
        }
    }

    @Test(
        "a punch given up is punched after all when the member's own later punch comes through one of its candidates soon enough; not from elsewhere, nor later"
    )
    func aPunchGivenUpIsOpenedByTheMembersLaterPunch() {
        func giveUp(_ paths: inout MemberPaths, at start: MeshInstant) -> MeshInstant {
            _ = paths.introduced(to: Self.peer, at: [Self.mapped], by: Self.helper, now: start)
            var now = start
            while paths.state(of: Self.peer) == .punching {
                _ = paths.due(now: now, live: [], silence: .seconds(5), introducers: [])
                now = now + .milliseconds(50)
            }
            return now
        }
        var paths = MemberPaths()
        var now = giveUp(&paths, at: Self.start)
        #expect(paths.punchesFailed == 1 && paths.state(of: Self.peer) == .direct)
        // The member's punch, through the mapping ours left, 10 s later.
        now = now + .seconds(10)
        let moved = paths.heard(Self.peer, boot: 1, packet: 1, from: Self.mapped, now: now)
        #expect(moved)
        #expect(paths.state(of: Self.peer) == .punched && paths.punchesSucceeded == 1)

        // From an address the punch did not go to: just a path.
        var elsewhere = MemberPaths()
        now = giveUp(&elsewhere, at: Self.start)
        _ = elsewhere.heard(Self.peer, boot: 1, packet: 1, from: Self.other, now: now + .seconds(1))
        #expect(elsewhere.state(of: Self.peer) == .direct && elsewhere.punchesSucceeded == 0)
        // Past the mappings' life: nothing of ours opened it.
        var late = MemberPaths()
        now = giveUp(&late, at: Self.start)
        _ = late.heard(Self.peer, boot: 1, packet: 1, from: Self.mapped, now: now + late.settings.gaveUpPunchMemory)
        #expect(late.state(of: Self.peer) == .direct && late.punchesSucceeded == 0)
    }

    @Test func theFirstAuthenticatedDatagramFixesThePathAndKeepalivesHoldIt() {
        var paths = MemberPaths()
        _ = paths.introduced(to: Self.peer, at: [Self.record, Self.mapped], by: Self.helper, now: Self.start)
        _ = paths.due(now: Self.start, live: [], silence: .seconds(5), introducers: [])
        do {
            let result = paths.heard(
                Self.peer, boot: 1, packet: 3, from: Self.mapped, now: Self.start + .milliseconds(30));
            #expect(result)
        }
        #expect(paths.state(of: Self.peer) == .punched)
        #expect(paths.address(of: Self.peer, boot: 1) == Self.mapped)
        #expect(paths.punchesSucceeded == 1)
        #expect(paths.nextDeadline == nil, "no more punches")
        // Keepalives on the punched path, one per interval, to the address in use.
        func keepalives(at now: MeshInstant) -> [MemberPaths.Action] {
            paths.due(now: now, live: [Self.peer], silence: .seconds(60), introducers: [])
        }
        #expect(keepalives(at: Self.start + .seconds(1)) == [.punch(Self.peer, to: Self.mapped, isReply: true)])
        #expect(keepalives(at: Self.start + .seconds(20)).isEmpty)
        #expect(keepalives(at: Self.start + .seconds(27)) == [.punch(Self.peer, to: Self.mapped, isReply: true)])
    }

    @Test func anAnswerFromAnAddressNoIntroductionNamedIsNoPunch() {
        var paths = MemberPaths()
        _ = paths.heard(Self.peer, boot: 1, packet: 1, from: Self.record, now: Self.start)
        _ = paths.introduced(to: Self.peer, at: [Self.other], by: Self.helper, now: Self.start + .seconds(1))
        _ = paths.heard(Self.peer, boot: 1, packet: 2, from: Self.record, now: Self.start + .seconds(1))
        #expect(paths.state(of: Self.peer) == .direct)
        #expect(paths.punchesSucceeded == 0)
        #expect(paths.nextDeadline == nil, "the attempt ended: the member answers")
    }

    @Test func aSilentMemberIsIntroducedThroughAnotherWithBackoff() {
        var paths = MemberPaths()
        var now = Self.start
        #expect(
            paths.due(now: now, live: [Self.peer], silence: .seconds(5), introducers: [Self.helper]).isEmpty,
            "just met: not silent yet")
        var requests: [MeshInstant] = []
        for _ in 0..<600 {
            now = now + .milliseconds(100)
            for case let .request(peer, introducer) in paths.due(
                now: now, live: [Self.peer], silence: .seconds(5),
                introducers: [Self.peer, Self.helper])
            {
                #expect(peer == Self.peer && introducer == Self.helper, "never through the silent member itself")
                requests.append(now)
            }
        }
        // 5 s of silence, then again 5, 10 and 20 s later (doubling, to 60 s at most).
        #expect(requests.count == 4, "\(requests)")
        #expect(requests.first == Self.start + .seconds(5))
        // Hearing from it ends the silence.
        _ = paths.heard(Self.peer, boot: 1, packet: 1, from: Self.mapped, now: now)
        #expect(
            paths.due(now: now + .seconds(1), live: [Self.peer], silence: .seconds(5), introducers: [Self.helper])
                .isEmpty)
        // Nobody to ask: we punch what its record gives ourselves (a TURN relay's address among it
        // needs nobody's help), no sooner than an introduction would be asked.
        #expect(
            paths.due(now: now + .seconds(30), live: [Self.peer], silence: .seconds(5), introducers: []) == [
                .punchRecord(Self.peer)
            ])
        #expect(paths.due(now: now + .seconds(31), live: [Self.peer], silence: .seconds(5), introducers: []).isEmpty)
    }

    @Test("a member sending false introductions for a peer does not use up an honest introducer's budget")
    func falseIntroductionsDoNotBlockAnHonestOne() {
        var paths = MemberPaths()
        let liar = NodeID(high: 0, low: 99)
        do {
            let result = paths.introduced(to: Self.peer, at: [Self.other], by: liar, now: Self.start); #expect(result)
        }
        // Its open runs out unanswered.
        var now = Self.start
        for _ in 0..<40 {
            now = now + .milliseconds(100)
            _ = paths.due(now: now, live: [], silence: .seconds(5), introducers: [])
        }
        // Within the liar's five seconds, the honest introducer's introduction is followed.
        do {
            let result = paths.introduced(to: Self.peer, at: [Self.mapped], by: Self.helper, now: now); #expect(result)
        }
        // The liar's next one, inside its own budget's interval, is not.
        do {
            let result = paths.introduced(to: Self.helper, at: [Self.other], by: liar, now: now);
            #expect(result, "another peer: its own budget")
        }
        do {
            let result = paths.introduced(to: Self.peer, at: [Self.other], by: liar, now: now + .seconds(1));
            #expect(!result)
        }
    }

    @Test func punchesAndIntroductionsAreBounded() {
        var paths = MemberPaths()
        let peers = (10..<30).map { NodeID(high: 0, low: UInt64($0)) }
        // One introducer holds at most two opens at once; many together at most eight.
        let accepted = peers.filter { paths.introduced(to: $0, at: [Self.mapped], by: Self.helper, now: Self.start) }
        #expect(accepted.count == paths.settings.maxPunchesPerIntroducer)
        let introducers = (40..<60).map { NodeID(high: 0, low: UInt64($0)) }
        let more = zip(peers.dropFirst(2), introducers).filter { peer, introducer in
            paths.introduced(to: peer, at: [Self.mapped], by: introducer, now: Self.start)
        }
        #expect(accepted.count + more.count == paths.settings.maxPunches)
        do { let result = paths.mayIntroduce(Self.helper, now: Self.start); #expect(result) }
        do { let result = paths.mayIntroduce(Self.helper, now: Self.start + .milliseconds(500)); #expect(!result) }
        do { let result = paths.mayIntroduce(Self.helper, now: Self.start + .seconds(1)); #expect(result) }
    }
}

/// Relays in the path state (`MemberPaths`): when one is chosen, when it is left, and how two
/// members that chose differently meet on one.
@Suite struct MemberPathsRelayTests {
    static let peer = NodeID(high: 0, low: 5)
    static let near = NodeID(high: 0, low: 7)
    static let far = NodeID(high: 0, low: 6)
    static let mapped = PeerAddress(ipv4: [203, 0, 113, 9], port: 40_001)
    static let start = MeshInstant.zero + .seconds(100)
    static let silence = Duration.seconds(5)

    /// A member heard once at `start`, then silent: checks once a second until `until`.
    static func silentMember(until: Duration, relays: [NodeID], paths: inout MemberPaths) -> [MemberPaths.Action] {
        _ = paths.heard(peer, boot: 1, packet: 1, from: mapped, now: start)
        var actions: [MemberPaths.Action] = []
        var now = start
        while now <= start + until {
            actions += paths.due(now: now, live: [peer], silence: silence, introducers: relays, relays: relays)
            now = now + .seconds(1)
        }
        return actions
    }

    @Test func aSilentMemberAnIntroductionDidNotBringBackIsRelayedThroughTheFirstRelay() {
        var paths = MemberPaths()
        let actions = Self.silentMember(until: .seconds(8), relays: [Self.near, Self.far], paths: &paths)
        // Silent at 5 s: an introduction is asked; 2 s later, still silent: relayed.
        #expect(
            actions == [.request(introductionTo: Self.peer, from: Self.near), .relay(Self.peer, through: Self.near)])
        #expect(paths.state(of: Self.peer) == .relayed && paths.relay(of: Self.peer) == Self.near)
        // Its own datagram straight to us ends the relaying.
        _ = paths.heard(Self.peer, boot: 1, packet: 2, from: Self.mapped, now: Self.start + .seconds(9))
        #expect(paths.state(of: Self.peer) == .direct && paths.relay(of: Self.peer) == nil)
    }

    @Test func withNoRelayTheMemberIsUnreachableAndSaidSoOnce() {
        var paths = MemberPaths()
        let actions = Self.silentMember(until: .seconds(30), relays: [], paths: &paths)
        #expect(actions.filter { $0 == .relay(Self.peer, through: nil) }.count == 1)
        #expect(paths.state(of: Self.peer) == .unreachable)
    }

    @Test func aRelayThroughWhichTheMemberStaysSilentIsLeftForTheNext() {
        var paths = MemberPaths()
        _ = Self.silentMember(until: .seconds(8), relays: [Self.near, Self.far], paths: &paths)
        #expect(paths.relay(of: Self.peer) == Self.near)
        var now = Self.start + .seconds(9)
        var moved: [MemberPaths.Action] = []
        while now < Self.start + .seconds(16) {
            moved += paths.due(
                now: now, live: [Self.peer], silence: Self.silence, introducers: [Self.near, Self.far],
                relays: [Self.near, Self.far]
            ).filter { if case .relay = $0 { true } else { false } }
            now = now + .seconds(1)
        }
        #expect(moved == [.relay(Self.peer, through: Self.far)])
        // One that left moves its members at the next check, without waiting for silence.
        paths.relayGone(Self.far, now: now)
        let next = paths.due(
            now: now, live: [Self.peer], silence: Self.silence, introducers: [Self.near], relays: [Self.near])
        #expect(next.contains(.relay(Self.peer, through: nil)), "the near one failed within the minute: none is left")
        #expect(paths.state(of: Self.peer) == .unreachable)
    }

    @Test func twoMembersThatChoseDifferentRelaysMeetOnTheLowerIdsChoice() {
        var paths = MemberPaths()
        _ = Self.silentMember(until: .seconds(8), relays: [Self.near], paths: &paths)
        #expect(paths.relay(of: Self.peer) == Self.near)
        let now = Self.start + .seconds(9)
        // The member reached us through another relay: we follow it only if we are the higher id.
        do {
            let result = paths.heardThroughRelay(
                Self.peer, via: Self.far, boot: 1, packet: 10, follows: false, now: now);
            #expect(!result)
        }
        #expect(paths.relay(of: Self.peer) == Self.near)
        do {
            let result = paths.heardThroughRelay(
                Self.peer, via: Self.far, boot: 1, packet: 11, follows: true, now: now);
            #expect(result)
        }
        #expect(paths.relay(of: Self.peer) == Self.far && paths.state(of: Self.peer) == .relayed)
    }

    @Test func theLowerIdMovesToTheMembersRelayOnceOursBringsNothingBack() {
        var paths = MemberPaths()
        _ = Self.silentMember(until: .seconds(8), relays: [Self.near, Self.far], paths: &paths)
        #expect(paths.relay(of: Self.peer) == Self.near)
        // The member reaches us through `far` (ours drops what it sends us): we do not follow at
        // once (the lower id leads) …
        var now = Self.start + .seconds(9)
        for packet in 10..<20 as Range<UInt64> {
            do {
                let result = paths.heardThroughRelay(
                    Self.peer, via: Self.far, boot: 1, packet: packet, follows: false, now: now);
                #expect(!result)
            }
            now = now + .seconds(1)
        }
        // … but once nothing came back through ours for the silence, we meet it on its relay.
        let actions = paths.due(
            now: now, live: [Self.peer], silence: Self.silence, introducers: [Self.near, Self.far],
            relays: [Self.near, Self.far])
        #expect(actions.contains(.relay(Self.peer, through: Self.far)), "\(actions)")
        #expect(paths.relay(of: Self.peer) == Self.far)
    }

    @Test func aDatagramHeldBackAndDeliveredLateDoesNotMoveThePair() {
        var paths = MemberPaths()
        do {
            let result = paths.heardThroughRelay(
                Self.peer, via: Self.near, boot: 1, packet: 20, follows: true, now: Self.start);
            #expect(result)
        }
        do {
            let result = paths.heardThroughRelay(
                Self.peer, via: Self.far, boot: 1, packet: 15, follows: true, now: Self.start + .seconds(1));
            #expect(!result)
        }
        #expect(paths.relay(of: Self.peer) == Self.near)
        // A new boot numbers from 1 again.
        do {
            let result = paths.heardThroughRelay(
                Self.peer, via: Self.far, boot: 2, packet: 1, follows: true, now: Self.start + .seconds(2));
            #expect(result)
        }
    }

    @Test func aMemberThatReachesUsOnlyThroughARelayIsAnsweredThroughIt() {
        var paths = MemberPaths()
        do {
            let result = paths.heardThroughRelay(
                Self.peer, via: Self.near, boot: 1, packet: 5, follows: false, now: Self.start);
            #expect(result)
        }
        #expect(paths.relay(of: Self.peer) == Self.near)
        // One heard directly just now is not: its own datagrams show the way.
        var direct = MemberPaths()
        _ = direct.heard(Self.peer, boot: 1, packet: 1, from: Self.mapped, now: Self.start)
        do {
            let result = direct.heardThroughRelay(
                Self.peer, via: Self.near, boot: 1, packet: 2, follows: true, now: Self.start + .milliseconds(500));
            #expect(!result)
        }
        #expect(direct.relay(of: Self.peer) == nil)
    }
}
