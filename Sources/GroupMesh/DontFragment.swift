#if canImport(Glibc)
    import Glibc
#endif
import NIOCore

/// Path MTU probes must arrive whole or not at all. Linux's default for UDP fragments a
/// datagram larger than the MTU it knows for the route, so a 9 KB probe over Ethernet would
/// arrive in fragments and "prove" a size that then costs every piece a reassembly (and is lost
/// whole with any fragment). With the don't-fragment bit set and the kernel's own estimate set
/// aside (`IP_PMTUDISC_PROBE`), a datagram too large for the path is dropped on the way, or
/// refused at once (EMSGSIZE, a write error NIO counts and survives), and the probe fails as
/// it should (PathMTUDiscovery).
///
/// Returns whether it could: where it cannot, the node probes no path (a probe that passed in
/// fragments would prove a size that every piece then pays for).
enum DontFragment {
    static func apply(to channel: any Channel, ipv6: Bool) async -> Bool {
        #if os(Linux)
            let ipLevel = NIOBSDSocket.OptionLevel(rawValue: CInt(IPPROTO_IP))
            let ipv6Level = NIOBSDSocket.OptionLevel(rawValue: CInt(IPPROTO_IPV6))
            do {
                if ipv6 {
                    try await channel.setOption(
                        ChannelOptions.Types.SocketOption(level: ipv6Level, name: .init(rawValue: IPV6_MTU_DISCOVER)),
                        value: SocketOptionValue(IPV6_PMTUDISC_PROBE)
                    ).get()
                    // IPv4 through a dual-stack socket, where the kernel allows it.
                    _ = try? await channel.setOption(
                        ChannelOptions.Types.SocketOption(level: ipLevel, name: .init(rawValue: IP_MTU_DISCOVER)),
                        value: SocketOptionValue(IP_PMTUDISC_PROBE)
                    ).get()
                } else {
                    try await channel.setOption(
                        ChannelOptions.Types.SocketOption(level: ipLevel, name: .init(rawValue: IP_MTU_DISCOVER)),
                        value: SocketOptionValue(IP_PMTUDISC_PROBE)
                    ).get()
                }
                return true
            } catch {
                return false
            }
        #else
            return false
        #endif
    }
}
