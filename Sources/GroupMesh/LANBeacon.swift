import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// The sockets of LAN discovery (PROTOCOL.md §1g): announcements go to an organisation-local
/// multicast group with a TTL of 1 (they never leave the link), out of each LAN interface, and
/// those of other members come in on the group's port. The core decides what to send and what
/// an announcement means; this only carries bytes.
final class LANBeacon: @unchecked Sendable {
    static let group = "239.255.79.46"
    static let port = 7947
    /// Larger datagrams on the port are not announcements: not even read into the core.
    static let maxDatagram = 256

    private let receiver: any Channel
    private let senders: [any Channel]
    private let groupAddress: SocketAddress
    let interfaces: [String]

    private init(receiver: any Channel, senders: [any Channel], groupAddress: SocketAddress, interfaces: [String]) {
        self.receiver = receiver
        self.senders = senders
        self.groupAddress = groupAddress
        self.interfaces = interfaces
    }

    /// The IPv4 interfaces with a private (LAN) address that can multicast: those of `bound`
    /// alone when the node listens on one address, none when it listens on loopback.
    static func lanInterfaces(bound: PeerAddress) -> [NIONetworkDevice] {
        guard !bound.isIPv6, !bound.isLoopback else { return [] }
        let devices = (try? System.enumerateDevices()) ?? []
        return devices.filter { device in
            guard device.multicastSupported, let address = device.address.flatMap(PeerAddress.init),
                !address.isIPv6, address.isPrivateIPv4
            else { return false }
            return bound.isUnspecified || address.host == bound.host
        }
    }

    /// Opens the group's port and one sending socket per interface; nil (with one log line)
    /// when none can be had, and the node runs on without LAN discovery.
    static func open(
        interfaces: [NIONetworkDevice], eventLoop: any EventLoop, logger: Logger,
        onAnnouncement: @escaping @Sendable ([UInt8], PeerAddress) -> Void
    ) async -> LANBeacon? {
        guard !interfaces.isEmpty else { return nil }
        // The receiving socket takes unicast too, from anywhere: only a source on one of our
        // LANs is an announcement (anything else, a replay with a forged far address included,
        // is dropped before the core sees it).
        let subnets = interfaces.compactMap(LANSubnet.init)
        let deliver: @Sendable ([UInt8], PeerAddress) -> Void = { bytes, source in
            if subnets.contains(where: { $0.contains(source) }) { onAnnouncement(bytes, source) }
        }
        var opened: [any Channel] = []
        do {
            let groupAddress = try SocketAddress(ipAddress: group, port: port)
            // Shared with the other nodes of this host (each gets every announcement).
            let receiver = try await DatagramBootstrap(group: eventLoop)
                .channelOption(.socketOption(.so_reuseaddr), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(AnnouncementReader(deliver))
                    }
                }
                .bind(host: "0.0.0.0", port: port).get()
            opened.append(receiver)
            guard let multicast = receiver as? any MulticastChannel else { throw LANBeaconError.noMulticast }
            var senders: [any Channel] = []
            var names: [String] = []
            for device in interfaces {
                guard case let .v4(v4)? = device.address else { continue }
                do {
                    try await multicast.joinGroup(groupAddress, device: device).get()
                    let sender = try await DatagramBootstrap(group: eventLoop)
                        .bind(host: v4.host, port: 0).get()
                    opened.append(sender)
                    if let options = sender as? any SocketOptionProvider {
                        try await options.setIPMulticastIF(v4.address.sin_addr).get()
                        try await options.setIPMulticastTTL(1).get()
                    }
                    senders.append(sender)
                    names.append("\(device.name) \(v4.host)")
                } catch {
                    logger.debug("LAN discovery: not on \(device.name): \(error)")
                }
            }
            guard !senders.isEmpty else { throw LANBeaconError.noInterface }
            return LANBeacon(receiver: receiver, senders: senders, groupAddress: groupAddress, interfaces: names)
        } catch {
            for channel in opened { try? await channel.close() }
            logger.notice("LAN discovery is off: \(error)")
            return nil
        }
    }

    func announce(_ bytes: [UInt8]) {
        for sender in senders {
            let envelope = AddressedEnvelope(remoteAddress: groupAddress, data: sender.allocator.buffer(bytes: bytes))
            sender.writeAndFlush(envelope, promise: nil)
        }
    }

    func close() async {
        for channel in [receiver] + senders { try? await channel.close() }
    }
}

enum LANBeaconError: Error, CustomStringConvertible {
    case noMulticast, noInterface

    var description: String {
        switch self {
        case .noMulticast: "the socket cannot join a multicast group"
        case .noInterface: "no LAN interface took the multicast group"
        }
    }
}

/// Hands each datagram on the group's port to the node (on the event loop; small ones only).
private final class AnnouncementReader: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let deliver: @Sendable ([UInt8], PeerAddress) -> Void

    init(_ deliver: @escaping @Sendable ([UInt8], PeerAddress) -> Void) { self.deliver = deliver }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        guard envelope.data.readableBytes <= LANBeacon.maxDatagram,
            let source = PeerAddress(envelope.remoteAddress)
        else { return }
        deliver(Array(envelope.data.readableBytesView), source)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}

/// An IPv4 subnet of one of our interfaces.
struct LANSubnet: Sendable {
    let network: UInt32
    let mask: UInt32

    init?(_ device: NIONetworkDevice) {
        guard case let .v4(address)? = device.address, case let .v4(netmask)? = device.netmask else { return nil }
        mask = UInt32(bigEndian: netmask.address.sin_addr.s_addr)
        network = UInt32(bigEndian: address.address.sin_addr.s_addr) & mask
    }

    func contains(_ address: PeerAddress) -> Bool {
        guard case let .ipv4(value) = address.host else { return false }
        return value & mask == network
    }
}

extension PeerAddress {
    /// RFC 1918 and link-local IPv4: addresses of a LAN, where announcements go.
    var isPrivateIPv4: Bool {
        guard case let .ipv4(value) = host else { return false }
        return value >> 24 == 10 || value >> 20 == 0xAC1 || value >> 16 == 0xC0A8 || value >> 16 == 0xA9FE
    }
}
