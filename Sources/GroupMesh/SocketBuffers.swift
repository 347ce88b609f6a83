#if canImport(Glibc)
    import Glibc
#endif
import NIOCore

/// The UDP socket's kernel buffers. A burst of chunk pieces outruns the default receive buffer
/// (about 200 KiB) before the reader drains it, and the kernel silently caps `SO_RCVBUF` at
/// `net.core.rmem_max`; so the node asks for `wanted` with `SO_RCVBUFFORCE` when it may (root or
/// CAP_NET_ADMIN), and reports the size it got.
struct SocketBuffers: Sendable, Equatable {
    static let wanted = 16 << 20

    /// Bytes the kernel grants, as `getsockopt` reports them (twice the size set: the kernel
    /// counts its bookkeeping in the same budget).
    var receive: Int
    var send: Int

    /// What `net.core.rmem_max=4194304`, the setting the start-up warning names, grants (the
    /// kernel reports twice the size set).
    static let enough = 8 << 20

    /// Below that the node says so at start-up: bursts will be lost and asked for again.
    var isSmall: Bool { receive < Self.enough }

    /// Raises the buffers past the system limit when permitted, then reads back what holds.
    static func enlarge(_ channel: any Channel) async -> SocketBuffers {
        #if os(Linux)
            _ = try? await channel.setOption(
                .socketOption(.init(rawValue: SO_RCVBUFFORCE)), value: SocketOptionValue(wanted)
            ).get()
            _ = try? await channel.setOption(
                .socketOption(.init(rawValue: SO_SNDBUFFORCE)), value: SocketOptionValue(wanted)
            ).get()
        #endif
        let receive = (try? await channel.getOption(.socketOption(.so_rcvbuf)).get()) ?? 0
        let send = (try? await channel.getOption(.socketOption(.so_sndbuf)).get()) ?? 0
        return SocketBuffers(receive: Int(receive), send: Int(send))
    }
}
