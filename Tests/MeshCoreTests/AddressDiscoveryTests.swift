import MeshCrypto
import Testing
@testable import MeshCore

/// Where members see a node (`AddressDiscovery`), and when a node tells a member where it sees
/// it (`AddressEchoes`).
@Suite struct AddressDiscoveryTests {
    static let own = PeerAddress(ipv4: [192, 168, 1, 5], port: 7946)
    static let reflexive = PeerAddress(ipv4: [203, 0, 113, 9], port: 7946)
    static let otherPort = PeerAddress(ipv4: [203, 0, 113, 9], port: 40_001)
    static let forged = PeerAddress(ipv4: [198, 51, 100, 66], port: 4000)
    static let members = (1...5).map { NodeID(high: 0, low: UInt64($0)) }

    @Test func oneMemberAloneAdoptsNothingTwoThatAgreeDo() {
        var discovery = AddressDiscovery(local: [Self.own])
        #expect(discovery.behaviour == .unknown)
        do { let changed = discovery.observe(Self.reflexive, by: Self.members[0]); #expect(!changed) }
        #expect(discovery.reflexive == nil)
        #expect(discovery.behaviour == .unknown, "one member's word says nothing of the mapping")
        #expect(discovery.candidates() == [Self.own])
        do { let changed = discovery.observe(Self.reflexive, by: Self.members[1]); #expect(changed) }
        #expect(discovery.reflexive == Self.reflexive)
        #expect(discovery.behaviour == .endpointIndependent)
        #expect(
            discovery.candidates() == [Self.reflexive, Self.own], "the public address first: where outsiders reach us")
        do {
            let changed = discovery.observe(Self.reflexive, by: Self.members[2]);
            #expect(!changed, "already adopted: no change to sign")
        }
    }

    @Test func aForgedObservationCannotReplaceTheAdoptedAddress() {
        var discovery = AddressDiscovery(local: [Self.own])
        _ = discovery.observe(Self.reflexive, by: Self.members[0])
        _ = discovery.observe(Self.reflexive, by: Self.members[1])
        // One of them changes its story, again and again: no quorum for anything else.
        for _ in 0..<10 { do { let changed = discovery.observe(Self.forged, by: Self.members[1]); #expect(!changed) } }
        #expect(discovery.reflexive == Self.reflexive)
        #expect(discovery.candidates().first == Self.reflexive)
        // The members that agreed go away: the address stays until another has a quorum.
        discovery.forget(Self.members[0])
        discovery.forget(Self.members[1])
        #expect(discovery.reflexive == Self.reflexive)
        // A real move (a NAT rebinding) is seen by two members and replaces it.
        _ = discovery.observe(Self.otherPort, by: Self.members[2])
        do { let changed = discovery.observe(Self.otherPort, by: Self.members[3]); #expect(changed) }
        #expect(discovery.reflexive == Self.otherPort)
    }

    @Test func theBehaviourFollowsWhatDistinctMembersSee() {
        var none = AddressDiscovery(local: [Self.own])
        _ = none.observe(Self.own, by: Self.members[0])
        #expect(none.behaviour == .none)

        var symmetric = AddressDiscovery(local: [Self.own])
        _ = symmetric.observe(Self.reflexive, by: Self.members[0])
        _ = symmetric.observe(Self.otherPort, by: Self.members[1])
        #expect(symmetric.behaviour == .symmetric)
        #expect(symmetric.reflexive == nil, "no two members agree: nothing adopted")

        // Members inside our own network see our own address; only those outside tell the NAT.
        var mixed = AddressDiscovery(local: [Self.own])
        _ = mixed.observe(Self.own, by: Self.members[0])
        _ = mixed.observe(Self.reflexive, by: Self.members[1])
        #expect(mixed.behaviour == .unknown)
        _ = mixed.observe(Self.reflexive, by: Self.members[2])
        #expect(mixed.behaviour == .endpointIndependent)

        // One member repeating itself is still one member.
        var repeated = AddressDiscovery(local: [Self.own])
        for _ in 0..<5 { _ = repeated.observe(Self.reflexive, by: Self.members[0]) }
        #expect(repeated.reflexive == nil)
    }

    @Test func observersAreBounded() {
        var settings = AddressDiscovery.Settings()
        settings.maxObservers = 3
        var discovery = AddressDiscovery(local: [Self.own], settings: settings)
        for member in Self.members.prefix(3) { _ = discovery.observe(Self.forged, by: member) }
        _ = discovery.observe(Self.reflexive, by: Self.members[3])
        _ = discovery.observe(Self.reflexive, by: Self.members[4])
        #expect(discovery.observations.count == 3)
        #expect(discovery.reflexive == Self.forged)
    }

    @Test(
        "candidates come best first: the gateway's mapping, the members' quorum, STUN, our first own address, TURN, the rest of our own; an invite takes them all"
    )
    func externalAddressesTakeTheirPlaceAmongTheCandidates() {
        let second = PeerAddress(ipv4: [10, 0, 0, 5], port: 7946)
        let mapped = PeerAddress(ipv4: [203, 0, 113, 9], port: 40_500)
        let stun = PeerAddress(ipv4: [203, 0, 113, 9], port: 7946)
        let turn = PeerAddress(ipv4: [198, 51, 100, 3], port: 49_152)
        var discovery = AddressDiscovery(local: [Self.own, second])
        do { let changed = discovery.setExternal(turn, from: .turn); #expect(changed) }
        do { let changed = discovery.setExternal(stun, from: .stun); #expect(changed) }
        do {
            let changed = discovery.setExternal(stun, from: .stun);
            #expect(!changed, "the same address again changes nothing")
        }
        do { let changed = discovery.setExternal(mapped, from: .portMapping); #expect(changed) }
        #expect(discovery.candidates(limit: 16) == [mapped, stun, Self.own, turn, second])
        #expect(discovery.candidates() == [mapped, stun, Self.own, turn], "the record's four")
        // The members agree on the address STUN saw: it is not listed twice.
        _ = discovery.observe(stun, by: Self.members[0])
        _ = discovery.observe(stun, by: Self.members[1])
        #expect(discovery.candidates(limit: 16) == [mapped, stun, Self.own, turn, second])
        do {
            let changed = discovery.setExternal(nil, from: .portMapping);
            #expect(changed, "a mapping deleted or expired")
        }
        #expect(discovery.candidates(limit: 16) == [stun, Self.own, turn, second])
    }

    @Test func candidatesStayWithinTheRecordsLimit() {
        let locals = (1...5).map { PeerAddress(ipv4: [10, 0, 0, UInt8($0)], port: 7946) }
        var discovery = AddressDiscovery(local: locals)
        _ = discovery.observe(Self.reflexive, by: Self.members[0])
        _ = discovery.observe(Self.reflexive, by: Self.members[1])
        #expect(discovery.candidates() == [Self.reflexive] + locals.prefix(3))
    }

    @Test("the wildcard a socket bound to is never a candidate: a peer sent there would send to itself")
    func theWildcardIsNoCandidate() {
        let wildcard = PeerAddress(ipv4: [0, 0, 0, 0], port: 7946)
        var discovery = AddressDiscovery(local: [Self.own, wildcard])
        _ = discovery.observe(Self.reflexive, by: Self.members[0])
        _ = discovery.observe(Self.reflexive, by: Self.members[1])
        #expect(discovery.candidates() == [Self.reflexive, Self.own])
        // Still ours: a member that sees us there says we are not behind a NAT.
        var direct = AddressDiscovery(local: [wildcard])
        _ = direct.observe(wildcard, by: Self.members[0])
        #expect(direct.behaviour == .none)
    }

    // MARK: echoes

    @Test func aMemberIsToldOncePerBootWhenItsRecordNamesWhereItIs() {
        var echoes = AddressEchoes()
        let member = Self.members[0]
        let start = MeshInstant.zero
        #expect(echoes.isDue(Self.own, from: member, boot: 1, now: start))
        echoes.echoed(Self.own, to: member, boot: 1, known: true, now: start)
        #expect(!echoes.isDue(Self.own, from: member, boot: 1, now: start + .seconds(600)))
        #expect(echoes.isDue(Self.own, from: member, boot: 2, now: start + .seconds(600)), "a new boot")
        #expect(echoes.isDue(Self.reflexive, from: member, boot: 1, now: start + .seconds(2)), "a new source")
        #expect(
            !echoes.isDue(Self.reflexive, from: member, boot: 1, now: start + .milliseconds(500)),
            "at most one echo a second")
    }

    @Test func aMemberBehindANATIsToldAgainUntilItsRecordSaysSo() {
        var echoes = AddressEchoes()
        let member = Self.members[0]
        echoes.echoed(Self.reflexive, to: member, boot: 1, known: false, now: .zero)
        #expect(!echoes.isDue(Self.reflexive, from: member, boot: 1, now: .zero + .seconds(29)))
        #expect(echoes.isDue(Self.reflexive, from: member, boot: 1, now: .zero + .seconds(30)))
        echoes.forget(member)
        #expect(echoes.isDue(Self.reflexive, from: member, boot: 1, now: .zero + .seconds(1)))
    }
}
