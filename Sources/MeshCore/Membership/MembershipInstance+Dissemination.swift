import MeshCrypto

/// Dissemination: gossip rounds piggy-backed on datagrams, state transfers packed into
/// datagrams of the budget.
extension MembershipInstance {
    /// News goes out soon (`newsGossipSpacing` after the last round) rather than at the next
    /// regular round. The number of times each update is sent stays the same; only the first
    /// round comes sooner, so an epidemic's hops cost a network delay each, not half a gossip
    /// interval (joins seen by all sooner).
    mutating func hastenGossip(now: MeshInstant) {
        guard let spacing = settings.newsGossipSpacing, !gossip.isEmpty, !active.isEmpty else { return }
        nextGossipAt = min(nextGossipAt, max(now, lastGossipAt + spacing))
    }

    /// While an update has been sent fewer than two rounds' worth of times, rounds follow each
    /// other at the news spacing. A cascade in which each node tells `fanout` others once misses
    /// about e^-fanout of the nodes (5% with 3), who would wait a whole interval; told twice as
    /// often, it misses e^-2·fanout (0.25%). With fewer members than the fanout every round
    /// reaches them all, so two rounds' worth is counted in the members there are: more would
    /// spend the update's transmissions on them instead of on the probes and acks that carry it
    /// elsewhere. With nobody to gossip to nothing is sent, and the update would stay fresh.
    var freshGossipSpacing: Duration? {
        guard let spacing = settings.newsGossipSpacing, !active.isEmpty,
            gossip.hasUpdates(sentFewerThan: 2 * min(settings.gossipFanout, active.count), toAnyOf: active)
        else { return nil }
        return spacing
    }

    mutating func gossipRound(into out: inout [MembershipDirective]) {
        guard !gossip.isEmpty else { return }
        for target in pickRandom(settings.gossipFanout, excluding: []) {
            guard let address = members[target]?.address else { continue }
            let frames = gossip.take(budget: datagramBudget, limit: retransmitLimit, for: target)
            guard !frames.isEmpty else { continue }
            out.append(.send(frames: frames, recipient: target, address: address))
        }
    }

    /// A datagram of `frames` with as much pending gossip piggybacked as fits.
    /// `frames` with as much gossip as fits beside them, sealed with the hello key or pairwise.
    mutating func send(
        _ frames: [Frame], to recipient: NodeID, address: PeerAddress,
        pairwise: Bool = false, limit: Int? = nil
    ) -> MembershipDirective {
        let used = frames.reduce(0) { $0 + FrameCodec.encodedLength(of: $1) }
        let piggyback = gossip.take(
            budget: min(datagramBudget, limit ?? datagramBudget) - used, limit: retransmitLimit, for: recipient)
        return pairwise
            ? .sendPairwise(frames: frames + piggyback, recipient: recipient, address: address)
            : .send(frames: frames + piggyback, recipient: recipient, address: address)
    }

    var retransmitLimit: Int { settings.retransmitLimit(memberCount: activeCount) }

    /// Our whole view as self-contained datagrams (a joiner's answer): each member's record
    /// travels with its status.
    func stateTransfer(to recipient: NodeID, address: PeerAddress, limit: Int? = nil) -> [MembershipDirective] {
        // The recipient's own entry is included: if we think it dead, it learns so and refutes.
        var groups = [[Frame.alive(me)]]
        if let own = members[recipient] { groups.append(stateFrames(of: own)) }
        // Within a limit, the live members first: a joiner needs one to be in; push-pull brings
        // it the rest once it is (PROTOCOL.md §4).
        let others = members.values.filter { $0.id != recipient }
            .sorted { ($0.status == .alive ? 0 : 1, $0.id) < ($1.status == .alive ? 0 : 1, $1.id) }
        groups += others.map(stateFrames)
        if let limit {
            // One datagram at most, then.
            let limit = min(limit, datagramBudget)
            var used = 0
            groups = Array(
                groups.prefix { group in
                    used += group.reduce(0) { $0 + FrameCodec.encodedLength(of: $1) }
                    return used <= limit
                })
        }
        return packed(groups).map { .send(frames: $0, recipient: recipient, address: address) }
    }

    /// A member's record with what we believe of it; nothing for one that left (a departure is
    /// only believed with its signature, which gossip carries).
    func stateFrames(of member: Member) -> [Frame] {
        let accusation = Accusation(member: member.id, incarnation: member.incarnation, accuser: me.id)
        switch member.status {
        case .alive: return [.alive(member.record)]
        case .suspect: return [.alive(member.record), .suspect(accusation)]
        case .dead: return [.alive(member.record), .dead(accusation)]
        case .left: return []
        }
    }

    /// Groups of frames in as few datagrams as they fit, a group never split.
    func packed(_ groups: [[Frame]]) -> [[Frame]] {
        var datagrams: [[Frame]] = []
        var current: [Frame] = []
        var used = 0
        for group in groups where !group.isEmpty {
            let size = group.reduce(0) { $0 + FrameCodec.encodedLength(of: $1) }
            if used + size > datagramBudget, !current.isEmpty {
                datagrams.append(current)
                current = []
                used = 0
            }
            current += group
            used += size
        }
        if !current.isEmpty { datagrams.append(current) }
        return datagrams
    }
}
