import MeshCrypto
import NIOCore

/// Relays (PROTOCOL.md §1d): a member we cannot reach on a path of its own gets our
/// datagrams through a member that reaches both, sealed for it with our pair's key before they
/// are wrapped for the relay; and this node carries such datagrams for others (`RelayService`)
/// unless `--no-relay`. Path choice is `MemberPaths`'s; this is the wrapping and unwrapping.
extension NodeInstance {
    /// A datagram sealed for `peer` goes to `relay`, wrapped in a datagram sealed for the relay.
    mutating func sendThroughRelay(_ datagram: ByteBuffer, to peer: NodeID, via relay: NodeID, kind: TrafficKind) {
        guard let address = directory.addresses[relay],
            let outer = keying.codec.seal([.relayForward(RelayedDatagram(peer: peer, datagram: datagram))], to: relay)
        else { return }
        counters.relayedSent += 1
        transmit(outer, to: address, kind: kind)
    }

    /// The relay for what membership sends `member` at `address`: the member's relay, when the
    /// address is one it is known by (else membership means that very address: an earlier boot's).
    func relay(for member: NodeID, meaning address: PeerAddress) -> NodeID? {
        guard let relay = links.paths.relay(of: member) else { return nil }
        let known =
            directory.addresses[member] == address || learnedAddress(of: member) == address
            || membership.member(member)?.record.addresses.contains(address) == true
        return known ? relay : nil
    }

    /// Relay frames in a pairwise datagram `sender` sent us directly (never in a relayed one:
    /// relays do not chain). One forward or delivery per datagram: many small ones in one would
    /// make us send many datagrams for one.
    mutating func receiveRelay(_ frames: [Frame], from sender: NodeID, now: MeshInstant) {
        var carried = false
        for frame in frames {
            switch frame {
            case let .relayForward(forward) where !carried:
                carried = true
                carry(forward, from: sender, now: now)
            case let .relayDelivery(delivery) where !carried:
                carried = true
                receiveRelayed(delivery.datagram, origin: delivery.peer, via: sender, now: now)
            case let .relayRefusal(refusal) where links.paths.relay(of: refusal.peer) == sender:
                log(
                    .info, "relay refused",
                    ["member": "\(refusal.peer)", "relay": "\(sender)", "reason": "\(refusal.reason)"])
                links.paths.relayFailed(sender, for: refusal.peer, now: now)
            default:
                break
            }
        }
    }

    /// `sender` asks us to carry a sealed datagram to `forward.peer`: only between two members,
    /// only to one we reach on a path of our own, within the pair's rate.
    private mutating func carry(_ forward: RelayedDatagram, from sender: NodeID, now: MeshInstant) {
        let target = forward.peer
        let reachable =
            target != sender && target != localID && directory.addresses[target] != nil
            && keying.codec.installedBoot(of: target) != nil
            && links.paths.isDirect(target, within: pathSilence, now: now)
        relayService.observe(ownTransfers, now: now)
        // Charged as what it costs us to send on: the datagram and our wrapping around it.
        let cost = forward.datagram.readableBytes + RelayedDatagram.overhead
        switch relayService.admit(cost, from: sender, to: target, reachable: reachable, now: now) {
        case .forward:
            sendPairwise([.relayDelivery(RelayedDatagram(peer: sender, datagram: forward.datagram))], to: target)
        case .drop:
            break
        case let .refuse(reason, answer):
            // No answer about an id that is no member: a flood of made-up ids gets none.
            if answer, membership.member(target) != nil {
                sendPairwise([.relayRefusal(RelayRefusal(peer: target, reason: reason))], to: sender)
            }
        }
    }

    /// A datagram `origin` sealed for us came through `relay`: opened with the pair's key, it is
    /// taken as the origin's own, except that it proves no address.
    private mutating func receiveRelayed(_ datagram: ByteBuffer, origin: NodeID, via relay: NodeID, now: MeshInstant) {
        guard origin != relay, origin != localID, let address = directory.addresses[origin] else {
            return counters.countDrop(.unknownSender)
        }
        switch keying.codec.open(datagram) {
        case let .success(opened) where opened.header.sender == origin:
            counters.relayedReceived += 1
            route(opened, size: datagram.readableBytes, from: address, via: relay, now: now)
        case .success:
            // The relay named someone else as its origin: its mistake or its lie, not the origin's.
            counters.countDrop(.malformed)
        case let .failure(reason):
            counters.countDrop(reason)
        }
    }

    /// What a member's datagram through `relay` says of the path: the member is heard, and
    /// answered through the same relay when nothing of its own comes straight to us.
    mutating func receivePathsThroughRelay(
        _ frames: [Frame], header: DatagramHeader, via relay: NodeID, now: MeshInstant
    ) {
        let peer = header.sender
        if links.paths.heardThroughRelay(
            peer, via: relay, boot: header.bootID, packet: header.packetNumber,
            follows: localID > peer, now: now)
        {
            log(.info, "path relayed", ["member": "\(peer)", "relay": "\(relay)", "why": "it reached us through it"])
        }
        // Proven for what we send through the relay we use for it: our datagrams to it go there.
        if !directory.unprovenJoiners.isEmpty, links.paths.relay(of: peer) == relay {
            memberProved(peer, boot: header.bootID, now: now)
        }
        receivePathFrames(frames, from: peer, source: nil, via: relay, now: now)
    }

    /// What this node's own transfers sent and received (pieces, wants, path probes; not what it
    /// carried for others): what the relay's budget measures its links by and yields to.
    var ownTransfers: RelayService.OwnTraffic {
        RelayService.OwnTraffic(sent: counters.sent.bytes(.transfer), received: counters.received.bytes(.transfer))
    }

    /// A member left or died: the members it relayed to move to another relay.
    mutating func forgetRelaying(of member: NodeID, now: MeshInstant) {
        let moved = links.paths.relayed(through: member)
        links.paths.relayGone(member, now: now)
        relayService.forget(member)
        if !moved.isEmpty {
            log(
                .info, "relay gone", ["relay": "\(member)", "members": moved.map(\.description).joined(separator: ",")])
            links.checkAt = now
        }
    }
}
