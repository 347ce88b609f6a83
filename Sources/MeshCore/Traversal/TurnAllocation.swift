import MeshCrypto

/// Our allocation on a TURN server (RFC 8656): a relayed transport address on the server that
/// members can reach when nothing else does. Pure: the driver hands it the server's datagrams,
/// ticks and `now`, and sends what it returns to the server from the node's own socket.
///
/// - **Allocate** with REQUESTED-TRANSPORT UDP; the server's 401 names REALM and NONCE; the
///   Allocate again with USERNAME, REALM, NONCE, MESSAGE-INTEGRITY (HMAC-SHA1 under
///   MD5(user:realm:pass)) and FINGERPRINT. Every later request is authenticated the same way;
///   a 438 (stale nonce) takes the new nonce and asks again (at most 3 times in a row).
/// - **Refresh** before the lifetime ends (a minute before, at least halfway); with lifetime 0
///   when the node stops (`release`).
/// - **CreatePermission** for every IP the driver names (members' addresses, and the server's
///   own IP: other allocations on the server reach us from it), refreshed after 4 of their 5
///   minutes; at most 64 IPs, 16 per request.
/// - **ChannelBind** for peers we send to through the allocation (4 bytes of framing instead of
///   a Send indication's 36), refreshed after 9 of their 10 minutes while in use; at most 64.
///
/// Requests are sent again after 500 ms, doubling, 5 tries in all (15.5 s); an Allocate that
/// fails is tried again after 5 s doubling to 5 min. Responses are taken only for an
/// outstanding transaction; a success to an authenticated request only with a valid
/// MESSAGE-INTEGRITY. Anything else the server sends is counted and dropped.
package struct TurnAllocation: Sendable {
    package struct Credentials: Sendable, Equatable {
        package var username: String
        package var password: String
        package init(username: String, password: String) {
            self.username = username
            self.password = password
        }
    }

    package struct Settings: Sendable, Equatable {
        package var initialRTO: Duration = .milliseconds(500)
        package var maxTries = 5
        package var firstRetry: Duration = .seconds(5)
        package var maxRetry: Duration = .seconds(300)
        package var maxStaleNonces = 3
        /// After deleting a stale allocation of our 5-tuple, before allocating again (coturn
        /// lets go of the deleted one's session within a second or two).
        package var afterStaleDeletion: Duration = .seconds(2)
        package var permissionRefresh: Duration = .seconds(240)
        package var channelRefresh: Duration = .seconds(540)
        /// With nothing else sent to the server for this long, a Binding indication goes: the
        /// NAT in front of us keeps the mapping to the server, which is the allocation's 5-tuple
        /// (Linux forgets an idle one after 30 to 120 s; RFC 8489's Binding indication is the keepalive).
        package var keepalive: Duration = .seconds(15)
        /// A channel unused for this long is left to expire.
        package var channelIdle: Duration = .seconds(300)
        /// After a refused ChannelBind or CreatePermission, that peer is not asked again for this long.
        package var refusalHold: Duration = .seconds(60)
        package var maxPermissions = 64
        package var permissionsPerRequest = 16
        package var maxChannels = 64
        package init() {}
    }

    package enum Phase: Sendable, Equatable {
        /// No allocation; the next Allocate goes out at `until`.
        case waiting(until: MeshInstant)
        case allocating
        case allocated
        /// A Refresh with lifetime 0 is out.
        case releasing
        case released
    }

    package enum Directive: Sendable, Equatable {
        /// Send these bytes to the server.
        case send([UInt8])
        /// The allocation stands: its relayed address, and where the server saw us.
        case allocated(relayed: PeerAddress, mapped: PeerAddress?)
        /// The allocation failed or was lost (a sentence for the log and `status`).
        case failed(String)
        case released
    }

    /// A datagram the server sent, unwrapped.
    package enum Inbound: Sendable, Equatable {
        /// A peer's datagram, relayed (a Data indication or ChannelData).
        case datagram([UInt8], from: PeerAddress)
        /// A response (or nothing of use): what to do about it.
        case handled([Directive])
    }

    package struct Counters: Sendable, Equatable {
        package var requestsSent: UInt64 = 0
        /// Datagrams from the server dropped: garbage, unknown transaction, bad integrity or
        /// fingerprint, an unknown channel.
        package var dropped: UInt64 = 0
        package var integrityFailures: UInt64 = 0
        package var datagramsSent: UInt64 = 0
        package var bytesSent: UInt64 = 0
        package var datagramsReceived: UInt64 = 0
        package var bytesReceived: UInt64 = 0
        package var permissionsRefused: UInt64 = 0
    }

    enum Request: Sendable, Equatable {
        case allocate
        /// A Refresh with lifetime 0 for an allocation of our 5-tuple we no longer hold (a
        /// restart on the same port after a crash): the server answered 437 to our Allocate.
        case deleteStale
        case refresh(lifetime: UInt32)
        case createPermission([PeerAddress])
        case channelBind(channel: UInt16, peer: PeerAddress)
    }

    struct Transaction: Sendable {
        var request: Request
        var bytes: [UInt8]
        var authenticated: Bool
        var tries: Int
        var nextTry: MeshInstant
        var rto: Duration
        var staleNonces: Int
    }

    struct Channel: Sendable, Equatable {
        var number: UInt16
        var confirmed: Bool
        var boundAt: MeshInstant
        var lastUsed: MeshInstant
    }

    package let server: PeerAddress
    package let settings: Settings
    private let credentials: Credentials
    package private(set) var phase: Phase
    /// Why the last Allocate failed or the allocation was lost, until the next one stands.
    package private(set) var failure: String?
    package private(set) var relayed: PeerAddress?
    package private(set) var mapped: PeerAddress?
    package private(set) var expiresAt: MeshInstant?
    package private(set) var counters = Counters()
    private var refreshAt: MeshInstant?
    /// When we last sent the server anything (keepalives fill the silences).
    private var lastSent: MeshInstant = .zero
    private var realm: String?
    private var nonce: String?
    private var key: [UInt8]?
    private var transactions: [StunMessage.TransactionID: Transaction] = [:]
    private var failures = 0
    /// A 437 was answered by deleting the stale allocation once since the last one stood.
    private var deletedStale = false
    /// IPs the driver wants permitted (by host), and when each was last installed.
    private var wanted: [PeerAddress.Host: PeerAddress] = [:]
    private var permitted: [PeerAddress.Host: MeshInstant] = [:]
    private var refusedUntil: [PeerAddress.Host: MeshInstant] = [:]
    private var channels: [PeerAddress: Channel] = [:]
    private var nextChannel: UInt16 = ChannelData.validChannels.lowerBound
    private var random: SplitMix64

    package init(
        server: PeerAddress, credentials: Credentials, settings: Settings = .init(), seed: UInt64, now: MeshInstant
    ) {
        self.server = server
        self.credentials = credentials
        self.settings = settings
        random = SplitMix64(seed: seed)
        phase = .waiting(until: now)
        wanted[server.host] = server
    }

    package var permissionCount: Int { permitted.count }
    package var channelCount: Int { channels.values.filter(\.confirmed).count }

    /// The IPs to permit besides the server's own (the driver's view of where members are).
    package mutating func setPermissionTargets(_ addresses: some Sequence<PeerAddress>) {
        var next: [PeerAddress.Host: PeerAddress] = [server.host: server]
        for address in addresses where next.count < settings.maxPermissions && address.isIPv6 == server.isIPv6 {
            if next[address.host] == nil { next[address.host] = address }
        }
        wanted = next
        permitted = permitted.filter { next[$0.key] != nil }
    }

    package func isPermitted(_ address: PeerAddress) -> Bool { permitted[address.host] != nil }

    // MARK: ticks

    package mutating func tick(now: MeshInstant) -> [Directive] {
        var directives: [Directive] = []
        retransmit(now: now, into: &directives)
        switch phase {
        case let .waiting(until) where now >= until:
            phase = .allocating
            send(.allocate, now: now, into: &directives)
        case .allocated:
            if let expiresAt, now >= expiresAt {
                lose("the allocation expired", now: now, into: &directives)
                return directives
            }
            if let refreshAt, now >= refreshAt, !isPending(where: { if case .refresh = $0 { true } else { false } }) {
                self.refreshAt = nil
                send(.refresh(lifetime: 600), now: now, into: &directives)
            }
            maintainPermissions(now: now, into: &directives)
            maintainChannels(now: now, into: &directives)
            if now >= lastSent + settings.keepalive {
                lastSent = now
                let indication = StunMessage(
                    method: .binding, messageClass: .indication,
                    transactionID: .init(random: &random)
                ).encoded(fingerprint: true)
                directives.append(.send(indication))
            }
        default:
            break
        }
        return directives
    }

    /// Releases the allocation (Refresh with lifetime 0); `released` once the server answered,
    /// or the tries ran out.
    package mutating func release(now: MeshInstant) -> [Directive] {
        guard phase == .allocated else {
            phase = .released
            transactions = [:]
            return []
        }
        phase = .releasing
        transactions = [:]
        var directives: [Directive] = []
        send(.refresh(lifetime: 0), now: now, into: &directives)
        return directives
    }

    private mutating func retransmit(now: MeshInstant, into directives: inout [Directive]) {
        for (id, var transaction) in transactions where now >= transaction.nextTry {
            // A give-up earlier in this loop may have lost the allocation (and every transaction
            // with it): what the copy still holds belongs to it, not to the next one.
            guard transactions[id] != nil else { continue }
            guard transaction.tries < settings.maxTries else {
                transactions[id] = nil
                gaveUp(on: transaction.request, now: now, into: &directives)
                continue
            }
            transaction.tries += 1
            transaction.rto = transaction.rto * 2
            transaction.nextTry = now + transaction.rto
            transactions[id] = transaction
            counters.requestsSent += 1
            lastSent = now
            directives.append(.send(transaction.bytes))
        }
    }

    private mutating func gaveUp(on request: Request, now: MeshInstant, into directives: inout [Directive]) {
        switch request {
        case .allocate:
            fail("no answer from the TURN server", now: now, into: &directives)
        case .deleteStale:
            fail("437 allocation mismatch, and no answer to deleting it", now: now, into: &directives)
        case .refresh(lifetime: 0):
            phase = .released
            directives.append(.released)
        case .refresh:
            lose("no answer to Refresh", now: now, into: &directives)
        case let .createPermission(peers):
            for peer in peers { permitted[peer.host] = nil }
        case let .channelBind(number, peer):
            // Only the channel this request bound: a newer one for the peer stays.
            if channels[peer]?.number == number { channels[peer] = nil }
        }
    }

    private func isPending(where matches: (Request) -> Bool) -> Bool {
        transactions.values.contains { matches($0.request) }
    }

    private mutating func maintainPermissions(now: MeshInstant, into directives: inout [Directive]) {
        let pending = Set(
            transactions.values.flatMap { transaction -> [PeerAddress.Host] in
                if case let .createPermission(peers) = transaction.request { return peers.map(\.host) }
                return []
            })
        let due = wanted.values.sorted().filter { address in
            guard !pending.contains(address.host) else { return false }
            if let until = refusedUntil[address.host], now < until { return false }
            guard let installed = permitted[address.host] else { return true }
            return now >= installed + settings.permissionRefresh
        }
        var rest = due[...]
        while !rest.isEmpty {
            let batch = Array(rest.prefix(settings.permissionsPerRequest))
            rest = rest.dropFirst(batch.count)
            send(.createPermission(batch), now: now, into: &directives)
        }
    }

    private mutating func maintainChannels(now: MeshInstant, into directives: inout [Directive]) {
        for (peer, channel) in channels where channel.confirmed && now >= channel.boundAt + settings.channelRefresh {
            if now >= channel.lastUsed + settings.channelIdle {
                channels[peer] = nil
                continue
            }
            guard !isPending(where: { $0 == .channelBind(channel: channel.number, peer: peer) }) else { continue }
            send(.channelBind(channel: channel.number, peer: peer), now: now, into: &directives)
        }
    }

    // MARK: requests

    private mutating func send(_ request: Request, now: MeshInstant, into directives: inout [Directive]) {
        send(request, now: now, staleNonces: 0, into: &directives)
    }

    private mutating func send(
        _ request: Request, now: MeshInstant, staleNonces: Int, into directives: inout [Directive]
    ) {
        let id = StunMessage.TransactionID(random: &random)
        var attributes: [StunAttribute]
        let method: StunMessage.Method
        switch request {
        case .allocate:
            method = .allocate
            attributes = [.requestedTransport(17)]
        case .deleteStale:
            method = .refresh
            attributes = [.lifetime(0)]
        case let .refresh(lifetime):
            method = .refresh
            attributes = [.lifetime(lifetime)]
        case let .createPermission(peers):
            method = .createPermission
            attributes = peers.map { .xorPeerAddress($0) }
        case let .channelBind(channel, peer):
            method = .channelBind
            attributes = [.channelNumber(channel), .xorPeerAddress(peer)]
        }
        let authenticated = key != nil
        if let realm, let nonce {
            attributes += [.username(credentials.username), .realm(realm), .nonce(nonce)]
        }
        let bytes = StunMessage(method: method, messageClass: .request, transactionID: id, attributes: attributes)
            .encoded(integrityKey: key, fingerprint: true)
        transactions[id] = Transaction(
            request: request, bytes: bytes, authenticated: authenticated, tries: 1,
            nextTry: now + settings.initialRTO, rto: settings.initialRTO, staleNonces: staleNonces)
        counters.requestsSent += 1
        lastSent = now
        directives.append(.send(bytes))
    }

    // MARK: the data path

    /// How `payload` for `peer` goes to the server: ChannelData on a bound channel, else a Send
    /// indication (and a ChannelBind asked for, so the next ones are smaller). Nil unless allocated.
    package mutating func wrap(
        _ payload: [UInt8], to peer: PeerAddress, now: MeshInstant
    ) -> (bytes: [UInt8], directives: [Directive])? {
        guard phase == .allocated else { return nil }
        lastSent = now
        counters.datagramsSent += 1
        counters.bytesSent += UInt64(payload.count)
        var directives: [Directive] = []
        if var channel = channels[peer] {
            channel.lastUsed = now
            channels[peer] = channel
            if channel.confirmed {
                return (ChannelData(channel: channel.number, payload: payload).encoded(), [])
            }
        } else if channels.count < settings.maxChannels, nextChannel <= ChannelData.validChannels.upperBound,
            refusedUntil[peer.host].map({ now >= $0 }) ?? true
        {
            channels[peer] = Channel(number: nextChannel, confirmed: false, boundAt: now, lastUsed: now)
            send(.channelBind(channel: nextChannel, peer: peer), now: now, into: &directives)
            nextChannel += 1
        }
        let id = StunMessage.TransactionID(random: &random)
        let indication = StunMessage(
            method: .send, messageClass: .indication, transactionID: id,
            attributes: [.xorPeerAddress(peer), .data(payload)])
        return (indication.encoded(), directives)
    }

    /// A datagram from the server (the driver checked its source).
    package mutating func unwrap(_ bytes: [UInt8], now: MeshInstant) -> Inbound {
        guard let first = bytes.first else {
            counters.dropped += 1
            return .handled([])
        }
        if ChannelData.looksLikeChannelData(first) {
            guard let framed = try? ChannelData.decode(bytes),
                let peer = channels.first(where: { $0.value.number == framed.channel })?.key
            else {
                counters.dropped += 1
                return .handled([])
            }
            counters.datagramsReceived += 1
            counters.bytesReceived += UInt64(framed.payload.count)
            return .datagram(framed.payload, from: peer)
        }
        guard let received = try? StunMessage.decode(bytes), received.fingerprintIsValid else {
            counters.dropped += 1
            return .handled([])
        }
        let message = received.message
        if message.messageClass == .indication, message.method == .data {
            guard phase == .allocated, let peer = message.xorPeerAddress, let data = message.data else {
                counters.dropped += 1
                return .handled([])
            }
            counters.datagramsReceived += 1
            counters.bytesReceived += UInt64(data.count)
            return .datagram(data, from: peer)
        }
        return .handled(handleResponse(received, now: now))
    }

    private mutating func handleResponse(_ received: StunMessage.Received, now: MeshInstant) -> [Directive] {
        let message = received.message
        guard message.messageClass == .success || message.messageClass == .error,
            let transaction = transactions[message.transactionID], received.unknownRequired.isEmpty
        else {
            counters.dropped += 1
            return []
        }
        var directives: [Directive] = []
        if message.messageClass == .success {
            if transaction.authenticated {
                guard let key, received.hasValidIntegrity(key: key) else {
                    counters.integrityFailures += 1
                    counters.dropped += 1
                    return []
                }
            }
            transactions[message.transactionID] = nil
            succeeded(transaction.request, message, now: now, into: &directives)
            return directives
        }
        transactions[message.transactionID] = nil
        let error = message.errorCode ?? (code: 0, reason: "")
        switch error.code {
        case 401 where !transaction.authenticated || message.nonce != nonce || message.realm != realm:
            // The challenge (or a new realm): answer it once with our credentials.
            guard let realm = message.realm, let nonce = message.nonce, !realm.isEmpty else {
                failedRequest(transaction.request, "401 without REALM and NONCE", now: now, into: &directives)
                return directives
            }
            self.realm = realm
            self.nonce = nonce
            key = StunIntegrity.longTermKey(
                username: credentials.username, realm: realm, password: credentials.password)
            if transaction.authenticated {
                failedRequest(transaction.request, "401 wrong credentials", now: now, into: &directives)
            } else {
                send(transaction.request, now: now, into: &directives)
            }
        case 438 where transaction.staleNonces < settings.maxStaleNonces:
            if let nonce = message.nonce { self.nonce = nonce }
            if let realm = message.realm, realm != self.realm {
                self.realm = realm
                key = StunIntegrity.longTermKey(
                    username: credentials.username, realm: realm, password: credentials.password)
            }
            send(transaction.request, now: now, staleNonces: transaction.staleNonces + 1, into: &directives)
        case 401:
            failedRequest(transaction.request, "401 wrong credentials", now: now, into: &directives)
        case 437 where transaction.request == .allocate && !deletedStale:
            // Our 5-tuple still holds an allocation we lost track of: delete it, then allocate.
            deletedStale = true
            send(.deleteStale, now: now, into: &directives)
        default:
            let reason = error.reason.isEmpty ? "" : " \(error.reason)"
            failedRequest(transaction.request, "\(error.code)\(reason)", now: now, into: &directives)
        }
        return directives
    }

    private mutating func succeeded(
        _ request: Request, _ message: StunMessage, now: MeshInstant,
        into directives: inout [Directive]
    ) {
        switch request {
        case .allocate:
            guard phase == .allocating, let relayed = message.xorRelayedAddress else {
                if phase == .allocating {
                    fail("the Allocate's answer has no relayed address", now: now, into: &directives)
                }
                return
            }
            let lifetime = Duration.seconds(Int(message.lifetime ?? 600))
            self.relayed = relayed
            mapped = message.xorMappedAddress
            phase = .allocated
            failure = nil
            failures = 0
            deletedStale = false
            scheduleRefresh(lifetime: lifetime, now: now)
            directives.append(.allocated(relayed: relayed, mapped: mapped))
            maintainPermissions(now: now, into: &directives)
        case .deleteStale:
            if phase == .allocating { phase = .waiting(until: now + settings.afterStaleDeletion) }
        case .refresh(lifetime: 0):
            phase = .released
            directives.append(.released)
        case .refresh:
            guard phase == .allocated else { return }
            scheduleRefresh(lifetime: .seconds(Int(message.lifetime ?? 600)), now: now)
        case let .createPermission(peers):
            for peer in peers where wanted[peer.host] != nil { permitted[peer.host] = now }
        case let .channelBind(number, peer):
            guard var channel = channels[peer], channel.number == number else { return }
            channel.confirmed = true
            channel.boundAt = now
            channels[peer] = channel
            // A bound channel permits its peer's IP too (§12).
            if wanted[peer.host] != nil { permitted[peer.host] = now }
        }
    }

    private mutating func failedRequest(
        _ request: Request, _ reason: String, now: MeshInstant,
        into directives: inout [Directive]
    ) {
        switch request {
        case .allocate, .deleteStale:
            fail(reason, now: now, into: &directives)
        case .refresh(lifetime: 0):
            phase = .released
            directives.append(.released)
        case .refresh:
            lose("Refresh refused: \(reason)", now: now, into: &directives)
        case let .createPermission(peers):
            counters.permissionsRefused += UInt64(peers.count)
            for peer in peers {
                permitted[peer.host] = nil
                refusedUntil[peer.host] = now + settings.refusalHold
            }
        case let .channelBind(number, peer):
            if channels[peer]?.number == number { channels[peer] = nil }
            refusedUntil[peer.host] = now + settings.refusalHold
        }
        if refusedUntil.count > 4 * settings.maxPermissions { refusedUntil = refusedUntil.filter { now < $0.value } }
    }

    private mutating func scheduleRefresh(lifetime: Duration, now: MeshInstant) {
        let clamped = max(lifetime, .seconds(30))
        expiresAt = now + clamped
        // A minute before it ends, and at least halfway: a lost Refresh has time to be retried.
        refreshAt = now + max(clamped - .seconds(60), clamped * 0.5)
    }

    private mutating func fail(_ reason: String, now: MeshInstant, into directives: inout [Directive]) {
        failures += 1
        failure = reason
        let exponent = min(failures - 1, 10)
        phase = .waiting(until: now + min(settings.firstRetry * Double(1 << exponent), settings.maxRetry))
        directives.append(.failed(reason))
    }

    /// The allocation is gone: everything on it too. A new one is asked for.
    private mutating func lose(_ reason: String, now: MeshInstant, into directives: inout [Directive]) {
        relayed = nil
        expiresAt = nil
        refreshAt = nil
        permitted = [:]
        channels = [:]
        nextChannel = ChannelData.validChannels.lowerBound
        transactions = [:]
        fail(reason, now: now, into: &directives)
    }
}
