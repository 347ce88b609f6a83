import MeshCrypto

/// A push-pull this node started and waits on (PROTOCOL.md §4). Its datagrams are never resent
/// on their own, so the summary goes again, a bounded number of times, until the partner has
/// answered and what its digests showed us lacking has come. One lost datagram of the exchange
/// would otherwise leave a joiner knowing only its door until the next periodic push-pull.
struct AntiEntropyExchange {
    var partner: NodeID
    /// When to look again: to find that what we wanted came, or to send the summary once more.
    var checkAt: MeshInstant
    var resendsLeft: Int
    /// The id ranges of the partner's digests that came for this try: it answered once they
    /// cover the whole id space (a view of more than a datagram comes in several).
    var rangesAnswered: [(lower: NodeID, upper: NodeID?)] = []
    /// What the partner's digests showed it holding newer than we do, by member.
    var wanted: [NodeID: StateDigest.Entry] = [:]

    /// Resends of the summary after the first.
    static let resends = 2

    /// Whether the ranges answered cover every id, from the lowest to the end.
    var answered: Bool {
        var coveredTo: NodeID? = NodeID(high: 0, low: 0)
        for range in rangesAnswered.sorted(by: { $0.lower < $1.lower }) {
            guard let from = coveredTo else { return true }
            guard range.lower <= from else { return false }
            guard let upper = range.upper else { return true }
            coveredTo = max(from, upper)
        }
        return coveredTo == nil
    }
}

extension MembershipInstance {
    /// Sends our summary to `partner` and waits on the exchange (a pending one with another
    /// partner is dropped: the new exchange covers the same view).
    mutating func startExchange(
        with partner: NodeID, address: PeerAddress, now: MeshInstant,
        into out: inout [MembershipDirective]
    ) {
        exchange = AntiEntropyExchange(
            partner: partner, checkAt: now + exchangeWait, resendsLeft: AntiEntropyExchange.resends)
        out.append(summary(to: partner, address: address))
    }

    static var maxRangesKept: Int { 64 }
    static var maxWantedKept: Int { 4 * KeyRotation.maxRoster }

    /// One round trip and some: how long a try waits for the partner's answer, and then for
    /// the records it showed us lacking.
    var exchangeWait: Duration { settings.probeTimeout * 3 }

    /// The partner of the exchange we wait on answered: `agreement` ends it; its digests tell
    /// what to wait for.
    mutating func noteExchangeAnswer(_ digest: StateDigest, from sender: NodeID, now: MeshInstant) {
        guard var pending = exchange, pending.partner == sender, digest.summary == nil else { return }
        if digest.isAgreement {
            exchange = nil
            return
        }
        // The partner chooses how many digests it sends: what one exchange keeps is bounded.
        guard digest.isRequest, pending.rangesAnswered.count < Self.maxRangesKept else { return }
        for entry in digest.entries where entry.member != me.id && !hasCaughtUp(with: entry) {
            guard pending.wanted.count < Self.maxWantedKept else { break }
            pending.wanted[entry.member] = entry
        }
        pending.rangesAnswered.append((digest.lower, digest.upper))
        pending.checkAt = now + exchangeWait
        exchange = pending
    }

    /// At the exchange's check: done once the partner answered and what it showed has come;
    /// otherwise the summary goes again while resends are left.
    mutating func checkExchange(now: MeshInstant, into out: inout [MembershipDirective]) {
        guard var pending = exchange, now >= pending.checkAt else { return }
        if pending.answered, pending.wanted.values.allSatisfy({ hasCaughtUp(with: $0) }) {
            exchange = nil
            return
        }
        guard pending.resendsLeft > 0, let partner = members[pending.partner], !partner.status.isGone,
            let address = partner.address
        else {
            exchange = nil
            return
        }
        pending.resendsLeft -= 1
        pending.rangesAnswered = []
        pending.wanted = [:]
        pending.checkAt = now + exchangeWait
        exchange = pending
        out.append(summary(to: pending.partner, address: address))
    }

    /// Whether we hold what a partner's digest entry shows, or something newer, or cannot take
    /// it (a removed member, a gone one we forgot, a new one with the session full), or will not
    /// be sent it (a departure travels only signed, by gossip: digests never draw one).
    private func hasCaughtUp(with entry: StateDigest.Entry) -> Bool {
        if excluded.contains(entry.member) || entry.status == .left { return true }
        guard let member = members[entry.member] else { return entry.status.isGone || !hasRoomForMember }
        return member.incarnation > entry.incarnation
            || (member.incarnation == entry.incarnation && member.status >= entry.status)
    }
}
