import MeshCrypto
import NIOCore

/// Birthday rounds (PROTOCOL.md §1c): a pair that reaches each other only through a relay or
/// TURN after ordinary punches failed, one side behind a symmetric NAT, tries to meet directly by
/// many mappings on one side and many probed ports on the other (`BirthdayPunching`). The core
/// decides when, with whom and which ports; the driver opens the hard side's sockets
/// (`NodeEffect.openBirthdaySockets`) and routes a member's datagrams through the one that was hit.
extension NodeInstance {
    /// Offers, probes and the end of a round, when due; which members may be offered one is
    /// looked at once a second.
    mutating func birthdayTick(now: MeshInstant) {
        var eligible: [NodeID]?
        if now >= links.birthdayCheckAt {
            links.birthdayCheckAt = now + .seconds(1)
            eligible = birthdayCandidates()
        }
        guard eligible?.isEmpty == false || links.birthday.round != nil else { return }
        let actions = links.birthday.due(now: now, eligible: eligible, random: &random)
        carryOut(actions, now: now)
    }

    /// Members we lead (the lower id offers) that we reach only through a member's relay, or
    /// through our TURN server after a punch for a direct path failed.
    func birthdayCandidates() -> [NodeID] {
        let turnHost = reachability.discovery.external[.turn]?.host
        return directory.addresses.keys.sorted().filter { peer in
            guard localID < peer, keying.codec.installedBoot(of: peer) != nil, let path = links.paths.paths[peer] else {
                return false
            }
            if path.relay != nil { return true }
            guard let turnHost, let learned = path.learned else { return false }
            return learned.host == turnHost && path.punchesFailed > 0
        }
    }

    /// Whether `peer` is reached through a member's relay or at an address on our TURN server.
    func birthdayRelayed(_ peer: NodeID) -> Bool {
        guard let path = links.paths.paths[peer] else { return false }
        if path.relay != nil { return true }
        guard let turnHost = reachability.discovery.external[.turn]?.host, let learned = path.learned else {
            return false
        }
        return learned.host == turnHost
    }

    /// A `BirthdayRound` frame of `peer`'s, directly or through a relay (`via`): the answer goes
    /// back the same way, also before our paths adopted that relay for the member.
    mutating func receiveBirthday(_ frame: BirthdayRound, from peer: NodeID, via relay: NodeID?, now: MeshInstant) {
        guard peer != localID, directory.addresses[peer] != nil || relay != nil,
            keying.codec.installedBoot(of: peer) != nil
        else {
            return
        }
        // An offer only from a member we too reach through a relay or TURN (or that reached us
        // through one): one we reach directly has nothing to gain, and would only make us probe.
        if frame.step == .offer, relay == nil, !birthdayRelayed(peer) { return }
        let actions = links.birthday.receive(
            frame, from: peer, peerLeads: peer < localID, localNAT: natBehaviour, now: now)
        if frame.step == .offer, !actions.isEmpty {
            log(
                .info, "birthday round accepted",
                ["member": "\(peer)", "nat": natBehaviour.rawValue, "theirs": frame.nat.rawValue])
        }
        carryOut(actions, via: relay, now: now)
    }

    /// A datagram of `peer`'s own came straight to us: the round with it, if one runs, worked.
    /// Not one through our TURN server: the driver hands those over as from the member's relayed
    /// address, the path the round is trying to leave.
    mutating func birthdayHeard(_ peer: NodeID, from source: PeerAddress) {
        guard links.birthday.round?.peer == peer, source.host != reachability.discovery.external[.turn]?.host,
            links.birthday.heardDirectly(peer)
        else { return }
        links.paths.birthdayPunched(peer)
        log(.info, "path punched by a birthday round", ["member": "\(peer)", "address": "\(source)"])
    }

    /// Where we say we are, for a round: what a gateway mapped, the reflexive address members
    /// agreed on, what a STUN server saw, then where members see us (one host, behind a
    /// symmetric NAT, at many ports). Never one on our TURN server (our relayed address, which a
    /// member that reaches us through it sees): the round is for a direct path.
    var birthdayAddresses: [PeerAddress] {
        let turnHost = reachability.discovery.external[.turn]?.host
        var result: [PeerAddress] = []
        let seen = reachability.discovery.observations.values.filter { !reachability.discovery.local.contains($0) }
            .sorted()
        let external = reachability.discovery.external
        let ordered = [external[.portMapping], reachability.discovery.reflexive, external[.stun]]
        for case let address? in ordered + seen.map(Optional.some)
        where !address.isUnspecified && address.host != turnHost && !result.contains(address) {
            result.append(address)
        }
        return Array(result.prefix(BirthdayRound.maxAddresses))
    }

    private mutating func carryOut(_ actions: [BirthdayPunching.Action], via relay: NodeID? = nil, now: MeshInstant) {
        for action in actions {
            switch action {
            case let .offer(peer, token):
                log(.info, "birthday round offered", ["member": "\(peer)", "nat": natBehaviour.rawValue])
                sendRound(.offer, token: token, to: peer)
            case let .ready(peer, token):
                sendRound(.ready, token: token, to: peer, via: relay)
            case let .openSockets(peer, target, count, lifetime):
                guard let datagram = keying.codec.seal([.punch(Punch(token: random.next(), isReply: false))], to: peer)
                else {
                    continue
                }
                log(
                    .info, "birthday round: opening sockets towards the member",
                    ["member": "\(peer)", "target": "\(target)", "sockets": "\(count)"])
                counters.datagramsSent += UInt64(count)
                counters.sent.count(.membership, datagrams: count, bytes: datagram.readableBytes * count)
                effects.append(
                    .openBirthdaySockets(
                        BirthdaySockets(
                            peer: peer, target: target, datagram: datagram,
                            hops: links.birthday.settings.hops, count: count,
                            lifetime: lifetime)))
            case let .probe(peer, host, ports):
                // One sealed punch for the whole batch: at most one lands, and a second landing
                // would be a replay.
                guard let datagram = keying.codec.seal([.punch(Punch(token: random.next(), isReply: false))], to: peer)
                else {
                    continue
                }
                if links.birthday.probesSent == 0 {
                    log(.info, "birthday round: probing the member's ports", ["member": "\(peer)"])
                }
                for port in ports {
                    transmit(datagram, to: PeerAddress(host: host, port: port), kind: .membership)
                }
                links.birthday.countProbes(ports.count)
            case let .failed(peer):
                log(.info, "birthday round found no path", ["member": "\(peer)"])
            }
        }
    }

    private mutating func sendRound(
        _ step: BirthdayRound.Step, token: UInt64, to peer: NodeID, via relay: NodeID? = nil
    ) {
        let frame = BirthdayRound(token: token, step: step, nat: natBehaviour, addresses: birthdayAddresses)
        // Alone in its datagram: an older member drops a datagram with a frame it does not know.
        if let relay, links.paths.relay(of: peer) == nil,
            let datagram = keying.codec.seal([.birthdayRound(frame)], to: peer)
        {
            return sendThroughRelay(datagram, to: peer, via: relay, kind: .membership)
        }
        sendPairwise([.birthdayRound(frame)], to: peer)
    }
}
