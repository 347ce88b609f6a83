import MeshCrypto

/// Paths to members: every member is sent to where its own authenticated datagrams
/// come from once one did (`MemberPaths`), a member silent towards us is introduced by a member
/// both sides hear, and the introduction starts a simultaneous open (PROTOCOL.md §1c).
extension NodeInstance {
    /// Every pairwise datagram: the path it proves, the observations and punch frames it carries,
    /// and the echo of its source when one is due.
    mutating func receivePaths(_ frames: [Frame], header: DatagramHeader, source: PeerAddress, now: MeshInstant) {
        let peer = header.sender
        if links.paths.heard(peer, boot: header.bootID, packet: header.packetNumber, from: source, now: now),
            directory.addresses[peer] != nil
        {
            directory.addresses[peer] = source
            if links.paths.state(of: peer) == .punched {
                log(.info, "path punched", ["member": "\(peer)", "address": "\(source)"])
            }
        }
        if links.birthday.round != nil { birthdayHeard(peer, from: source) }
        if !directory.unprovenJoiners.isEmpty { memberProved(peer, boot: header.bootID, now: now) }
        receiveAddresses(frames, from: peer, boot: header.bootID, source: source, now: now)
        receivePathFrames(frames, from: peer, source: source, now: now)
    }

    /// Punch frames of a member's datagram that came from `source`, or through a relay (nil;
    /// `via` names it).
    mutating func receivePathFrames(
        _ frames: [Frame], from peer: NodeID, source: PeerAddress?, via relay: NodeID? = nil,
        now: MeshInstant
    ) {
        for frame in frames {
            switch frame {
            case let .punch(punch) where !punch.isReply:
                // To where it came from: that is the hole it made (a relay made none).
                guard let source else { continue }
                sendPairwise([.punch(Punch(token: punch.token, isReply: true))], to: peer, address: source)
            case let .punchRequest(request):
                introduce(peer, to: request.target, now: now)
            case let .punchIntroduction(introduction):
                followIntroduction(introduction, from: peer, now: now)
            case let .birthdayRound(round):
                receiveBirthday(round, from: peer, via: relay, now: now)
            default:
                break
            }
        }
    }

    /// `requester` hears nothing of `target`'s own: tell both where the other is, at once.
    private mutating func introduce(_ requester: NodeID, to target: NodeID, now: MeshInstant) {
        // Only where both reach us on paths of their own: a relayed member's address is not known.
        guard target != requester, target != localID, let targetAddress = directory.addresses[target],
            let requesterAddress = directory.addresses[requester],
            links.paths.isDirect(target, within: pathSilence, now: now),
            links.paths.isDirect(requester, within: pathSilence, now: now),
            links.paths.mayIntroduce(requester, now: now)
        else { return }
        let toRequester = candidates(of: target, inUse: targetAddress)
        let toTarget = candidates(of: requester, inUse: requesterAddress)
        sendPairwise([.punchIntroduction(PunchIntroduction(peer: target, addresses: toRequester))], to: requester)
        sendPairwise([.punchIntroduction(PunchIntroduction(peer: requester, addresses: toTarget))], to: target)
    }

    /// Where we reach a member first, then what its record gives.
    private func candidates(of member: NodeID, inUse: PeerAddress) -> [PeerAddress] {
        var result = [inUse]
        for address in membership.member(member)?.record.addresses ?? [] where !result.contains(address) {
            result.append(address)
        }
        return Array(result.prefix(PunchIntroduction.maxAddresses))
    }

    /// A member told us to meet `introduction.peer`: punch, if it is a live member we hold keys for.
    private mutating func followIntroduction(
        _ introduction: PunchIntroduction, from introducer: NodeID, now: MeshInstant
    ) {
        let peer = introduction.peer
        // Where the introducer sees the peer (first), and what the peer's own signed record says:
        // an introducer cannot make us punch an address of its choosing beyond the first. A member
        // introducing itself (we meet through TURN; it punches us now and asks us to punch back
        // at the same moment) names only addresses its record gives.
        let itself = peer == introducer
        let record = membership.member(peer)?.record.addresses ?? []
        let addresses = introduction.addresses.enumerated().compactMap { index, address in
            !address.isUnspecified && ((index == 0 && !itself) || record.contains(address)) ? address : nil
        }
        let inUse = itself ? directory.addresses[peer] : nil
        guard peer != localID, directory.addresses[peer] != nil, keying.codec.installedBoot(of: peer) != nil,
            links.paths.introduced(
                to: peer, at: addresses.filter { $0 != inUse }, by: introducer, keepingOn: inUse,
                now: now)
        else { return }
        log(
            .info, "punching",
            [
                "member": "\(peer)", "introducer": "\(introducer)",
                "candidates": addresses.map(\.description).joined(separator: ","),
            ])
        pathsTick(now: now, force: true)
    }

    /// Punch rounds, keepalives, and introductions for silent members: the silence checks once a
    /// second, punches when due.
    mutating func pathsTick(now: MeshInstant, force: Bool = false) {
        let checks = now >= links.checkAt
        guard force || checks || (links.paths.nextDeadline.map { now >= $0 } ?? false) else { return }
        var live: [NodeID] = []
        var introducers: [(NodeID, MeshInstant)] = []
        var relays: [(NodeID, Duration)] = []
        if checks {
            links.checkAt = now + .seconds(1)
            let silence = pathSilence
            for id in directory.addresses.keys.sorted() where keying.codec.installedBoot(of: id) != nil {
                live.append(id)
                guard links.paths.isDirect(id, within: silence, now: now), let heard = links.paths.paths[id]?.lastHeard
                else {
                    continue
                }
                introducers.append((id, heard))
                if let member = membership.member(id), member.record.relays {
                    relays.append((id, member.rtt ?? .seconds(1)))
                }
            }
            introducers.sort { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }
            // The closest relay first (membership's latest round trip to it).
            relays.sort { $0.1 != $1.1 ? $0.1 < $1.1 : $0.0 < $1.0 }
        }
        let behindNAT = natBehaviour == .endpointIndependent || natBehaviour == .symmetric
        let actions = links.paths.due(
            now: now, live: live, silence: pathSilence, introducers: introducers.map(\.0),
            relays: relays.map(\.0), behindNAT: behindNAT,
            turnHost: reachability.discovery.external[.turn]?.host)
        for action in actions {
            switch action {
            case let .punch(peer, address, isReply):
                sendPairwise([.punch(Punch(token: random.next(), isReply: isReply))], to: peer, address: address)
            case let .shortPunch(peer, address, hops):
                guard let datagram = keying.codec.seal([.punch(Punch(token: random.next(), isReply: false))], to: peer)
                else {
                    continue
                }
                transmit(datagram, to: address, kind: .membership, hops: hops)
            case let .request(peer, introducer):
                log(.info, "asking for an introduction", ["member": "\(peer)", "introducer": "\(introducer)"])
                sendPairwise([.punchRequest(PunchRequest(target: peer))], to: introducer)
            case let .relay(peer, relay?):
                log(.info, "path relayed", ["member": "\(peer)", "relay": "\(relay)", "why": "no punch reached it"])
            case let .relay(peer, nil):
                log(
                    .warning, "member unreachable: no path of its own and no member relays to it", ["member": "\(peer)"]
                )
            case let .upgrade(peer, inUse):
                // One side leads (the lower id), the other punches when told: a router that takes
                // the first datagram to reach it unasked as a flow to itself lets only a
                // simultaneous open through, and unsynchronized tries would keep that flow alive.
                guard localID < peer else { continue }
                // Its record's addresses but those on the TURN server (ours is the path in use).
                let addresses = (membership.member(peer)?.record.addresses ?? [])
                    .filter { !$0.isUnspecified && $0.host != inUse.host }
                if keying.codec.installedBoot(of: peer) != nil,
                    links.paths.introduced(to: peer, at: addresses, by: localID, keepingOn: inUse, now: now)
                {
                    log(
                        .info, "punching for a direct path: reached through TURN",
                        ["member": "\(peer)", "candidates": addresses.map(\.description).joined(separator: ",")])
                    let ours = membership.me.addresses.filter { !$0.isUnspecified && $0.host != inUse.host }
                    if !ours.isEmpty {
                        sendPairwise([.punchIntroduction(PunchIntroduction(peer: localID, addresses: ours))], to: peer)
                    }
                    pathsTick(now: now, force: true)
                }
            case let .punchRecord(peer):
                let addresses = (membership.member(peer)?.record.addresses ?? []).filter { !$0.isUnspecified }
                if keying.codec.installedBoot(of: peer) != nil,
                    links.paths.introduced(to: peer, at: addresses, by: localID, now: now)
                {
                    log(
                        .info, "punching its record's addresses: nobody to introduce us",
                        ["member": "\(peer)", "candidates": addresses.map(\.description).joined(separator: ",")])
                    pathsTick(now: now, force: true)
                }
            }
        }
    }

    var pathsDeadline: MeshInstant {
        min(links.checkAt, links.paths.nextDeadline ?? links.checkAt)
    }

    /// How long a member may send us nothing of its own before we ask for an introduction: it
    /// answers our probes pairwise, and we probe each member once a round, so a few rounds.
    var pathSilence: Duration {
        max(links.paths.settings.silence, settings.membership.probeInterval * (3 * max(1, membership.activeCount)))
    }

    /// Where the boot of `member` that membership knows sent its datagrams from, if it did.
    func learnedAddress(of member: NodeID) -> PeerAddress? {
        links.paths.address(of: member, boot: membership.member(member)?.record.bootID)
    }

    /// The same, only from the member's pairwise datagrams: what proves an address to answer
    /// more than a datagram's size to (a hello's source is any holder of the secret's claim).
    func pairwiseAddress(of member: NodeID) -> PeerAddress? {
        links.paths.pairwiseAddress(of: member, boot: membership.member(member)?.record.bootID)
    }

    /// Where to send `member` what membership addressed to `address`: where it was heard from,
    /// when `address` is one its record gives (else membership means that very address).
    func provenAddress(of member: NodeID, instead address: PeerAddress) -> PeerAddress? {
        guard membership.member(member)?.record.addresses.contains(address) == true else { return nil }
        return learnedAddress(of: member)
    }

    /// Where we send to `member` now: its relay's address while it is relayed.
    package func pathAddress(of member: NodeID) -> PeerAddress? {
        if let relay = links.paths.relay(of: member) { return directory.addresses[relay] }
        return directory.addresses[member]
    }

    /// A member gone: its path goes with it.
    mutating func forgetPath(of member: NodeID) {
        links.paths.forget(member)
        links.birthday.forget(member)
    }
}
