import MeshCore
import MeshCrypto

extension StatusReport {
    /// The gateway's port mapping (PROTOCOL.md §1f): which protocol mapped what and for how
    /// long, or why nothing is mapped.
    public struct PortMappingInfo: Codable, Sendable, Equatable {
        /// `disabled`, `no-gateway`, `not-needed`, `discovering`, `mapped`, `failed` or `stopped`.
        public var state: String
        /// The default gateway asked (IPv4), once there is one.
        public var gateway: String?
        /// `pcp`, `nat-pmp` or `upnp`, while mapped.
        public var `protocol`: String?
        /// Where members outside reach us through the mapping.
        public var externalAddress: String?
        /// False when the mapping is not put in our record (a private external address: double NAT).
        public var advertised: Bool
        /// Seconds the gateway granted (0: a permanent UPnP lease), and left until it runs out;
        /// renewed at half the lifetime.
        public var lifetime: Int?
        public var expiresIn: Double?
        /// Why no mapping is advertised (disabled, no gateway, each protocol's failure, double NAT).
        public var reason: String?
        /// Requests sent to the gateway; answers ignored (another address, garbage, another nonce or
        /// opcode) and refused (a success that cannot be one); mappings made.
        public var requests: UInt64
        public var answersIgnored: UInt64
        public var answersRefused: UInt64
        public var mappingsMade: UInt64

        init(_ core: PortMappingInstance, now: MeshInstant) {
            state = core.phase.rawValue
            gateway = core.gateway.map { PeerAddress(host: .ipv4($0), port: 0).hostString }
            let mapping = core.mapping
            `protocol` = mapping?.mappingProtocol.rawValue
            externalAddress = mapping?.external.description
            advertised = mapping?.advertised ?? false
            lifetime = mapping.map { Int($0.lifetime) }
            expiresIn = mapping?.expires.map { $0 > now ? (($0 - now).milliseconds / 100).rounded() / 10 : 0 }
            reason = core.reason
            requests = core.counters.requests
            answersIgnored = core.counters.answersIgnored
            answersRefused = core.counters.answersRefused
            mappingsMade = core.counters.mappingsMade
        }

        /// Shown by `status` in one line.
        public var line: String {
            switch state {
            case "mapped":
                let how = "\(`protocol` ?? "?") mapped \(externalAddress ?? "?")"
                let life =
                    lifetime == 0
                    ? "permanent lease" : "lifetime \(lifetime ?? 0) s, expires in \(Int(expiresIn ?? 0)) s"
                return "port mapping: \(how) (\(life))" + (advertised ? "" : "; not advertised: \(reason ?? "")")
            case "discovering":
                return "port mapping: asking the gateway \(gateway ?? "")"
            default:
                return "port mapping: none (\(state)): \(reason ?? "")"
            }
        }
    }
}
