import MeshCrypto

/// A member's announcement on its local network (PROTOCOL.md §1g): "a member of the session
/// tagged `tag` listens on port `port` of the address this came from". Sent by multicast with
/// a TTL of 1, so it never leaves the LAN.
///
/// `magic(4) | tag(8) | node id(16) | port(2) | mac(16)`, 46 bytes. The tag and the MAC are keyed
/// BLAKE2b with a key derived from the session secret (`KeyPurpose.lanDiscovery`): the tag names
/// the session without telling its secret, and only a holder of the secret can make an
/// announcement that is taken. The driver takes one only from a source on the subnet of one of
/// our LAN interfaces: a copy replayed on our LAN, even from a forged source there, costs one
/// punch (sealed, at most 40 datagrams) to an address on our own LAN.
package struct LANAnnouncement: Sendable, Equatable {
    package static let magic: [UInt8] = Array("GML1".utf8)
    package static let byteCount = 4 + 8 + NodeID.byteCount + 2 + 16

    package var node: NodeID
    /// The member's mesh port (the announcement may come from another socket).
    package var port: UInt16

    package init(node: NodeID, port: UInt16) {
        self.node = node
        self.port = port
    }

    /// The keys of one session epoch: the tag it is known by, and the MAC key.
    package struct Keys: Sendable, Equatable {
        package let tag: [UInt8]
        let macKey: [UInt8]

        package init(secret: SessionSecret) {
            macKey = secret.key(for: .lanDiscovery)
            tag = Array(KeyedHash.hash(Array("session tag".utf8), key: macKey, length: 16).prefix(8))
        }
    }

    package func encoded(with keys: Keys) -> [UInt8] {
        var bytes = Self.magic + keys.tag + node.bytes
        bytes += [UInt8(port >> 8), UInt8(port & 0xff)]
        return bytes + KeyedHash.hash(bytes, key: keys.macKey, length: 16)
    }

    /// The announcement in `bytes`, if it is one of this session's and its MAC holds; nil for
    /// anything else (another session's, damaged, forged, a stray datagram on the port).
    package init?(decoding bytes: [UInt8], with keys: Keys) {
        guard bytes.count == Self.byteCount, Array(bytes[0..<4]) == Self.magic,
            Array(bytes[4..<12]) == keys.tag
        else { return nil }
        let signed = Array(bytes[0..<(Self.byteCount - 16)])
        guard KeyedHash.equal(KeyedHash.hash(signed, key: keys.macKey, length: 16), Array(bytes.suffix(16))) else {
            return nil
        }
        let node = NodeID(bytes: bytes[12..<28])
        let port = UInt16(bytes[28]) << 8 | UInt16(bytes[29])
        guard port != 0 else { return nil }
        self.init(node: node, port: port)
    }
}

/// When this node announces itself on its LAN, and what it does with what it hears: pure
/// bookkeeping, the node decides (`NodeInstance+LAN`).
package struct LANDiscovery: Sendable {
    package struct Settings: Sendable, Equatable {
        /// Off with `run --no-lan-discovery`.
        package var enabled = true
        /// Between announcements (one at start, one a second later against a loss, then this).
        package var interval: Duration = .seconds(30)
        /// An announcement heard from a node not yet on a LAN path with us is answered with
        /// ours, at most this often: a newcomer learns of us without waiting for our interval.
        package var answerInterval: Duration = .seconds(2)
        /// One node's announcements are acted on at most this often (a flood costs nothing).
        package var perNodeInterval: Duration = .seconds(5)
        /// Nodes whose last action time is kept.
        package var maxTracked = 256

        package init() {}
    }

    package internal(set) var settings: Settings
    package private(set) var nextAnnouncement: MeshInstant
    private var earlyAnnouncements = 2
    private var lastAnswer: MeshInstant?
    private var lastActed: [NodeID: MeshInstant] = [:]
    private var cachedKeys: (session: SessionID, keys: LANAnnouncement.Keys)?

    package init(settings: Settings, now: MeshInstant) {
        self.settings = settings
        nextAnnouncement = now
    }

    /// The keys of the epoch `secret` names, derived once per epoch (a flood of datagrams on the
    /// port costs a hash each, not a key derivation).
    package mutating func keys(for secret: SessionSecret) -> LANAnnouncement.Keys {
        let session = secret.sessionID
        if let cachedKeys, cachedKeys.session == session { return cachedKeys.keys }
        let keys = LANAnnouncement.Keys(secret: secret)
        cachedKeys = (session, keys)
        return keys
    }

    /// Whether to announce now; if so the next one is scheduled.
    package mutating func announcementDue(now: MeshInstant) -> Bool {
        guard settings.enabled, now >= nextAnnouncement else { return false }
        if earlyAnnouncements > 0 { earlyAnnouncements -= 1 }
        nextAnnouncement = now + (earlyAnnouncements > 0 ? .seconds(1) : settings.interval)
        return true
    }

    /// Whether to act on `node`'s announcement now (at most once per `perNodeInterval` each, and
    /// for at most `maxTracked` nodes at a time).
    package mutating func mayAct(on node: NodeID, now: MeshInstant) -> Bool {
        guard settings.enabled else { return false }
        if let last = lastActed[node], now < last + settings.perNodeInterval { return false }
        if lastActed[node] == nil, lastActed.count >= settings.maxTracked {
            lastActed = lastActed.filter { now < $0.value + settings.perNodeInterval }
            guard lastActed.count < settings.maxTracked else { return false }
        }
        lastActed[node] = now
        return true
    }

    /// Whether to answer an announcement with ours now (moves the next announcement up).
    package mutating func mayAnswer(now: MeshInstant) -> Bool {
        guard settings.enabled else { return false }
        if let lastAnswer, now < lastAnswer + settings.answerInterval { return false }
        lastAnswer = now
        nextAnnouncement = min(nextAnnouncement, now)
        return true
    }
}
