import MeshCrypto

extension NodeInstance {
    /// Every address we know for a member, one per IP, at most `limit`: where its datagrams
    /// come from, what its record gives, where a punch introduction said it is, and (while
    /// joining) the addresses we join through. A TURN server lets datagrams from these IPs
    /// reach our allocation (its permissions are by IP).
    public func memberAddresses(limit: Int = 64) -> [PeerAddress] {
        var result: [PeerAddress] = []
        var hosts = Set<PeerAddress.Host>()
        func add(_ address: PeerAddress?) {
            guard let address, result.count < limit, !address.isUnspecified, !address.isLoopback,
                  hosts.insert(address.host).inserted else { return }
            result.append(address)
        }
        for (id, address) in peerAddresses.sorted(by: { $0.key < $1.key }) where id != localID { add(address) }
        for member in members where member.id != localID && !member.status.isGone {
            for address in member.record.addresses { add(address) }
        }
        for punch in paths.punching.values {
            for address in punch.candidates { add(address) }
        }
        for address in joinProgress?.addresses ?? [] { add(address) }
        return result
    }
}
