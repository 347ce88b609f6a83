import MeshCrypto

/// When to tell a member where its datagrams come from (`ObservedAddress`): the first time we
/// hear from its boot, whenever the source changes (a NAT rebinding, a new network), and again
/// every `refresh` while the source is not an address its record gives (the echo may have been
/// lost, and a member behind a NAT needs it). A member whose record names where it is hears
/// from us once per boot, so a mesh without NATs pays almost nothing. At most one echo per
/// `minimumInterval` per member, whatever arrives from where.
package struct AddressEchoes: Sendable {
    package struct Settings: Sendable, Equatable {
        package var refresh: Duration = .seconds(30)
        package var minimumInterval: Duration = .seconds(1)

        package init() {}
    }

    struct Echo: Sendable {
        var address: PeerAddress
        var boot: UInt64
        var at: MeshInstant
        /// The member's record gave the address when we echoed it.
        var known: Bool
    }

    package let settings: Settings
    var echoes: [NodeID: Echo] = [:]

    package init(settings: Settings = .init()) {
        self.settings = settings
    }

    /// Whether a datagram of `member`'s boot `boot` from `address` calls for an echo now. Cheap:
    /// it runs for every pairwise datagram.
    package func isDue(_ address: PeerAddress, from member: NodeID, boot: UInt64, now: MeshInstant) -> Bool {
        guard let last = echoes[member] else { return true }
        guard now >= last.at + settings.minimumInterval else { return false }
        return last.boot != boot || last.address != address || (!last.known && now >= last.at + settings.refresh)
    }

    /// An echo went out; `known`: the member's record gives that address.
    package mutating func echoed(_ address: PeerAddress, to member: NodeID, boot: UInt64, known: Bool, now: MeshInstant)
    {
        echoes[member] = Echo(address: address, boot: boot, at: now, known: known)
    }

    package mutating func forget(_ member: NodeID) {
        echoes[member] = nil
    }
}
