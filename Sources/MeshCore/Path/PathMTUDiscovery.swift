import MeshCrypto

/// How large a datagram each member's path to this node carries (DPLPMTUD, RFC 8899), so that
/// chunk pieces fill it: on loopback and jumbo links a 9 KB datagram carries what seven
/// 1,200-byte ones did, and the joiner's cost is mostly per datagram (open, route, place).
///
/// Receiver-driven, like the rest of the transfer: the node that asks for pieces picks their
/// size, so it measures the path they take, from the holder to itself. It asks the holder for a
/// sealed probe of a given size (`PathProbeRequest`); the probe's arrival proves the size, its
/// absence after a few tries ends the search at the last size proven. Sizes climb a short
/// ladder from the base (1,200 bytes, which every path that carries IPv6 carries) to Ethernet's
/// 1,472 and on to a jumbo frame's 8,972. A path that later drops what it carried (a black
/// hole: a route change, a tunnel) shows as whole chunks asked for at the larger size that
/// never get a single piece back. A busy holder looks the same, so the size in use is probed
/// again first (RFC 8899's confirmation): only if that probe is lost too does the path fall
/// back to the base, to be searched again later.
///
/// Probes start with the first chunk asked of a member, not with membership: a mesh of
/// thousands probes only the paths it pulls chunks over. Pure: time comes in, probe requests
/// and size changes go out.
package struct PathMTUDiscovery: Sendable {
    package struct Settings: Sendable {
        /// What every path carries: where a search starts and a black hole falls back to.
        package var base = 1200
        /// Sizes tried, smallest first, as UDP payload over IPv4 (over IPv6, 20 bytes less
        /// each: its header is that much longer). Ethernet, a common tunnel-free middle, and a
        /// jumbo frame.
        package var ladder = [1472, 4052, 8972]
        /// A probe unanswered for this long is sent again, `attempts` times in all; then the
        /// search ends at the last size proven.
        package var probeTimeout: Duration = .milliseconds(250)
        package var attempts = 3
        /// A settled path is searched again after this long: it may carry more now (RFC 8899's
        /// PMTU_RAISE_TIMER).
        package var raiseInterval: Duration = .seconds(600)
        /// Whole chunks asked for at a size above the base that went unanswered in a row,
        /// before the size in use is probed again to confirm it.
        package var blackHoleSilences = 2
        /// After a black hole, the path is searched again this much later.
        package var researchDelay: Duration = .seconds(5)
        package init() {}
    }

    package enum Directive: Sendable, Equatable {
        /// Ask `peer` for a probe (sealed under our pairwise key, to its known address).
        case request(PathProbeRequest, to: NodeID)
        /// The datagrams `peer` may send us are now this large (UDP payload).
        case sizeChanged(NodeID, datagramSize: Int)
    }

    struct Path: Sendable {
        var ipv6: Bool
        /// The largest size proven (the base until a probe came).
        var confirmed: Int
        var probe: (size: Int, token: UInt32, attempt: Int, deadline: MeshInstant)?
        /// The probe out confirms the size in use (after silences) instead of trying a larger one.
        var confirming = false
        /// When a settled path is searched again.
        var nextSearch: MeshInstant?
        var silences = 0
        /// The probes a confirmation interrupted already spent on a larger size: the search goes
        /// on from there, not from its first attempt (each unanswered one crossed the path).
        var interrupted: (size: Int, attempts: Int)?
    }

    package let settings: Settings
    private var paths: [NodeID: Path] = [:]
    private var nextToken: UInt32 = 1
    /// Paths that fell back to the base after silences and a lost confirmation, for counters
    /// and tests.
    package private(set) var blackHoles: UInt64 = 0

    package init(settings: Settings = .init()) { self.settings = settings }

    /// The UDP payload `peer` may send us: the largest size its path proved.
    package func datagramSize(from peer: NodeID) -> Int {
        paths[peer]?.confirmed ?? settings.base
    }

    package func isMeasuring(_ peer: NodeID) -> Bool { paths[peer] != nil }

    /// The sizes to try toward a peer at this address family, above the base.
    private func ladder(ipv6: Bool) -> [Int] {
        settings.ladder.map { ipv6 ? $0 - 20 : $0 }.filter { $0 > settings.base }
    }

    /// Starts measuring the path from `peer`, once per member.
    package mutating func begin(_ peer: NodeID, ipv6: Bool, now: MeshInstant) -> [Directive] {
        guard paths[peer] == nil else { return [] }
        paths[peer] = Path(ipv6: ipv6, confirmed: settings.base)
        return probeNext(peer, now: now)
    }

    /// A probe came from `peer`, in a datagram of `datagramSize` bytes.
    package mutating func onProbe(
        _ probe: PathProbe, from peer: NodeID, datagramSize: Int, now: MeshInstant
    ) -> [Directive] {
        // Only the probe asked for, and only whole: a shorter datagram with the right token
        // proves nothing about the size.
        guard var path = paths[peer], let outstanding = path.probe, outstanding.token == probe.token,
            datagramSize >= outstanding.size
        else { return [] }
        path.probe = nil
        path.silences = 0
        if path.confirming {
            // The size in use still passes: the silences were a busy holder, not the path. A
            // search the confirmation interrupted goes on.
            path.confirming = false
            paths[peer] = path
            return path.nextSearch == nil ? probeNext(peer, now: now) : []
        }
        path.confirmed = outstanding.size
        paths[peer] = path
        return [.sizeChanged(peer, datagramSize: outstanding.size)] + probeNext(peer, now: now)
    }

    /// A whole chunk asked of `peer` in datagrams of `datagramSize` got no piece back in time.
    /// Silences at a size above the base, in a row, have the size in use probed again.
    package mutating func onSilence(from peer: NodeID, datagramSize: Int, now: MeshInstant) -> [Directive] {
        guard var path = paths[peer], datagramSize > settings.base, datagramSize == path.confirmed,
            !path.confirming
        else { return [] }
        path.silences += 1
        guard path.silences >= settings.blackHoleSilences else {
            paths[peer] = path
            return []
        }
        // A search for a larger size gives way: what is in use comes first.
        if let searching = path.probe, !path.confirming {
            path.interrupted = (searching.size, searching.attempt + 1)
        }
        let token = nextToken
        nextToken = nextToken &+ 1
        path.probe = (path.confirmed, token, 0, now + settings.probeTimeout)
        path.confirming = true
        paths[peer] = path
        return [.request(PathProbeRequest(token: token, size: path.confirmed), to: peer)]
    }

    /// A chunk came whole from `peer`: its path works at the size in use.
    package mutating func onPieces(from peer: NodeID) {
        if paths[peer]?.silences ?? 0 > 0 { paths[peer]?.silences = 0 }
    }

    /// Probes unanswered in time are asked again or end the search; settled paths whose time
    /// has come are searched again.
    package mutating func onTick(now: MeshInstant) -> [Directive] {
        var out: [Directive] = []
        for peer in paths.keys.sorted() {
            guard var path = paths[peer] else { continue }
            if var probe = path.probe, now >= probe.deadline {
                probe.attempt += 1
                if probe.attempt < settings.attempts {
                    probe.deadline = now + settings.probeTimeout
                    path.probe = probe
                    paths[peer] = path
                    out.append(.request(PathProbeRequest(token: probe.token, size: probe.size), to: peer))
                } else if path.confirming {
                    // The size in use no longer passes: a black hole. Back to what every path
                    // carries, and search again a little later.
                    path.probe = nil
                    path.confirming = false
                    path.silences = 0
                    path.confirmed = settings.base
                    path.interrupted = nil
                    path.nextSearch = now + settings.researchDelay
                    paths[peer] = path
                    blackHoles += 1
                    out.append(.sizeChanged(peer, datagramSize: settings.base))
                } else {
                    // The search stops at the first size that does not pass (RFC 8899 §5.3.2).
                    path.probe = nil
                    path.nextSearch = now + settings.raiseInterval
                    paths[peer] = path
                }
            } else if path.probe == nil, let next = path.nextSearch, now >= next {
                paths[peer]?.nextSearch = nil
                out += probeNext(peer, now: now)
            }
        }
        return out
    }

    package mutating func remove(_ peer: NodeID) {
        paths[peer] = nil
    }

    package var nextDeadline: MeshInstant? {
        paths.values.compactMap { $0.probe?.deadline ?? $0.nextSearch }.min()
    }

    /// Probes the next size above the one proven, or settles when there is none.
    private mutating func probeNext(_ peer: NodeID, now: MeshInstant) -> [Directive] {
        guard var path = paths[peer] else { return [] }
        guard let size = ladder(ipv6: path.ipv6).first(where: { $0 > path.confirmed }) else {
            path.nextSearch = nil
            paths[peer] = path
            return []
        }
        var spent = 0
        if let interrupted = path.interrupted, interrupted.size == size { spent = interrupted.attempts }
        path.interrupted = nil
        guard spent < settings.attempts else {
            // Every attempt at that size went unanswered before the confirmation came.
            path.nextSearch = now + settings.raiseInterval
            paths[peer] = path
            return []
        }
        let token = nextToken
        nextToken = nextToken &+ 1
        path.probe = (size, token, spent, now + settings.probeTimeout)
        paths[peer] = path
        return [.request(PathProbeRequest(token: token, size: size), to: peer)]
    }
}
