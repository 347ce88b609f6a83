/// What stands between this node and the members that told it where they see it
/// (`AddressDiscovery`), in RFC 4787's terms for the mapping. It decides, later, whether
/// hole punching can work (endpoint-independent) or a relay is needed (symmetric).
package enum NATBehaviour: String, Sendable, Equatable, CaseIterable {
    /// Not enough observations to tell yet.
    case unknown
    /// Members see us at one of our own addresses: no NAT on the way.
    case none
    /// At least two members see us at one public address that is not ours: one mapping for
    /// every destination (Linux `MASQUERADE`, most home routers).
    case endpointIndependent = "endpoint-independent"
    /// Members see us at different public addresses: a new mapping per destination
    /// (`MASQUERADE --random-fully`), which only a relay gets through.
    case symmetric
}
