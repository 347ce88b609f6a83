import MeshCore
import MeshCrypto
import NIOCore

/// A membership instance as a simulated process. Datagrams carry the sender's id, an 8-byte
/// checksum standing in for the AEAD tag (so corrupted datagrams are dropped, as sealing would
/// drop them), then the key they stand for and the real frame encoding. A pairwise one names
/// the two boots whose keys would seal it, and opens only where both still match, as the real
/// codec's would.
package final class MembershipProcess: SimulatedProcess {
    package struct Change: Sendable, Equatable {
        package var time: MeshInstant
        package var member: NodeID
        package var status: MemberStatus
        package var incarnation: UInt64
    }

    static let timerID: UInt64 = 1

    package private(set) var instance: MembershipInstance
    package let seeds: [PeerAddress]
    /// Every status change this node saw, in order.
    package private(set) var changes: [Change] = []
    package private(set) var rejected = 0
    /// Largest datagram this node sent, envelope included.
    package private(set) var largestDatagram = 0
    /// Sees every accepted datagram's frames, for diagnosing a failing seed.
    package var onFrames: ((MeshInstant, NodeID, [Frame]) -> Void)?

    package init(instance: MembershipInstance, seeds: [PeerAddress] = []) {
        self.instance = instance
        self.seeds = seeds
    }

    /// A node at `address` with a cheap authority, ready for large simulations.
    package static func make(
        at address: SimAddress, settings: MembershipSettings, seed: UInt64,
        seeds: [SimAddress] = [], now: MeshInstant = .zero
    ) -> MembershipProcess {
        let authority = SimulationAuthority(index: address.index)
        let record = MemberRecord(
            signingKey: authority.signingKey, name: address.description,
            addresses: [address.peerAddress], incarnation: 0, bootID: seed,
            ephemeralKey: [UInt8](repeating: 0, count: 32))
        let instance = MembershipInstance(
            record: record, authority: authority, settings: settings,
            datagramBudget: 1118, seed: seed, now: now)
        return MembershipProcess(instance: instance, seeds: seeds.map(\.peerAddress))
    }

    package var id: NodeID { instance.localID }

    package func start(now: MeshInstant, context: inout SimContext) {
        perform(instance.join(seeds, now: now), now: now, context: &context)
    }

    package func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard let (from, payload) = SimEnvelope.open(datagram), let kind = payload.first else {
            rejected += 1
            return
        }
        var buffer = ByteBuffer(bytes: payload.dropFirst())
        let pairwise = kind == 1
        if pairwise {
            guard let senderBoot = buffer.readInteger(as: UInt64.self),
                let receiverBoot = buffer.readInteger(as: UInt64.self),
                receiverBoot == instance.me.bootID, instance.member(from)?.record.bootID == senderBoot
            else {
                rejected += 1
                return
            }
        }
        guard case let .success(frames) = FrameCodec.decodeAll(&buffer) else {
            rejected += 1
            return
        }
        onFrames?(now, from, frames)
        perform(
            instance.onFrames(frames, from: from, address: sender.peerAddress, now: now, pairwise: pairwise),
            now: now, context: &context)
    }

    package func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        perform(instance.onTick(now: now), now: now, context: &context)
    }

    package func assume(_ records: [MemberRecord], now: MeshInstant) {
        instance.assume(records, now: now)
    }

    /// Starts from a view shared with the other nodes (held once, however many nodes).
    package func assume(_ table: MemberTable) {
        instance.assume(table)
    }

    package func leave(now: MeshInstant, context: inout SimContext) {
        perform(instance.leave(now: now), now: now, context: &context)
    }

    private func perform(_ directives: [MembershipDirective], now: MeshInstant, context: inout SimContext) {
        for directive in directives {
            switch directive {
            case let .send(frames, _, address):
                guard let destination = SimAddress(peerAddress: address) else { continue }
                let datagram = Self.envelope(from: instance.localID, frames: frames)
                largestDatagram = max(largestDatagram, datagram.count)
                context.send(datagram, to: destination)
            case let .sendPairwise(frames, recipient, address):
                guard let destination = SimAddress(peerAddress: address),
                    let boot = instance.member(recipient)?.record.bootID
                else { continue }
                let datagram = Self.envelope(
                    from: instance.localID, frames: frames,
                    pairwise: (sender: instance.me.bootID, receiver: boot))
                largestDatagram = max(largestDatagram, datagram.count)
                context.send(datagram, to: destination)
            case let .memberChanged(member):
                changes.append(
                    Change(time: now, member: member.id, status: member.status, incarnation: member.incarnation))
            case .memberForgotten, .identityConflict, .sessionFull:
                break
            }
        }
        if !instance.hasLeft {
            context.schedule(timer: Self.timerID, at: instance.nextDeadline)
        } else {
            context.cancel(timer: Self.timerID)
        }
    }

    /// The simulated datagram of `frames` (see `SimEnvelope`), sealed as hello, or pairwise
    /// between the two boots.
    package static func envelope(
        from sender: NodeID, frames: [Frame],
        pairwise boots: (sender: UInt64, receiver: UInt64)? = nil
    ) -> [UInt8] {
        var buffer = ByteBuffer()
        if let boots {
            buffer.writeInteger(UInt8(1))
            buffer.writeInteger(boots.sender)
            buffer.writeInteger(boots.receiver)
        } else {
            buffer.writeInteger(UInt8(0))
        }
        for frame in frames { FrameCodec.encode(frame, into: &buffer) }
        return SimEnvelope.seal(from: sender, payload: Array(buffer.readableBytesView))
    }
}
