import MeshCrypto

extension NodeInstance {
    /// Every address we know for a member, one per IP, at most `limit`: where its datagrams
    /// come from, what its record gives, where a punch introduction said it is, and (while
    /// joining) the addresses we join through. A TURN server lets datagrams from these IPs
    /// reach our allocation (its permissions are by IP).
    package func memberAddresses(limit: Int = 64) -> [PeerAddress] {
        var result: [PeerAddress] = []
        var hosts = Set<PeerAddress.Host>()
        func add(_ address: PeerAddress?) {
            guard let address, result.count < limit, !address.isUnspecified, !address.isLoopback,
                hosts.insert(address.host).inserted
            else { return }
            result.append(address)
        }
        for (id, address) in directory.addresses.sorted(by: { $0.key < $1.key }) where id != localID { add(address) }
        for member in members where member.id != localID && !member.status.isGone {
            for address in member.record.addresses { add(address) }
        }
        for punch in links.paths.punching.values {
            for address in punch.candidates { add(address) }
        }
        for address in joinProgress?.addresses ?? [] { add(address) }
        return result
    }
}

extension NodeInstance {
    /// A hello of `sender` came from `source`. Until a pairwise datagram of its own proves where
    /// it is, a member is sent to its record's first address, which may reach nobody (a STUN
    /// address behind a symmetric NAT, a private one): when the hello came from another address
    /// its own signed record gives (a TURN relay's), that one is used instead. Anyone holding
    /// the session's hello key can seal a hello in a member's name, so nothing else is taken
    /// from it: only an address the member itself signed, and only until it is proven or moved.
    mutating func helloFrom(_ sender: NodeID, boot: UInt64, source: PeerAddress, now: MeshInstant) {
        guard sender != localID, directory.addresses[sender] != nil, let member = membership.member(sender),
            member.record.bootID == boot, member.record.addresses.first != source,
            member.record.addresses.contains(source), learnedAddress(of: sender) == nil,
            links.paths.helloFrom(sender, boot: boot, at: source, now: now)
        else { return }
        directory.addresses[sender] = source
        log(
            .info, "member reached where its hello came from, an address its record gives",
            ["member": "\(sender)", "address": "\(source)"])
    }
}
