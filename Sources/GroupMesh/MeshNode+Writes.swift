import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// The node's writes: each datagram to its birthday route, its TURN allocation or the main
/// socket, every destination checked once (`DestinationCheck`), batches sent segmented (GSO)
/// where the kernel can.
extension MeshNode {
    /// Written now, flushed once at the end of `runEffects`: a burst goes to the kernel in as few
    /// system calls as NIO can manage.
    func write(_ datagram: ByteBuffer, to address: PeerAddress) {
        if let route = birthdayRoute(to: address) {
            guard !closed, let remote = try? address.socketAddress() else { return }
            route.write(AddressedEnvelope(remoteAddress: remote, data: datagram), promise: nil)
            birthday.routesWritten = true
            return
        }
        if traversal?.routes != nil, sendThroughAllocation(datagram, to: address) { return }
        guard !closed, let remote = try? address.socketAddress(), let confirmed = admits(address, remote) else {
            return
        }
        let envelope = AddressedEnvelope(remoteAddress: remote, data: datagram)
        if trackLastWrite || !confirmed {
            let promise = eventLoop.makePromise(of: Void.self)
            channel.write(envelope, promise: promise)
            if trackLastWrite { lastWrite = promise.futureResult }
            if !confirmed { watch(promise.futureResult, to: address, remote) }
        } else {
            channel.write(envelope, promise: nil)  // no future per datagram on the hot path
        }
    }

    /// The first writes to a destination are watched until one is written (`DestinationCheck`).
    private func watch(_ write: EventLoopFuture<Void>, to address: PeerAddress, _ remote: SocketAddress) {
        write.whenComplete { [self] result in
            assumeIsolated { node in
                let failed = if case .failure = result { true } else { false }
                if let reason = node.destinations.written(address, remote: remote, failed: failed, now: .now()) {
                    node.logger.notice("not sending to \(address): \(reason)")
                }
            }
        }
    }

    /// Whether `address` may go to the channel (`DestinationCheck`); a refused one is logged when
    /// its verdict is new (`DestinationCheck.allows`). Its value was parsed from the wire, so printing it prints no member's text.
    /// Nil when refused; else whether a write to it was confirmed already.
    private func admits(_ address: PeerAddress, _ remote: SocketAddress) -> Bool? {
        let verdict = destinations.allows(address, remote: remote, now: .now())
        if let reason = verdict.newReason {
            logger.notice("not sending to \(address): \(reason)")
        }
        return verdict.allowed ? verdict.confirmed : nil
    }

    static let receiveOffload = System.supportsUDPReceiveOffload
    static let segmentationOffload = System.supportsUDPSegmentationOffload

    /// `count` datagrams of `segmentSize` bytes back to back, as one segmented send (GSO), or one
    /// by one where the kernel cannot.
    func writeSegments(_ batch: ByteBuffer, segmentSize: Int, count: Int, to address: PeerAddress) {
        guard count > 1, Self.segmentationOffload, !trackLastWrite, !closed, !routesThroughAllocation(address),
            birthdayRoute(to: address) == nil,
            let remote = try? address.socketAddress(), destinations.isConfirmed(address, now: .now())
        else {
            var rest = batch
            while rest.readableBytes > 0, let datagram = rest.readSlice(length: min(segmentSize, rest.readableBytes)) {
                write(datagram, to: address)
            }
            return
        }
        let metadata = AddressedEnvelope<ByteBuffer>.Metadata(
            ecnState: .transportNotCapable, packetInfo: nil,
            segmentSize: segmentSize)
        channel.write(AddressedEnvelope(remoteAddress: remote, data: batch, metadata: metadata), promise: nil)
    }
}
