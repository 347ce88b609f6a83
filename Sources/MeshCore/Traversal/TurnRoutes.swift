import MeshCrypto

/// Which datagrams go through our TURN allocation and which go directly. The core never knows:
/// it sends to addresses, and the driver asks this table how.
///
/// Through the allocation: to an address whose datagrams came to us through it recently (it
/// reaches us only there: a peer behind a symmetric NAT, another relayed address), and to any
/// address on the TURN server's IP (a relayed address on our server: its owner may not know our
/// public IP to permit it, but permits the server's). Directly otherwise, and as soon as the
/// address's datagrams come to us directly.
package struct TurnRoutes: Sendable {
    package enum Route: Sendable, Equatable {
        case direct
        case allocation
    }

    /// How long a peer heard only through the allocation stays routed through it.
    package var recent: Duration
    package let capacity: Int
    package let server: PeerAddress
    /// Other servers of ours (a STUN server on the TURN server's IP): always asked directly.
    private let alsoDirect: Set<PeerAddress>
    private var heardThrough: [PeerAddress: MeshInstant] = [:]

    package init(
        server: PeerAddress, alsoDirect: [PeerAddress] = [], recent: Duration = .seconds(120), capacity: Int = 256
    ) {
        self.server = server
        self.alsoDirect = Set(alsoDirect)
        self.recent = recent
        self.capacity = capacity
    }

    /// `allocated`: whether the allocation stands (nothing goes through one that does not).
    package func route(to address: PeerAddress, allocated: Bool, now: MeshInstant) -> Route {
        guard allocated, address != server, !alsoDirect.contains(address) else { return .direct }
        if address.host == server.host { return .allocation }
        if let heard = heardThrough[address], now < heard + recent { return .allocation }
        return .direct
    }

    /// A datagram of `peer` came to us through the allocation.
    package mutating func heardThroughAllocation(_ peer: PeerAddress, now: MeshInstant) {
        if heardThrough[peer] == nil, heardThrough.count >= capacity {
            // The oldest goes: a flood of peers cannot grow the table.
            if let oldest = heardThrough.min(by: { $0.value < $1.value })?.key { heardThrough[oldest] = nil }
        }
        heardThrough[peer] = now
    }

    /// A datagram of `peer` came to us directly: it is reached directly again.
    package mutating func heardDirectly(_ peer: PeerAddress) {
        if !heardThrough.isEmpty { heardThrough[peer] = nil }
    }

    /// The allocation was lost: nothing goes through it.
    package mutating func reset() { heardThrough = [:] }

    package var peersThroughAllocation: Int { heardThrough.count }
}
