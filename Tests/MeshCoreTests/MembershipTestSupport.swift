import MeshCore
import MeshCrypto

/// A handful of membership instances wired by hand: the test decides which datagram is
/// delivered and when time moves, so each protocol rule can be checked step by step.
struct ManualCluster {
    struct Datagram {
        var from: NodeID
        var fromAddress: PeerAddress
        var to: PeerAddress
        var frames: [Frame]
        /// Sealed with the pair's key (only the recipient opens it), not the hello key.
        var pairwise = false
    }

    var nodes: [NodeID: MembershipInstance] = [:]
    var identities: [NodeID: NodeIdentity] = [:]
    var addresses: [NodeID: PeerAddress] = [:]
    var order: [NodeID] = []
    var inFlight: [Datagram] = []
    /// Every datagram any node sent, delivered or not.
    var log: [Datagram] = []
    var now = MeshInstant(nanoseconds: 1_000_000_000)
    var changes: [(observer: NodeID, member: Member)] = []

    static func address(_ index: Int) -> PeerAddress {
        PeerAddress(ipv4: [127, 0, 1, UInt8(index)], port: 7946)
    }

    static func record(
        _ identity: NodeIdentity, index: Int, incarnation: UInt64 = 0, boot: UInt64? = nil
    ) -> MemberRecord {
        MemberRecord(
            signingKey: identity.publicKey, name: "n\(index)", addresses: [address(index)],
            incarnation: incarnation, bootID: boot ?? UInt64(index),
            ephemeralKey: [UInt8](repeating: UInt8(index), count: 32))
    }

    /// `count` nodes that already know each other (no join exchange).
    init(count: Int, settings: MembershipSettings = .lan) {
        var records: [MemberRecord] = []
        for index in 1...count {
            let identity = try! NodeIdentity(seed: [UInt8](repeating: UInt8(index), count: 32))
            let record = Self.record(identity, index: index)
            let instance = MembershipInstance(
                record: record, authority: Ed25519Authority(identity: identity),
                settings: settings, datagramBudget: 1118, seed: UInt64(index), now: now)
            nodes[identity.nodeID] = instance
            identities[identity.nodeID] = identity
            addresses[identity.nodeID] = Self.address(index)
            order.append(identity.nodeID)
            records.append(instance.me)
        }
        for id in order { nodes[id]!.assume(records, now: now) }
    }

    subscript(_ index: Int) -> NodeID { order[index] }

    /// A membership instance of identity seed `index` (LAN settings) that knows nobody, outside
    /// any cluster: the test decides what reaches it.
    static func standalone(_ index: Int, now: MeshInstant) throws -> (NodeIdentity, MembershipInstance) {
        let identity = try NodeIdentity(seed: [UInt8](repeating: UInt8(index), count: 32))
        let instance = MembershipInstance(
            record: record(identity, index: index),
            authority: Ed25519Authority(identity: identity), settings: .lan,
            datagramBudget: 1118, seed: UInt64(index), now: now)
        return (identity, instance)
    }

    /// A node with identity seed `index` that joins through `seed` now; its join request is in flight.
    mutating func addJoiner(_ index: Int, through seed: PeerAddress) throws -> NodeID {
        var (identity, joiner) = try Self.standalone(index, now: now)
        let out = joiner.join([seed], now: now)
        nodes[identity.nodeID] = joiner
        identities[identity.nodeID] = identity
        addresses[identity.nodeID] = Self.address(index)
        order.append(identity.nodeID)
        collect(out, from: identity.nodeID)
        return identity.nodeID
    }

    func instance(_ index: Int) -> MembershipInstance { nodes[order[index]]! }

    func status(of member: Int, seenBy observer: Int) -> MemberStatus? {
        nodes[order[observer]]!.member(order[member])?.status
    }

    mutating func collect(_ directives: [MembershipDirective], from id: NodeID) {
        for directive in directives {
            switch directive {
            case let .send(frames, _, address):
                let datagram = Datagram(from: id, fromAddress: addresses[id]!, to: address, frames: frames)
                inFlight.append(datagram)
                log.append(datagram)
            case let .sendPairwise(frames, _, address):
                let datagram = Datagram(
                    from: id, fromAddress: addresses[id]!, to: address, frames: frames, pairwise: true)
                inFlight.append(datagram)
                log.append(datagram)
            case let .memberChanged(member):
                changes.append((id, member))
            case .memberForgotten, .identityConflict, .sessionFull:
                break
            }
        }
    }

    /// Delivers every datagram in flight (and the answers they cause) unless `drop` says no.
    /// Nodes in `down` receive nothing and answer nothing.
    mutating func pump(down: Set<NodeID> = [], drop: (Datagram) -> Bool = { _ in false }) {
        var rounds = 0
        while !inFlight.isEmpty, rounds < 10_000 {
            rounds += 1
            let datagram = inFlight.removeFirst()
            guard !drop(datagram), let target = addresses.first(where: { $0.value == datagram.to })?.key,
                !down.contains(target), var node = nodes[target]
            else { continue }
            let out = node.onFrames(
                datagram.frames, from: datagram.from, address: datagram.fromAddress, now: now,
                pairwise: datagram.pairwise)
            nodes[target] = node
            collect(out, from: target)
        }
    }

    /// Moves time forward in small steps, ticking every live node that is due and delivering traffic.
    mutating func advance(
        by duration: Duration, step: Duration = .milliseconds(10), down: Set<NodeID> = [],
        drop: (Datagram) -> Bool = { _ in false }
    ) {
        let end = now + duration
        while now < end {
            now = min(end, now + step)
            for id in order where !down.contains(id) {
                var node = nodes[id]!
                if node.nextDeadline <= now {
                    let out = node.onTick(now: now)
                    nodes[id] = node
                    collect(out, from: id)
                }
            }
            pump(down: down, drop: drop)
        }
    }

    mutating func tick(_ index: Int) {
        var node = nodes[order[index]]!
        let out = node.onTick(now: now)
        nodes[order[index]] = node
        collect(out, from: order[index])
    }

    mutating func deliver(frames: [Frame], from sender: Int, to receiver: Int, pairwise: Bool = false) {
        var node = nodes[order[receiver]]!
        let out = node.onFrames(
            frames, from: order[sender], address: addresses[order[sender]]!, now: now,
            pairwise: pairwise)
        nodes[order[receiver]] = node
        collect(out, from: order[receiver])
    }
}

extension [Frame] {
    var probes: [Probe] { compactMap { if case let .probe(p) = $0 { p } else { nil } } }
    var acks: [ProbeAck] { compactMap { if case let .probeAck(a) = $0 { a } else { nil } } }
    var requests: [ProbeRequest] { compactMap { if case let .probeRequest(r) = $0 { r } else { nil } } }
    var aliveRecords: [MemberRecord] { compactMap { if case let .alive(r) = $0 { r } else { nil } } }
    var suspicions: [Accusation] { compactMap { if case let .suspect(a) = $0 { a } else { nil } } }
}
