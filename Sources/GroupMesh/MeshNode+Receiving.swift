import Foundation
import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// Where the channel handlers find the node: the channel exists before the node does (the
/// node's record needs the bound address). Set once, on the event loop, and read only there.
final class NodeSlot: @unchecked Sendable {
    var node: MeshNode?
}

/// Hands each datagram to the node on the event loop the node runs on.
final class DatagramReceiver: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let slot: NodeSlot

    init(slot: NodeSlot) { self.slot = slot }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        slot.node?.assumeIsolated { _ = $0.receive(envelope) }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        slot.node?.assumeIsolated { $0.readBatchComplete() }
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let writable = context.channel.isWritable
        slot.node?.assumeIsolated { $0.writabilityChanged(writable) }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ICMP errors (port unreachable from a departed peer) surface here; they are not fatal.
        slot.node?.assumeIsolated { $0.countSendError() }
    }
}

extension PeerAddress {
    init?(_ address: SocketAddress) {
        guard let port = address.port, port >= 0, port <= Int(UInt16.max) else { return nil }
        switch address {
        case let .v4(v4):
            let value = UInt32(bigEndian: v4.address.sin_addr.s_addr)
            self.init(host: .ipv4(value), port: UInt16(port))
        case let .v6(v6):
            var raw = v6.address.sin6_addr
            let bytes = withUnsafeBytes(of: &raw) { Array($0) }
            self.init(ipv6: bytes, port: UInt16(port))
        default:
            return nil
        }
    }

    var isLinkLocalIPv6: Bool {
        if case let .ipv6(high, _) = host { return high >> 54 == 0x3fa }
        return false
    }

    func socketAddress() throws -> SocketAddress {
        try SocketAddress(ipAddress: hostString, port: Int(port))
    }
}

extension NodeLogLevel {
    /// The core's threshold for a logger's level (swift-log's `critical` is the core's `error`).
    init(_ level: Logger.Level) {
        self = NodeLogLevel(rawValue: level.rawValue) ?? .error
    }
}
