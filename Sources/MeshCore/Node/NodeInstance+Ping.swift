import MeshCrypto

/// `groupmesh ping`: a round trip over the path a member is reached by, sealed
/// pairwise like everything else between the two (`ping` → `pong` with the same token), timed
/// by the core's clock. Answering one costs a datagram; the member's datagrams are already
/// rate-bounded by the codec's replay window and the flood rules.
extension NodeInstance {
    mutating func ping(_ member: NodeID, request: RequestID, now: MeshInstant) {
        guard member != localID, let address = directory.addresses[member] else {
            return complete(request, .failure(.notReachable(member)))
        }
        var token = random.next()
        if token == Ping.pathCheckToken { token &+= 1 }
        waits.pings[token] = (request, member, address, now)
        sendPairwise([.ping(Ping(token: token))], to: member)
    }

    /// Pairwise `ping` and `pong` frames of a member. A pong goes the usual way to the member;
    /// when we reach it nowhere (we hold it dead), back where its ping came from (`source`, nil
    /// when it came through a relay): a member checking an address of ours after we cut it off.
    /// One ping a datagram is answered: more would multiply the datagrams that go there.
    mutating func receivePings(_ frames: [Frame], from peer: NodeID, source: PeerAddress?, now: MeshInstant) {
        var answered = false
        for frame in frames {
            switch frame {
            case let .ping(ping) where !answered:
                answered = true
                let reached = directory.addresses[peer] != nil || links.paths.relay(of: peer) != nil
                sendPairwise([.pong(Pong(token: ping.token))], to: peer, address: reached ? nil : source)
            case let .pong(pong):
                guard let pending = waits.pings[pong.token], pending.member == peer else { continue }
                waits.pings[pong.token] = nil
                complete(pending.request, .success(.pong(rtt: now - pending.sentAt, address: pending.address)))
            default:
                break
            }
        }
    }

    /// Pings unanswered after `pingTimeout` fail.
    mutating func pingTick(now: MeshInstant) {
        for (token, pending) in waits.pings.sorted(by: { $0.key < $1.key })
        where now >= pending.sentAt + settings.pingTimeout {
            waits.pings[token] = nil
            complete(pending.request, .failure(.pingTimedOut(pending.member)))
        }
    }

    var pingDeadline: MeshInstant? {
        waits.pings.values.map { $0.sentAt + settings.pingTimeout }.min()
    }
}
