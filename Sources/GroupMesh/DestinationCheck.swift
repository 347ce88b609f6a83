#if canImport(Glibc)
    import Glibc
#endif
import MeshCrypto
import NIOCore

/// Destinations the kernel refuses outright: no route to them (a host without a default route,
/// an address of another family than our socket's), or a broadcast address without
/// `SO_BROADCAST`. NIO closes a datagram channel on any send error but `EMSGSIZE` and
/// `EHOSTUNREACH`, so one such send would silently end the node's socket; and a member's record,
/// an introduction or a remembered member can name any address. So every destination is checked
/// once a minute with `connect(2)` on a scratch socket, which makes the same route decision as
/// `sendmsg` without sending anything; a refused one is never handed to the channel. What an
/// outbound firewall rule refuses (`EPERM`) only a send shows: the first datagrams to a
/// destination go out with a promise until one was written (`confirmed`), and a failed one is
/// tried again alone, empty, from a scratch socket (`written`): a host that fails there too is
/// refused, and tried the same way again every `retestInterval` (what the rule refuses never
/// leaves the host), so that a rule that held for a moment (a VPN's kill switch while it
/// reconnects) costs seconds, not a minute. A host whose real send failed again after the scratch socket passed (a
/// rule the scratch socket does not meet) is refused a minute at a time: each failed send closes
/// the node's socket, which is reopened only a few times a minute. (The failed send itself
/// closed NIO's channel; the node reopens it.)
struct DestinationCheck {
    static let validity: Duration = .seconds(60)
    static let retestInterval: Duration = .seconds(5)
    static let capacity = 4096

    private let family: Int32
    private var verdicts: [PeerAddress: (allowed: Bool, until: NIODeadline, confirmed: Bool)] = [:]
    /// Hosts a send was refused to (any port: a rule names hosts, and a member could name one
    /// host at many ports, each send closing the socket once), and when each is tried again.
    private var refusedHosts: [PeerAddress.Host: HostRefusal] = [:]

    private struct HostRefusal {
        var retestAt: NIODeadline
        /// When a scratch send passed and the refusal was lifted: the first real send after it
        /// that fails while the scratch socket still passes meets a rule the scratch socket does
        /// not, and the host waits a minute.
        var liftedAt: NIODeadline?
    }

    /// Sends an empty datagram to a destination from a scratch socket: why it is refused, or nil.
    /// (A parameter for tests: the kernel refuses only where a firewall rule says so.)
    var scratchSend: (SocketAddress, Int32) -> String? = DestinationCheck.sendRefusal
    /// Destinations refused (each send not made counts once).
    private(set) var refusedSends: UInt64 = 0

    /// For a socket bound to `local` (an IPv6 socket also reaches IPv4 through mapped addresses).
    init(local: PeerAddress) {
        family = local.isIPv6 ? AF_INET6 : AF_INET
    }

    /// Whether a datagram to `address` may go to the channel now; the reason when not (new
    /// verdicts only: a destination the kernel has no route to is told once a minute; a host a
    /// firewall rule refused, once for each of its ports).
    /// `confirmed`: a datagram to it was written since the verdict (else the caller watches the
    /// write, and tells `written`).
    mutating func allows(
        _ address: PeerAddress, remote: SocketAddress, now: NIODeadline
    )
        -> (allowed: Bool, newReason: String?, confirmed: Bool)
    {
        if let verdict = verdicts[address], now < verdict.until {
            if !verdict.allowed { refusedSends += 1 }
            return (verdict.allowed, nil, verdict.confirmed)
        }
        if var refusal = refusedHosts[address.host], refusal.liftedAt == nil {
            // Told when the host was refused (`written`), and once for each other port of it.
            let told = verdicts[address] != nil
            if now < refusal.retestAt || scratchSend(remote, family) != nil {
                if now >= refusal.retestAt {
                    refusal.retestAt = now + Self.deadline(Self.retestInterval)
                    refusedHosts[address.host] = refusal
                }
                verdicts[address] = (false, refusal.retestAt, false)
                refusedSends += 1
                return (false, told ? nil : "the kernel refused a send to this host", false)
            }
            // The scratch socket passes again: lifted, and the next send to it watched.
            refusal.liftedAt = now
            refusedHosts[address.host] = refusal
        }
        if verdicts.count >= Self.capacity { verdicts = verdicts.filter { now < $0.value.until } }
        if verdicts.count >= Self.capacity { verdicts.removeAll(keepingCapacity: true) }
        let reason = Self.refusal(of: remote, family: family)
        verdicts[address] = (reason == nil, now + Self.validityDeadline, false)
        if reason != nil { refusedSends += 1 }
        return (reason == nil, reason, false)
    }

    private static var validityDeadline: TimeAmount { deadline(validity) }

    private static func deadline(_ duration: Duration) -> TimeAmount {
        .nanoseconds(Int64(duration.nanosecondsClamped))
    }

    /// A watched write to `address` ended: written (it is confirmed), or failed. A failure may be
    /// another datagram's (a channel that closes fails every write queued with the same error),
    /// so the destination is tried alone: the reason when it fails there too (refused from now).
    mutating func written(_ address: PeerAddress, remote: SocketAddress, failed: Bool, now: NIODeadline) -> String? {
        guard var verdict = verdicts[address], verdict.allowed else { return nil }
        let lifted = refusedHosts[address.host]?.liftedAt
        guard failed else {
            verdict.confirmed = true
            verdicts[address] = verdict
            // Written after a lift: the host is sent to as any other.
            if lifted != nil { refusedHosts[address.host] = nil }
            return nil
        }
        let scratch = scratchSend(remote, family)
        // The scratch socket passed just before, and passes now, and this first send after it
        // failed all the same: it misleads (a rule only this node's socket meets).
        let misleads = scratch == nil && lifted.map { now < $0 + Self.deadline(Self.retestInterval) } == true
        guard scratch != nil || misleads else { return nil }
        let wait = misleads ? Self.validity : Self.retestInterval
        // Every port of the host: a rule names hosts, and each refused send closes the socket.
        verdicts = verdicts.filter { $0.key.host != address.host }
        verdicts[address] = (false, now + Self.deadline(wait), false)
        if refusedHosts.count >= Self.capacity {
            refusedHosts = refusedHosts.filter { now < $0.value.retestAt + Self.validityDeadline }
        }
        if refusedHosts.count < Self.capacity || refusedHosts[address.host] != nil {
            refusedHosts[address.host] = HostRefusal(retestAt: now + Self.deadline(wait))
        }
        return scratch
            ?? "the kernel refuses to send there from this node's socket, though not from another (a firewall rule?)"
    }

    /// Whether writes to `address` go unwatched now (allowed, and one was written).
    func isConfirmed(_ address: PeerAddress, now: NIODeadline) -> Bool {
        guard let verdict = verdicts[address], now < verdict.until else { return false }
        return verdict.allowed && verdict.confirmed
    }

    /// The socket closed under us: every destination is watched again until a write to it ends,
    /// so one that has begun to be refused is found.
    mutating func unconfirmAll() {
        for address in Array(verdicts.keys) { verdicts[address]?.confirmed = false }
    }

    /// Why an empty datagram to `remote` from a scratch socket is refused (`EPERM`: a firewall
    /// rule), or nil when it goes.
    static func sendRefusal(_ remote: SocketAddress, family: Int32) -> String? {
        #if os(Linux)
            let fd = socket(family, Int32(SOCK_DGRAM.rawValue), 0)
        #else
            let fd = socket(family, SOCK_DGRAM, 0)
        #endif
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let result = remote.withSockAddr { pointer, length in sendto(fd, nil, 0, 0, pointer, socklen_t(length)) }
        guard result < 0 else { return nil }
        let code = errno
        return "the kernel refuses to send there (\(String(cString: strerror(code))): a firewall rule?)"
    }

    /// Why the kernel would refuse to send to `remote` from a socket of `family`, or nil.
    static func refusal(of remote: SocketAddress, family: Int32) -> String? {
        let remoteFamily: Int32
        switch remote {
        case .v4: remoteFamily = AF_INET
        case .v6: remoteFamily = AF_INET6
        default: return "not an IP address"
        }
        if family == AF_INET, remoteFamily == AF_INET6 { return "an IPv6 address, and this node listens on IPv4" }
        #if os(Linux)
            let fd = socket(family, Int32(SOCK_DGRAM.rawValue), 0)
        #else
            let fd = socket(family, SOCK_DGRAM, 0)
        #endif
        guard fd >= 0 else { return nil }  // cannot tell: let the send decide
        defer { close(fd) }
        var target = remote
        if family == AF_INET6, remoteFamily == AF_INET, case let .v4(v4) = remote {
            // An IPv6 socket reaches IPv4 at ::ffff:a.b.c.d.
            let bytes = withUnsafeBytes(of: v4.address.sin_addr.s_addr) { Array($0) }
            let mapped = "::ffff:\(bytes.map(String.init).joined(separator: "."))"
            guard let address = try? SocketAddress(ipAddress: mapped, port: remote.port ?? 0) else { return nil }
            target = address
        }
        let result = target.withSockAddr { pointer, length in connect(fd, pointer, socklen_t(length)) }
        guard result != 0 else { return nil }
        switch errno {
        case ENETUNREACH: return "no route to it (network unreachable)"
        case EACCES: return "a broadcast address"
        case EADDRNOTAVAIL: return "an address this host cannot send to"
        case EAFNOSUPPORT, EINVAL: return "an address this socket cannot send to"
        default: return nil  // EHOSTUNREACH and others: the send itself is harmless
        }
    }
}
