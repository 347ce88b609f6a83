import MeshCore

/// A NAT box of the simulated network: the router of a home, between its nodes (private
/// addresses, reachable only from inside) and everyone else (its public host, `SimAddress(natHost:)`).
/// What it does is RFC 4787's vocabulary, as Linux conntrack does it:
///
/// - **Mapping**: `endpointIndependent` keeps one public port per inside address whatever the
///   destination (`MASQUERADE`, which also keeps the inside port when it is free);
///   `addressAndPortDependent` takes a new random port per destination (`MASQUERADE
///   --random-fully`: a "symmetric" NAT, which hole punching cannot get through).
/// - **Filtering**: `addressAndPortDependent` lets in only datagrams from an address and port the
///   inside host sent to from that mapping (conntrack's default); `endpointIndependent` lets in
///   anyone's once the mapping exists (a "full cone").
/// - **Timeout**: a mapping, and each destination it lets back in, lives `mappingTimeout` after
///   the last datagram the inside host sent through it; inbound traffic does not refresh it
///   (the stricter case, which keepalives must cover).
///
/// Pure and deterministic: time comes in as `now`, random ports from a generator seeded by the
/// simulation. Expired mappings are removed when they are next looked at.
package struct SimNAT: Sendable {
    package enum Mapping: Sendable, Equatable {
        case endpointIndependent
        case addressAndPortDependent
    }

    package enum Filtering: Sendable, Equatable {
        case endpointIndependent
        case addressAndPortDependent
    }

    package struct Configuration: Sendable, Equatable {
        package var mapping: Mapping
        package var filtering: Filtering
        /// Linux's `nf_conntrack_udp_timeout` is 30 s for a flow that got no answer, 120 s (180 s
        /// on newer kernels) for one that did; home routers often keep less. 30 s by default.
        package var mappingTimeout: Duration
        /// An endpoint-independent mapping keeps the inside port when no other mapping holds it, as
        /// MASQUERADE does; false: a random port, so a mapping made again (after a flush or a
        /// timeout) moves, as on routers that do not preserve ports.
        package var preservesPort: Bool

        package init(
            mapping: Mapping = .endpointIndependent, filtering: Filtering = .addressAndPortDependent,
            mappingTimeout: Duration = .seconds(30), preservesPort: Bool = true
        ) {
            self.mapping = mapping
            self.filtering = filtering
            self.mappingTimeout = mappingTimeout
            self.preservesPort = preservesPort
        }

        /// `iptables -t nat -A POSTROUTING -j MASQUERADE`.
        package static let masquerade = Configuration()
        /// `MASQUERADE --random-fully`: a new random port per destination.
        package static let symmetric = Configuration(mapping: .addressAndPortDependent)
    }

    /// One public port's mapping.
    struct Binding: Sendable {
        var inside: SimAddress
        /// Set for a destination-dependent mapping: the only destination it is for.
        var destination: SimAddress?
        var lastOutbound: MeshInstant
        /// The destinations the inside host sent to through it, and when it last did.
        var permitted: [SimAddress: MeshInstant]
    }

    struct BindingKey: Hashable {
        var inside: SimAddress
        var destination: SimAddress?
    }

    package let number: Int
    package let configuration: Configuration
    var bindings: [UInt16: Binding] = [:]
    var ports: [BindingKey: UInt16] = [:]
    var random: SeededGenerator

    /// Ports a NAT hands out: above the well-known and registered ranges' start, as Linux does.
    static let portRange: ClosedRange<UInt16> = 1024...65535

    package init(number: Int, configuration: Configuration, seed: UInt64) {
        self.number = number
        self.configuration = configuration
        random = SeededGenerator(seed: seed)
    }

    /// The public host's address at `port`.
    package func publicAddress(port: UInt16) -> SimAddress { SimAddress(natHost: number, port: port) }

    /// A datagram from `inside` to `destination` leaves through the NAT: the source it leaves
    /// with. Creates or refreshes the mapping and lets `destination` answer through it.
    package mutating func outbound(from inside: SimAddress, to destination: SimAddress, now: MeshInstant) -> SimAddress
    {
        let key = BindingKey(
            inside: inside,
            destination: configuration.mapping == .endpointIndependent ? nil : destination)
        if let port = ports[key], var binding = live(port, now: now) {
            binding.lastOutbound = now
            binding.permitted[destination] = now
            bindings[port] = binding
            return publicAddress(port: port)
        }
        let port = allocatePort(preferring: inside.port, now: now)
        bindings[port] = Binding(
            inside: inside, destination: key.destination, lastOutbound: now,
            permitted: [destination: now])
        ports[key] = port
        return publicAddress(port: port)
    }

    /// A datagram from `source` reaches the public port `port`: the inside address it is for, or
    /// nil when no live mapping has that port or the filter keeps `source` out.
    package mutating func inbound(from source: SimAddress, toPort port: UInt16, now: MeshInstant) -> SimAddress? {
        guard let binding = live(port, now: now) else { return nil }
        switch configuration.filtering {
        case .endpointIndependent:
            return binding.inside
        case .addressAndPortDependent:
            guard let sentAt = binding.permitted[source], now < sentAt + configuration.mappingTimeout else {
                return nil
            }
            return binding.inside
        }
    }

    /// The inside address a public port maps to, whatever the filter says and without expiring
    /// anything: where a datagram sent to it would go, for the links it crosses on the way.
    package func insideAddress(ofPort port: UInt16) -> SimAddress? {
        bindings[port]?.inside
    }

    /// The live mappings' public ports, ascending.
    package func mappedPorts(now: MeshInstant) -> [UInt16] {
        bindings.filter { now < $0.value.lastOutbound + configuration.mappingTimeout }.keys.sorted()
    }

    /// Forgets every mapping at once, as `conntrack -F` or a router's reboot would.
    package mutating func flush() {
        bindings.removeAll()
        ports.removeAll()
    }

    /// The binding at `port` if it has not timed out; an expired one is removed.
    private mutating func live(_ port: UInt16, now: MeshInstant) -> Binding? {
        guard let binding = bindings[port] else { return nil }
        guard now < binding.lastOutbound + configuration.mappingTimeout else {
            bindings[port] = nil
            ports[BindingKey(inside: binding.inside, destination: binding.destination)] = nil
            return nil
        }
        return binding
    }

    private mutating func isFree(_ port: UInt16, now: MeshInstant) -> Bool {
        live(port, now: now) == nil
    }

    /// MASQUERADE keeps the inside port when no other mapping holds it; `--random-fully` and
    /// a taken port get a random one (the first free one from a random start: always ends).
    private mutating func allocatePort(preferring preferred: UInt16, now: MeshInstant) -> UInt16 {
        if configuration.mapping == .endpointIndependent, configuration.preservesPort,
            Self.portRange.contains(preferred),
            isFree(preferred, now: now)
        {
            return preferred
        }
        let span = Int(Self.portRange.upperBound - Self.portRange.lowerBound) + 1
        let start = Int(random.next(below: UInt64(span)))
        for offset in 0..<span {
            let port = Self.portRange.lowerBound + UInt16((start + offset) % span)
            if isFree(port, now: now) { return port }
        }
        preconditionFailure("NAT \(number) has no free port: more than 64,512 live mappings")
    }
}
