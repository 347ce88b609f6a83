import MeshCrypto

/// LAN discovery (PROTOCOL.md §1g): members announce themselves on their local network, and a
/// member heard there is met there, never through the internet or a relay.
extension NodeInstance {
    /// The announcement to multicast now, when one is due (the driver sends it on each LAN
    /// interface; it has none to send on when the socket is bound to loopback).
    mutating func lanTick(now: MeshInstant) {
        guard let port = lanPort, reachability.lan.announcementDue(now: now) else { return }
        counters.lan.announcementsSent += 1
        let keys = reachability.lan.keys(for: session)
        effects.append(.announceOnLAN(LANAnnouncement(node: localID, port: port).encoded(with: keys)))
    }

    /// The driver has no LAN to announce on (none of its interfaces took the group).
    package mutating func disableLANDiscovery() {
        reachability.lan.settings.enabled = false
    }

    /// Whether this node announces itself on its LAN, and what it met there.
    package var lanDiscoveryEnabled: Bool { reachability.lan.settings.enabled }

    var lanDeadline: MeshInstant? {
        guard reachability.lan.settings.enabled, lanPort != nil else { return nil }
        return reachability.lan.nextAnnouncement
    }

    /// The port members reach our socket at: the bound one (a driver's), else our first address's.
    private var lanPort: UInt16? {
        let port = localAddress?.port ?? reachability.discovery.local.first?.port ?? 0
        return port == 0 ? nil : port
    }

    /// A datagram on the LAN discovery port, from `source` (the announcer's address, any port).
    package mutating func receiveLANAnnouncement(_ bytes: [UInt8], from source: PeerAddress, now: MeshInstant) {
        guard phase.isActive, reachability.lan.settings.enabled else { return }
        let keys = reachability.lan.keys(for: session)
        guard let announcement = LANAnnouncement(decoding: bytes, with: keys) else {
            counters.lan.announcementsIgnored += 1
            return
        }
        let peer = announcement.node
        guard peer != localID, reachability.lan.mayAct(on: peer, now: now) else { return }
        counters.lan.announcementsHeard += 1
        let address = PeerAddress(host: source.host, port: announcement.port)
        if membership.isJoining {
            // Nobody answered the invite's addresses yet: a member on our LAN is as good a door.
            let directives = membership.addJoinSeed(address, now: now)
            if !directives.isEmpty {
                log(.info, "joining through a member on the LAN", ["member": "\(peer)", "address": "\(address)"])
                apply(directives, now: now)
            }
        } else if directory.addresses[peer] != nil, keying.codec.installedBoot(of: peer) != nil {
            guard directory.addresses[peer] != address,
                links.paths.introduced(to: peer, at: [address], by: localID, now: now)
            else { return }
            counters.lan.membersMet += 1
            log(.info, "punching a member found on the LAN", ["member": "\(peer)", "address": "\(address)"])
            pathsTick(now: now, force: true)
            return
        }
        // A newcomer (or a member we have no path to yet): it learns of us without waiting.
        _ = reachability.lan.mayAnswer(now: now)
    }
}
