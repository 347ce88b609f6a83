import MeshCrypto
import Testing
@testable import MeshCore

/// The STUN client, the TURN allocation and the routing table as pure state machines: a scripted
/// server answers what they send.
@Suite struct TurnAllocationTests {
    static let server = try! PeerAddress(parsing: "198.51.100.10:3478")  // safe: a literal
    static let relayed = try! PeerAddress(parsing: "198.51.100.10:49152")  // safe: a literal
    static let mapped = try! PeerAddress(parsing: "198.51.100.101:40000")  // safe: a literal
    static let peer = try! PeerAddress(parsing: "198.51.100.10:49153")  // safe: a literal
    static let key = StunIntegrity.longTermKey(username: "mesh", realm: "lab", password: "secret")

    static func t(_ milliseconds: Int) -> MeshInstant { MeshInstant(nanoseconds: UInt64(milliseconds) * 1_000_000) }

    static func sent(_ directives: [TurnAllocation.Directive]) -> [StunMessage.Received] {
        directives.compactMap { directive in
            if case let .send(bytes) = directive { return try? StunMessage.decode(bytes) }
            return nil
        }
    }

    /// The server's answer to `request`.
    static func answer(
        _ request: StunMessage, _ messageClass: StunMessage.Class, _ attributes: [StunAttribute],
        key: [UInt8]? = nil
    ) -> [UInt8] {
        StunMessage(
            method: request.method, messageClass: messageClass, transactionID: request.transactionID,
            attributes: attributes
        ).encoded(integrityKey: key, fingerprint: true)
    }

    static func handled(_ inbound: TurnAllocation.Inbound) -> [TurnAllocation.Directive] {
        if case let .handled(directives) = inbound { return directives }
        return []
    }

    /// An allocation taken through the 401 challenge to `allocated`; the CreatePermission it sent.
    static func allocated(now: MeshInstant = .zero) throws -> (TurnAllocation, [StunMessage.Received]) {
        var allocation = TurnAllocation(
            server: server, credentials: .init(username: "mesh", password: "secret"), seed: 7, now: now)
        let first = try #require(sent(allocation.tick(now: now)).first)
        #expect(first.message.method == .allocate && first.message.attributes.contains(.requestedTransport(17)))
        #expect(first.integrityOffset == nil)
        let challenge = answer(
            first.message, .error, [.errorCode(code: 401, reason: "Unauthorized"), .realm("lab"), .nonce("n1")])
        let second = try #require(sent(handled(allocation.unwrap(challenge, now: now))).first)
        #expect(
            second.message.attributes.contains(.username("mesh")) && second.message.realm == "lab"
                && second.message.nonce == "n1")
        #expect(second.hasValidIntegrity(key: key) && second.fingerprintIsValid)
        let success = answer(
            second.message, .success, [.xorRelayedAddress(relayed), .xorMappedAddress(mapped), .lifetime(600)], key: key
        )
        let directives = handled(allocation.unwrap(success, now: now))
        #expect(directives.contains(.allocated(relayed: relayed, mapped: mapped)))
        #expect(allocation.phase == .allocated)
        return (allocation, sent(directives))
    }

    @Test func allocatesThroughThe401ChallengeAndPermitsTheServer() throws {
        let (allocation, permissions) = try Self.allocated()
        let permission = try #require(permissions.first)
        #expect(permission.message.method == .createPermission)
        #expect(permission.message.xorPeerAddress?.host == Self.server.host)
        #expect(allocation.relayed == Self.relayed && allocation.mapped == Self.mapped)
    }

    @Test func wrongCredentialsFailAndAreRetriedLater() throws {
        var allocation = TurnAllocation(
            server: Self.server, credentials: .init(username: "mesh", password: "wrong"), seed: 1, now: .zero)
        let first = try #require(Self.sent(allocation.tick(now: .zero)).first)
        let challenge = Self.answer(
            first.message, .error, [.errorCode(code: 401, reason: "Unauthorized"), .realm("lab"), .nonce("n1")])
        let second = try #require(Self.sent(Self.handled(allocation.unwrap(challenge, now: .zero))).first)
        let refused = Self.answer(
            second.message, .error, [.errorCode(code: 401, reason: "Unauthorized"), .realm("lab"), .nonce("n1")])
        let directives = Self.handled(allocation.unwrap(refused, now: Self.t(10)))
        #expect(directives == [.failed("401 wrong credentials")])
        #expect(allocation.failure == "401 wrong credentials")
        guard case let .waiting(until) = allocation.phase else { Issue.record("phase \(allocation.phase)"); return }
        #expect(until == Self.t(10) + .seconds(5))
        #expect(allocation.tick(now: Self.t(4000)).isEmpty)
        #expect(Self.sent(allocation.tick(now: until)).first?.message.method == .allocate)
    }

    @Test func aStaleNonceIsReplacedAndTheRequestAskedAgainBounded() throws {
        var (allocation, _) = try Self.allocated()
        // The Refresh, due a minute before the 600 s lifetime ends.
        #expect(Self.sent(allocation.tick(now: Self.t(539_000))).allSatisfy { $0.message.method != .refresh })
        var refresh = try #require(
            Self.sent(allocation.tick(now: Self.t(540_000))).first { $0.message.method == .refresh })
        for round in 1...3 {
            let stale = Self.answer(
                refresh.message, .error,
                [.errorCode(code: 438, reason: "Stale Nonce"), .realm("lab"), .nonce("n\(round + 1)")])
            refresh = try #require(Self.sent(Self.handled(allocation.unwrap(stale, now: Self.t(540_000)))).first)
            #expect(refresh.message.nonce == "n\(round + 1)" && refresh.hasValidIntegrity(key: Self.key))
        }
        // A fourth stale nonce in a row is a failure: the allocation is lost and asked for again.
        let stale = Self.answer(
            refresh.message, .error, [.errorCode(code: 438, reason: "Stale Nonce"), .realm("lab"), .nonce("n9")])
        let directives = Self.handled(allocation.unwrap(stale, now: Self.t(540_000)))
        #expect(directives.contains { if case .failed = $0 { true } else { false } })
        #expect(allocation.relayed == nil)
    }

    @Test func refreshKeepsTheAllocationAndReleaseSendsLifetimeZero() throws {
        var (allocation, _) = try Self.allocated()
        let refresh = try #require(
            Self.sent(allocation.tick(now: Self.t(540_000))).first { $0.message.method == .refresh })
        #expect(refresh.message.lifetime == 600)
        let ok = Self.answer(refresh.message, .success, [.lifetime(600)], key: Self.key)
        #expect(Self.handled(allocation.unwrap(ok, now: Self.t(540_100))).isEmpty)
        #expect(allocation.expiresAt == Self.t(540_100) + .seconds(600))
        let release = try #require(Self.sent(allocation.release(now: Self.t(600_000))).first)
        #expect(release.message.method == .refresh && release.message.lifetime == 0)
        #expect(allocation.phase == .releasing)
        let released = Self.answer(release.message, .success, [.lifetime(0)], key: Self.key)
        #expect(Self.handled(allocation.unwrap(released, now: Self.t(600_010))) == [.released])
        #expect(allocation.phase == .released)
    }

    @Test func anAllocationMismatchDeletesTheStaleAllocationThenAllocates() throws {
        var allocation = TurnAllocation(
            server: Self.server, credentials: .init(username: "mesh", password: "secret"), seed: 5, now: .zero)
        let first = try #require(Self.sent(allocation.tick(now: .zero)).first)
        let challenge = Self.answer(
            first.message, .error, [.errorCode(code: 401, reason: "Unauthorized"), .realm("lab"), .nonce("n1")])
        let second = try #require(Self.sent(Self.handled(allocation.unwrap(challenge, now: .zero))).first)
        // The node crashed and restarted on its port: the server still holds an allocation for it.
        let mismatch = Self.answer(second.message, .error, [.errorCode(code: 437, reason: "Allocation Mismatch")])
        let delete = try #require(Self.sent(Self.handled(allocation.unwrap(mismatch, now: Self.t(10)))).first)
        #expect(
            delete.message.method == .refresh && delete.message.lifetime == 0 && delete.hasValidIntegrity(key: Self.key)
        )
        _ = allocation.unwrap(Self.answer(delete.message, .success, [.lifetime(0)], key: Self.key), now: Self.t(20))
        #expect(
            Self.sent(allocation.tick(now: Self.t(1000))).isEmpty, "coturn needs a moment to let the old session go")
        let again = try #require(Self.sent(allocation.tick(now: Self.t(2020))).first)
        #expect(again.message.method == .allocate && again.hasValidIntegrity(key: Self.key))
        // A second mismatch in a row is a failure, tried again later.
        let twice = Self.answer(again.message, .error, [.errorCode(code: 437, reason: "Allocation Mismatch")])
        #expect(Self.handled(allocation.unwrap(twice, now: Self.t(2100))) == [.failed("437 Allocation Mismatch")])
    }

    @Test func retransmitsAreBoundedAndAnUnansweredAllocateFails() throws {
        var allocation = TurnAllocation(
            server: Self.server, credentials: .init(username: "mesh", password: "secret"), seed: 3, now: .zero)
        var sends = Self.sent(allocation.tick(now: .zero)).count
        var failed = false
        var now = 0
        while now < 60_000 && !failed {
            now += 100
            let directives = allocation.tick(now: Self.t(now))
            sends += Self.sent(directives).count
            failed = directives.contains { if case .failed = $0 { true } else { false } }
        }
        #expect(failed && sends == 5, "\(sends) sends, failed \(failed) at \(now) ms")
        // 500 ms, 1, 2, 4, 8 s: given up 15.5 s after the first.
        #expect(now == 15_500)
        #expect(allocation.failure == "no answer from the TURN server")
    }

    @Test func anIdleAllocationSendsKeepalivesThatKeepTheNATMappingToTheServer() throws {
        var (allocation, permissions) = try Self.allocated()
        _ = allocation.unwrap(
            Self.answer(try #require(permissions.first).message, .success, [], key: Self.key), now: .zero)
        #expect(Self.sent(allocation.tick(now: Self.t(14_900))).isEmpty)
        let keepalive = try #require(Self.sent(allocation.tick(now: Self.t(15_000))).first)
        #expect(
            keepalive.message.method == .binding && keepalive.message.messageClass == .indication
                && keepalive.fingerprintIsValid)
        // Traffic through the allocation is keepalive enough.
        let sent = allocation.wrap([1], to: Self.peer, now: Self.t(20_000))
        let wrapped = try #require(sent)
        let bind = try #require(Self.sent(wrapped.directives).first)
        _ = allocation.unwrap(Self.answer(bind.message, .success, [], key: Self.key), now: Self.t(20_000))
        #expect(Self.sent(allocation.tick(now: Self.t(30_000))).allSatisfy { $0.message.method != .binding })
        #expect(Self.sent(allocation.tick(now: Self.t(35_000))).contains { $0.message.method == .binding })
    }

    @Test func garbageWrongTransactionAndWrongIntegrityAreIgnoredAndCounted() throws {
        var (allocation, permissions) = try Self.allocated()
        let permission = try #require(permissions.first)
        _ = allocation.unwrap([0x01, 0x01, 0x00], now: .zero)
        var random = SplitMix64(seed: 99)
        let stranger = StunMessage(
            method: .createPermission, messageClass: .success, transactionID: .init(random: &random))
        _ = allocation.unwrap(stranger.encoded(integrityKey: Self.key, fingerprint: true), now: .zero)
        let forged = Self.answer(permission.message, .success, [], key: Array("not the key".utf8))
        _ = allocation.unwrap(forged, now: .zero)
        #expect(allocation.counters.dropped == 3 && allocation.counters.integrityFailures == 1)
        #expect(allocation.permissionCount == 0)
        // The real answer is still taken.
        _ = allocation.unwrap(Self.answer(permission.message, .success, [], key: Self.key), now: .zero)
        #expect(allocation.permissionCount == 1)
    }

    @Test func permissionsAndChannelsAreRefreshedBeforeTheyExpire() throws {
        var (allocation, permissions) = try Self.allocated()
        _ = allocation.unwrap(
            Self.answer(try #require(permissions.first).message, .success, [], key: Self.key), now: .zero)
        // A member's IP joins the server's.
        allocation.setPermissionTargets([try PeerAddress(parsing: "198.51.100.102:7946")])
        let more = Self.sent(allocation.tick(now: Self.t(1000)))
        #expect(more.count == 1 && more[0].message.xorPeerAddress?.description == "198.51.100.102:7946")
        _ = allocation.unwrap(Self.answer(more[0].message, .success, [], key: Self.key), now: Self.t(1000))
        #expect(allocation.permissionCount == 2)
        // A datagram to a peer: a Send indication, and a ChannelBind asked for.
        let firstSend = allocation.wrap([9, 9, 9], to: Self.peer, now: Self.t(2000))
        let (indication, bind) = try #require(firstSend)
        let sendIndication = try StunMessage.decode(indication).message
        #expect(sendIndication.method == .send && sendIndication.messageClass == .indication)
        #expect(sendIndication.xorPeerAddress == Self.peer && sendIndication.data == [9, 9, 9])
        let channelBind = try #require(Self.sent(bind).first)
        #expect(
            channelBind.message.method == .channelBind
                && channelBind.message.attributes.contains(.channelNumber(0x4000)))
        _ = allocation.unwrap(Self.answer(channelBind.message, .success, [], key: Self.key), now: Self.t(2000))
        #expect(allocation.channelCount == 1)
        // Now ChannelData: 4 bytes of framing.
        let laterSend = allocation.wrap([9, 9, 9], to: Self.peer, now: Self.t(3000))
        let (framed, none) = try #require(laterSend)
        #expect(framed == [0x40, 0x00, 0x00, 0x03, 9, 9, 9] && none.isEmpty)
        // Permissions again after 4 minutes (the bound channel renewed the server IP's at 2 s), the channel after 9 (in use).
        let at4 = Self.sent(allocation.tick(now: Self.t(243_000)))
        #expect(at4.filter { $0.message.method == .createPermission }.count == 1)
        #expect(
            at4.flatMap { $0.message.attributes }.filter { if case .xorPeerAddress = $0 { true } else { false } }.count
                == 2)
        _ = allocation.wrap([1], to: Self.peer, now: Self.t(500_000))
        let at9 = Self.sent(allocation.tick(now: Self.t(543_000)))
        #expect(at9.contains { $0.message.method == .channelBind })
        // ChannelData and Data indications from the server come out as the peer's datagrams.
        #expect(
            allocation.unwrap([0x40, 0x00, 0x00, 0x02, 7, 7], now: Self.t(541_000))
                == .datagram([7, 7], from: Self.peer))
        var random = SplitMix64(seed: 4)
        let data = StunMessage(
            method: .data, messageClass: .indication, transactionID: .init(random: &random),
            attributes: [.xorPeerAddress(Self.peer), .data([5])]
        ).encoded()
        #expect(allocation.unwrap(data, now: Self.t(541_000)) == .datagram([5], from: Self.peer))
        // An unbound channel is dropped.
        #expect(allocation.unwrap([0x40, 0x09, 0x00, 0x01, 7], now: Self.t(541_000)) == .handled([]))
    }

    @Test func stunClientRetransmitsBoundedThenBacksOffAndLearnsTheAddress() throws {
        var client = StunClient(servers: [Self.server], seed: 11, now: .zero)
        var requests: [StunMessage] = []
        var now = 0
        while now <= 7_500 {
            for case let .send(bytes, to) in client.tick(now: Self.t(now)) {
                #expect(to == Self.server)
                requests.append(try StunMessage.decode(bytes).message)
            }
            now += 100
        }
        #expect(requests.count == 4 && client.outcome == .noAnswer)
        #expect(Set(requests.map(\.transactionID)).count == 1)
        // Asked again 10 s after giving up.
        #expect(client.tick(now: Self.t(17_000)).isEmpty)
        let again = client.tick(now: Self.t(17_500))
        guard case let .send(bytes, _)? = again.first else { Issue.record("no new question"); return }
        let request = try StunMessage.decode(bytes).message
        // A wrong transaction id, garbage, and an answer from elsewhere: ignored and counted.
        var random = SplitMix64(seed: 12)
        let wrong = StunMessage(
            method: .binding, messageClass: .success, transactionID: .init(random: &random),
            attributes: [.xorMappedAddress(Self.mapped)]
        ).encoded(fingerprint: true)
        #expect(client.handle(wrong, from: Self.server, now: Self.t(17_600)).isEmpty)
        #expect(client.handle([1, 1, 0, 0], from: Self.server, now: Self.t(17_600)).isEmpty)
        let answer = StunMessage(
            method: .binding, messageClass: .success, transactionID: request.transactionID,
            attributes: [.xorMappedAddress(Self.mapped)]
        ).encoded(fingerprint: true)
        #expect(client.handle(answer, from: Self.peer, now: Self.t(17_600)).isEmpty)
        #expect(client.counters.dropped == 3)
        #expect(client.handle(answer, from: Self.server, now: Self.t(17_600)) == [.learnt(Self.mapped)])
        #expect(client.mapped == Self.mapped && client.outcome == .answered)
        // Asked again a minute later; the same answer is no news.
        #expect(client.tick(now: Self.t(77_599)).isEmpty)
        guard case let .send(next, _)? = client.tick(now: Self.t(77_600)).first else {
            Issue.record("no requery"); return
        }
        let nextID = try StunMessage.decode(next).message.transactionID
        let same = StunMessage(
            method: .binding, messageClass: .success, transactionID: nextID,
            attributes: [.xorMappedAddress(Self.mapped)]
        ).encoded(fingerprint: true)
        #expect(client.handle(same, from: Self.server, now: Self.t(77_700)).isEmpty)
        // A local address change asks again within a second.
        client.localAddressChanged(now: Self.t(80_000))
        #expect(!client.tick(now: Self.t(81_000)).isEmpty)
    }

    @Test func routesGoThroughTheAllocationOnlyWhereTheyMust() throws {
        let stun = try PeerAddress(parsing: "198.51.100.10:3479")
        var routes = TurnRoutes(server: Self.server, alsoDirect: [stun])
        let member = try PeerAddress(parsing: "198.51.100.102:30000")
        let now = Self.t(1000)
        // Nothing goes through an allocation that does not stand.
        #expect(routes.route(to: Self.peer, allocated: false, now: now) == .direct)
        // A relayed address on the server: through it; the server itself and our STUN server: directly.
        #expect(routes.route(to: Self.peer, allocated: true, now: now) == .allocation)
        #expect(routes.route(to: Self.server, allocated: true, now: now) == .direct)
        #expect(routes.route(to: stun, allocated: true, now: now) == .direct)
        // A member heard through the allocation: through it, until it is heard directly, or for 2 minutes.
        #expect(routes.route(to: member, allocated: true, now: now) == .direct)
        routes.heardThroughAllocation(member, now: now)
        #expect(routes.route(to: member, allocated: true, now: now + .seconds(119)) == .allocation)
        #expect(routes.route(to: member, allocated: true, now: now + .seconds(120)) == .direct)
        routes.heardDirectly(member)
        #expect(routes.route(to: member, allocated: true, now: now) == .direct)
        // Bounded: a flood of peers keeps the table at its capacity.
        var small = TurnRoutes(server: Self.server, capacity: 4)
        for port in 1...100 {
            small.heardThroughAllocation(PeerAddress(host: member.host, port: UInt16(port)), now: Self.t(port))
        }
        #expect(small.peersThroughAllocation == 4)
    }
}
