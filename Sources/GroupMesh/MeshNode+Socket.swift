import Foundation
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// The node's UDP socket: how it is bound, and which of its addresses an invite carries.
extension MeshNode {
    static func bindDatagrams(
        _ configuration: NodeConfiguration, eventLoop: any EventLoop,
        slot: NodeSlot
    ) async throws(GroupMeshError) -> any Channel {
        // No SO_REUSEADDR: the port is this node's alone. With it, a second node (or another
        // local user) could bind the same port and take part of our traffic.
        var bootstrap = DatagramBootstrap(group: eventLoop)
            // Bursts of chunk datagrams outrun the default buffers (about 200 KiB) before the
            // reader drains them; losses there would cost retransmissions for nothing.
            .channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(SocketBuffers.wanted))
            .channelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(SocketBuffers.wanted))
            .channelOption(.maxMessagesPerRead, value: 64)
            // Past this much waiting to be written, chunk wants are answered busy (the core's
            // admission, told through `setWritable`).
            .channelOption(.writeBufferWaterMark, value: .init(low: 1 << 20, high: 4 << 20))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(DatagramReceiver(slot: slot))
                }
            }
        if receiveOffload {
            // GRO: a burst of equal-sized pieces from one sender arrives as one buffer of up to
            // 64 KiB, split back into datagrams in `receive`. Where nothing coalesces them (a veth,
            // a NIC without GRO) they come one by one: 16 per system call (recvmmsg), not one.
            bootstrap =
                bootstrap
                .channelOption(.datagramReceiveOffload, value: true)
                .channelOption(.datagramReceiveSegmentSize, value: true)
                .channelOption(.datagramVectorReadMessageCount, value: 16)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 16 * 65_536))
        } else {
            // Each of the 32 messages gets an equal share of the buffer: room for the largest
            // datagram accepted (a jumbo frame's, once a path proved it carries one).
            let perMessage = configuration.settings.wire.maxReceivedDatagramSize + 64
            bootstrap =
                bootstrap
                .channelOption(.datagramVectorReadMessageCount, value: 32)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 32 * perMessage))
        }
        do {
            return try await bootstrap.bind(host: configuration.listenHost, port: configuration.listenPort).get()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            throw .bindFailed(
                address: configuration.listenDescription,
                reason:
                    "the port is in use (another node, or another program, has it); choose another --listen port, or 0 for any free one"
            )
        } catch let error as IOError where error.errnoCode == EADDRNOTAVAIL {
            throw .bindFailed(
                address: configuration.listenDescription,
                reason: "no interface of this machine has that address; listen on one it has, or on 0.0.0.0 for all")
        } catch let error as IOError where error.errnoCode == EACCES {
            throw .bindFailed(
                address: configuration.listenDescription,
                reason: "permission denied (ports under 1024 need root, or CAP_NET_BIND_SERVICE)")
        } catch let error as IOError {
            throw .bindFailed(
                address: configuration.listenDescription, reason: String(cString: strerror(error.errnoCode)))
        } catch {
            throw .bindFailed(address: configuration.listenDescription, reason: "\(error)")
        }
    }

    /// Our own addresses, for invites and our record (after those learnt outside): `--advertise` if given, else the listen address,
    /// else (bound to a wildcard) every non-loopback interface address, else loopback.
    static func inviteAddresses(configuration: NodeConfiguration, bound: PeerAddress) -> [PeerAddress] {
        if !configuration.advertise.isEmpty { return configuration.advertise.map(\.peer) }
        if !bound.isUnspecified { return [bound] }
        let interfaces = ((try? System.enumerateDevices()) ?? [])
            .compactMap { device in device.address.flatMap(PeerAddress.init) }
            .filter { !$0.isLoopback && !$0.isUnspecified && !$0.isLinkLocalIPv6 }
            .filter { $0.isIPv6 == bound.isIPv6 }
            .map { PeerAddress(host: $0.host, port: bound.port) }
        let unique = Array(Set(interfaces)).sorted()
        if !unique.isEmpty { return Array(unique.prefix(MemberRecord.maxAddresses)) }
        let loopback = bound.isIPv6 ? "::1" : "127.0.0.1"
        return [PeerAddress(host: PeerAddress.parseHost(loopback) ?? bound.host, port: bound.port)]
    }
}
