import MeshCrypto

/// Address discovery: members tell each other where their datagrams come from
/// (`observedAddress`, pairwise), and each node learns its reflexive address, the NAT in front
/// of it and the candidates its signed record gives (`AddressDiscovery`, `AddressEchoes`).
extension NodeInstance {
    /// A pairwise datagram of `peer`'s boot `boot` arrived from `source`: echo the source when
    /// it is due, and take the observations it carries.
    mutating func receiveAddresses(
        _ frames: [Frame], from peer: NodeID, boot: UInt64, source: PeerAddress,
        now: MeshInstant
    ) {
        for case let .observedAddress(observation) in frames {
            observed(observation.address, by: peer, now: now)
        }
        guard reachability.echoes.isDue(source, from: peer, boot: boot, now: now) else { return }
        // To the source, not to the member's record: behind a NAT the record may name an
        // address nobody outside reaches, and this answer is what teaches the member better.
        // Not an amplifier: it answers an authenticated datagram at least as large, once a second
        // at most, and only the member's pairwise key opens it.
        let known = membership.member(peer)?.record.addresses.contains(source) ?? false
        reachability.echoes.echoed(source, to: peer, boot: boot, known: known, now: now)
        sendPairwise([.observedAddress(ObservedAddress(address: source))], to: peer, address: source)
    }

    private mutating func observed(_ address: PeerAddress, by peer: NodeID, now: MeshInstant) {
        if reachability.discovery.observe(address, by: peer) {
            let candidates = advertiseCandidates()
            log(
                .info, "reflexive address adopted",
                [
                    "address": "\(reachability.discovery.reflexive.map { "\($0)" } ?? "")",
                    "candidates": candidates.map(\.description).joined(separator: ","),
                ])
        }
        reportNAT()
    }

    /// The driver learnt an address of ours outside the session (a gateway's port mapping, a
    /// STUN or TURN server), or lost it (nil): our record says so at the next incarnation.
    package mutating func setExternalAddress(
        _ address: PeerAddress?, from source: AddressDiscovery.ExternalSource,
        now: MeshInstant
    ) {
        guard reachability.discovery.setExternal(address, from: source) else { return }
        let candidates = advertiseCandidates()
        log(
            .info, address == nil ? "external address lost" : "external address learnt",
            [
                "source": source.rawValue, "address": address.map(\.description) ?? "none",
                "candidates": candidates.map(\.description).joined(separator: ","),
            ])
    }

    /// Every address we may be reached at, best first, as many as an invite carries.
    package var inviteCandidates: [PeerAddress] {
        reachability.discovery.candidates(limit: InviteToken.maxAddresses)
    }

    /// Signs our record with the current candidates (the next incarnation, kept across restarts
    /// so a restart outbids it).
    private mutating func advertiseCandidates() -> [PeerAddress] {
        let candidates = reachability.discovery.candidates()
        membership.advertise(candidates)
        if membership.me.incarnation != directory.remembered.incarnation {
            directory.remembered.incarnation = membership.me.incarnation
            directory.rememberedDirty = true
        }
        return candidates
    }

    /// A member gone no longer counts among those that see us, nor is echoed to.
    mutating func forgetAddresses(of peer: NodeID, now: MeshInstant) {
        reachability.discovery.forget(peer)
        reachability.echoes.forget(peer)
        forgetPath(of: peer)
        reportNAT()
    }

    /// Tells the driver (and the log) when the NAT behaviour changes. `unknown` after a verdict
    /// (its observers left) is not news: the last verdict stands until another replaces it.
    private mutating func reportNAT() {
        let behaviour = reachability.discovery.behaviour
        guard behaviour != reachability.reportedNAT, behaviour != .unknown else { return }
        reachability.reportedNAT = behaviour
        emit(.natDetected(behaviour, reflexive: reachability.discovery.reflexive))
        log(
            .notice, "NAT behaviour detected",
            [
                "nat": behaviour.rawValue,
                "reflexive": reachability.discovery.reflexive.map { "\($0)" } ?? "none",
            ])
    }

    /// What the members' observations say of the NAT in front of this node.
    package var natBehaviour: NATBehaviour { reachability.reportedNAT }
}
