import MeshCrypto

/// Where this node is, as the members see it: the address each member last said our datagrams
/// came from (`ObservedAddress`), and what follows from them: our reflexive (public) address,
/// the NAT behaviour, and the candidate addresses our signed record gives.
///
/// An observation is one member's claim, and any member could lie or echo an old one. So a
/// reflexive address goes in our record (first: it is where members outside our network reach
/// us) only once `quorum` distinct members report it, and it stays until another address reaches
/// the quorum: one member alone can neither move where everyone sends to us nor take away an
/// address that works. (STUN clients compare two servers for the same reason, RFC 5780.)
package struct AddressDiscovery: Sendable {
    /// Where an address of ours learnt outside the members' observations came from. Each source
    /// holds at most one address; the driver sets and clears it.
    package enum ExternalSource: String, Sendable, CaseIterable, Codable {
        /// A mapping our gateway granted (PCP, NAT-PMP or UPnP IGD): reachable unsolicited.
        case portMapping = "port-mapping"
        /// What a STUN server saw our datagrams come from (one observer: not a quorum, but
        /// the only one when no member sees us yet).
        case stun
        /// A TURN server's relayed transport address: the last resort, it costs the server.
        case turn
    }

    package struct Settings: Sendable, Equatable {
        /// Distinct members that must agree on a reflexive address before it is adopted.
        package var quorum = 2
        /// Members whose observation is kept: memory stays bounded whatever members send.
        package var maxObservers = 256

        package init() {}
    }

    package let settings: Settings
    /// Our own addresses (advertised, interfaces, the bound socket): seen at one of them, a
    /// member reaches us with no NAT between.
    package let local: [PeerAddress]
    /// The latest address each member saw us at.
    package private(set) var observations: [NodeID: PeerAddress] = [:]
    /// The reflexive address adopted, if any.
    package private(set) var reflexive: PeerAddress?
    /// Addresses a gateway, a STUN server or a TURN server gave us (`setExternal`).
    package private(set) var external: [ExternalSource: PeerAddress] = [:]

    package init(local: [PeerAddress], settings: Settings = .init()) {
        self.local = local
        self.settings = settings
    }

    /// `member` saw our datagram come from `address`. True when the adopted reflexive address
    /// changed (our record must say so).
    package mutating func observe(_ address: PeerAddress, by member: NodeID) -> Bool {
        guard observations[member] != nil || observations.count < settings.maxObservers else { return false }
        observations[member] = address
        guard let (agreed, count) = mostReported(), count >= settings.quorum, agreed != reflexive else { return false }
        reflexive = agreed
        return true
    }

    /// A member gone (dead, left, forgotten) no longer counts. The adopted address stays.
    package mutating func forget(_ member: NodeID) {
        observations[member] = nil
    }

    /// What the observations say about the NAT in front of us. One member seeing a public
    /// address tells nothing of the mapping; two that agree mean one mapping for all; two that
    /// disagree (with no quorum for any address) mean a mapping per destination.
    package var behaviour: NATBehaviour {
        let outside = observations.values.filter { !local.contains($0) }
        if outside.isEmpty { return observations.isEmpty ? .unknown : .none }
        if let (_, count) = mostReported(), count >= settings.quorum { return .endpointIndependent }
        return Set(outside).count >= 2 ? .symmetric : .unknown
    }

    /// Sets (or, with nil, clears) the address `source` gave us. True when it changed.
    package mutating func setExternal(_ address: PeerAddress?, from source: ExternalSource) -> Bool {
        guard external[source] != address else { return false }
        external[source] = address
        return true
    }

    /// The addresses our record gives (at most `limit`; an invite takes more), best first:
    /// a gateway's mapping (reachable unsolicited), the reflexive address members agreed on,
    /// what a STUN server saw, our first own address (members on our network), a TURN relay
    /// (it works through anything, at the server's cost), then our other own addresses. Never
    /// the wildcard a socket bound to (0.0.0.0:7946 by default): a peer sent there would send
    /// to itself.
    package func candidates(limit: Int = MemberRecord.maxAddresses) -> [PeerAddress] {
        var ordered: [PeerAddress?] = [
            external[.portMapping], reflexive, external[.stun], local.first(where: { !$0.isUnspecified }),
        ]
        ordered.append(external[.turn])
        ordered += local.map { Optional($0) }
        var result: [PeerAddress] = []
        for case let address? in ordered where !address.isUnspecified && !result.contains(address) {
            result.append(address)
        }
        return Array(result.prefix(limit))
    }

    /// The address outside our network most members report, and by how many (ties: the
    /// smallest address, so every run decides alike).
    private func mostReported() -> (PeerAddress, Int)? {
        var counts: [PeerAddress: Int] = [:]
        for address in observations.values where !local.contains(address) { counts[address, default: 0] += 1 }
        return counts.max { $0.value != $1.value ? $0.value < $1.value : $0.key > $1.key }.map { ($0.key, $0.value) }
    }
}
