extension StatusReport {
    /// The STUN and TURN clients (`run --stun`, `run --turn`; PROTOCOL.md §1e).
    public struct TraversalInfo: Codable, Sendable, Equatable {
        public var stun: StunInfo?
        public var turn: TurnInfo?
        /// STUN messages from addresses that are none of our servers: dropped.
        public var strayStunMessages: UInt64
    }

    public struct StunInfo: Codable, Sendable, Equatable {
        /// As given (`HOST:PORT`, with the address a name resolved to).
        public var servers: [String]
        /// Where the server saw our datagrams come from (null until one answered).
        public var address: String?
        public var answeredBy: String?
        /// `asking` (no round ended yet), `answered`, `no answer`, or `error CODE REASON`.
        public var state: String
        public var requestsSent: UInt64
        public var answers: UInt64
        /// Datagrams from the servers that answered nothing we asked (counted, dropped).
        public var dropped: UInt64

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(servers, forKey: .servers)
            try container.encode(address, forKey: .address)
            try container.encode(answeredBy, forKey: .answeredBy)
            try container.encode(state, forKey: .state)
            try container.encode(requestsSent, forKey: .requestsSent)
            try container.encode(answers, forKey: .answers)
            try container.encode(dropped, forKey: .dropped)
        }
    }

    public struct TurnInfo: Codable, Sendable, Equatable {
        public var server: String
        /// `allocating`, `allocated`, `failed` (`reason` says why; tried again later) or `released`.
        public var state: String
        public var reason: String?
        /// The relayed transport address members reach us at (null unless allocated).
        public var relayedAddress: String?
        /// Where the TURN server saw our datagrams come from.
        public var mappedAddress: String?
        /// Seconds until the allocation expires unless refreshed (it is refreshed a minute before).
        public var lifetimeLeft: Double?
        /// IPs permitted to reach us through the allocation, and channels bound.
        public var permissions: Int
        public var channels: Int
        /// Peers whose datagrams came through the allocation lately (sent back through it).
        public var peersThroughAllocation: Int
        /// Members' sealed datagrams through the allocation (payload bytes, without TURN's framing).
        public var datagramsSent: UInt64
        public var bytesSent: UInt64
        public var datagramsReceived: UInt64
        public var bytesReceived: UInt64
        /// Datagrams from the server dropped (garbage, unknown transaction or channel, bad checks).
        public var dropped: UInt64
        public var integrityFailures: UInt64
        public var permissionsRefused: UInt64

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(server, forKey: .server)
            try container.encode(state, forKey: .state)
            try container.encode(reason, forKey: .reason)
            try container.encode(relayedAddress, forKey: .relayedAddress)
            try container.encode(mappedAddress, forKey: .mappedAddress)
            try container.encode(lifetimeLeft, forKey: .lifetimeLeft)
            try container.encode(permissions, forKey: .permissions)
            try container.encode(channels, forKey: .channels)
            try container.encode(peersThroughAllocation, forKey: .peersThroughAllocation)
            try container.encode(datagramsSent, forKey: .datagramsSent)
            try container.encode(bytesSent, forKey: .bytesSent)
            try container.encode(datagramsReceived, forKey: .datagramsReceived)
            try container.encode(bytesReceived, forKey: .bytesReceived)
            try container.encode(dropped, forKey: .dropped)
            try container.encode(integrityFailures, forKey: .integrityFailures)
            try container.encode(permissionsRefused, forKey: .permissionsRefused)
        }
    }
}
