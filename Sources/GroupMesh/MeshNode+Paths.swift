#if canImport(Glibc)
    import Glibc
#endif
import MeshCore
import MeshCrypto
import NIOCore

/// The node's side of paths that need a socket of their own or a socket option: LAN discovery's
/// beacon (PROTOCOL.md §1g) and the short-lived first rounds of a punch (§1c).
extension MeshNode {
    /// LAN discovery's sockets, when the node listens on a LAN and may announce itself there.
    func openLANBeacon() async {
        guard configuration.lanDiscovery else { return }
        let interfaces = LANBeacon.lanInterfaces(bound: localAddress)
        let slot = self.slot
        let beacon = await LANBeacon.open(interfaces: interfaces, eventLoop: eventLoop, logger: logger) {
            bytes, source in
            slot.node?.assumeIsolated { $0.lanAnnouncement(bytes, from: source) }
        }
        guard !isClosed else { await beacon?.close(); return }
        lanBeacon = beacon
        if beacon == nil { core.disableLANDiscovery() }
    }

    func lanAnnouncement(_ bytes: [UInt8], from source: PeerAddress) {
        core.receiveLANAnnouncement(bytes, from: source, now: now)
        runEffects()
        rearm()
    }

    /// A datagram with an IP TTL (hop limit) of `hops` (a punch's first rounds): what is queued
    /// leaves first with the usual one, then the socket's TTL is set for this datagram alone and
    /// put back. Not sent at all when it could not leave at once (a full send buffer would hold it
    /// until after the TTL is back, and it would then reach the far router).
    func writeShortLived(_ datagram: ByteBuffer, to address: PeerAddress, hops: UInt8) {
        // Through a TURN allocation it goes to the server, not towards the peer's router: sent
        // as it is (a small TTL would only make it die before the server).
        if routesThroughAllocation(address) { return write(datagram, to: address) }
        // Through a birthday round's socket: its mapping is the path, sent as it is.
        if birthdayRoute(to: address) != nil { return write(datagram, to: address) }
        guard !isClosed, channel.isWritable, let options = channel.syncOptions else { return }
        #if os(Linux)
            let option =
                address.isIPv6 || localAddress.isIPv6
                ? ChannelOptions.Types.SocketOption(
                    level: .init(rawValue: CInt(IPPROTO_IPV6)), name: .init(rawValue: IPV6_UNICAST_HOPS))
                : ChannelOptions.Types.SocketOption(
                    level: .init(rawValue: CInt(IPPROTO_IP)), name: .init(rawValue: IP_TTL))
            channel.flush()
            guard (try? options.setOption(option, value: SocketOptionValue(hops))) != nil else { return }
            write(datagram, to: address)
            channel.flush()
            // -1: the route's default again.
            _ = try? options.setOption(option, value: -1)
        #endif
    }
}
