import Foundation
import MeshCore
import MeshCrypto

/// How a node is started: the flags of `groupmesh run`, already parsed and checked.
public struct NodeConfiguration: Sendable {
    public var dataDirectory: DataDirectory
    /// Host to bind (numeric IPv4 or IPv6); port 0 picks a free one.
    public var listenHost: String = "0.0.0.0"
    public var listenPort: Int = 7946
    /// Addresses to put in invites and in our member record instead of the listen address.
    public var advertise: [MeshAddress] = []
    public var invite: Invite?
    public var join: [MeshAddress] = []
    /// The node's name in its record. Kept in the data dir (`name`): nil takes the name the dir
    /// kept from an earlier start, else `node-` and the first digits of the id.
    public var name: String?
    public var lazy = false

    /// What is wrong with `name` as a node's name, or nil: others print it, and a member record
    /// holds 64 bytes of it (PROTOCOL.md §3; a longer one would be cut).
    public static func nameProblem(_ name: String) -> String? {
        if name.isEmpty {
            return
                "is empty; give a name, or leave it out for the one kept in the data dir (else node- and the first digits of the id)"
        }
        let bytes = name.utf8.count
        if bytes > MemberRecord.maxNameBytes {
            return "is \(bytes) bytes of UTF-8; a name holds at most \(MemberRecord.maxNameBytes)"
        }
        return name.unicodeScalars.contains(where: TerminalText.needsEscape)
            ? "may not hold control characters (newlines, escapes, direction overrides)" : nil
    }
    /// Carry sealed datagrams between members that cannot meet (`run --no-relay` turns it off).
    public var relays = true
    /// `run --relay-budget`: bytes per second carried for others, all pairs together; nil sizes
    /// it from what this node's links were measured to carry (PROTOCOL.md §1d).
    public var relayBudget: Int?
    /// Announce the node on its LAN and meet members heard there (`run --no-lan-discovery`).
    public var lanDiscovery = true
    /// Ask the gateway to map our UDP port (PCP, NAT-PMP, UPnP IGD; `run --no-port-mapping` turns it off).
    public var portMapping = true
    public var profile: Profile = .lan
    /// The largest attachment accepted (100 MiB unless configured).
    public var maxAttachmentSize: UInt64 = 100 << 20
    /// How long `get` waits for a holder of what is missing before reporting it unavailable.
    public var unavailableTimeout: Duration = .seconds(10)
    public var chunkSize = Manifest.defaultChunkSize
    /// Start the control socket (tests of the node alone may skip it).
    public var controlSocket = true
    /// `run --event-handler`: commands run for events (Docs/CLI.md §events).
    public var eventHandlers: [EventHandlerSpec] = []
    /// A handler still running after this is killed, with everything it started.
    public var eventHandlerTimeout: Duration = .seconds(30)
    /// Share of received datagrams dropped on purpose, to measure behaviour under loss on a
    /// loopback that loses nothing (`run --simulate-loss`, hidden; benchmarks and tests only).
    public var simulatedLoss: Double = 0
    /// Labels added to every metric this node reports through swift-metrics: to tell apart
    /// several nodes in one process (a process with one node needs none). The node reports to
    /// the backend bootstrapped before it was made (`MetricsSystem.bootstrap`), and to none
    /// without one. Names the metrics use themselves (`kind`, `reason`, `state`, `outcome`, `le`,
    /// `quantile`) are left out.
    public var metricsLabels: [String: String] = [:]
    /// `run --stun`: servers asked where our datagrams come from (PROTOCOL.md §1e).
    public var stunServers: [TraversalServer] = []
    /// `run --turn`: the server we hold an allocation on, to be reached through (§1e).
    public var turnServer: TurnServerConfiguration?
    package var wire = DatagramCodec.Configuration()
    /// Lines for the person running the node (`run` prints them on stdout), such as the NAT
    /// behaviour once the members' observations tell it.
    package var announce: (@Sendable (String) -> Void)?

    public init(dataDirectory: DataDirectory) {
        self.dataDirectory = dataDirectory
    }

    /// Timing defaults, as memberlist's LAN, local and WAN configurations.
    public enum Profile: String, Sendable, CaseIterable {
        case lan, local, wan
    }

    /// The core's policy for this configuration.
    var settings: NodeSettings {
        var settings = NodeSettings(profile: MembershipSettings.Profile(rawValue: profile.rawValue) ?? .lan)
        settings.wire = wire
        settings.chunkSize = chunkSize
        settings.maxAttachmentSize = maxAttachmentSize
        settings.unavailableTimeout = unavailableTimeout
        settings.lazy = lazy
        // 0 carries nothing (as `--relay-budget off`); otherwise 64 KiB/s to 100 GiB/s, as the
        // CLI takes it: a library caller's value near Int.max would overflow the shares.
        settings.relay.enabled = relays && relayBudget != 0
        settings.relay.budget = relayBudget.map { min(max($0, 64 << 10), 100 << 30) }
        settings.lanDiscovery.enabled = lanDiscovery
        return settings
    }

    var listenDescription: String { MeshAddress.join(listenHost, listenPort) }

    /// Our socket reaches only addresses of its own family (IPv4 or IPv6). When every address
    /// given to join through (the invite's, `--join`'s, and those remembered from the last run)
    /// is of the other family, the node would stay alone for good without a word: that is said
    /// at start instead.
    func unreachableSeeds(remembered: RememberedMembers) -> GroupMeshError? {
        let listensOnIPv6 = listenHost.contains(":")
        let given = (invite?.token.addresses ?? []) + join.map(\.peer)
        guard !given.isEmpty, !given.contains(where: { $0.isIPv6 == listensOnIPv6 }) else { return nil }
        let rememberedAddresses = remembered.members.flatMap(\.addresses).compactMap { try? PeerAddress(parsing: $0) }
        guard !rememberedAddresses.contains(where: { $0.isIPv6 == listensOnIPv6 }) else { return nil }
        let (ours, theirs) = listensOnIPv6 ? ("IPv6", "IPv4") : ("IPv4", "IPv6")
        let example = listensOnIPv6 ? "0.0.0.0:0" : "[::]:0"
        let shown = given.prefix(3).map(\.description).joined(separator: ", ")
        return .bindFailed(
            address: listenDescription,
            reason: "this node would listen on \(ours), and the members to join "
                + "through are reachable only over \(theirs) (\(shown)); listen on \(theirs) instead (e.g. --listen \(example))"
        )
    }
}

/// A member's UDP address, `HOST:PORT` (`[v6]:PORT` for IPv6).
public struct MeshAddress: Hashable, Sendable, CustomStringConvertible {
    package let peer: PeerAddress

    package init(_ peer: PeerAddress) { self.peer = peer }

    public init(_ text: String) throws(GroupMeshError) {
        do { peer = try PeerAddress(parsing: text) } catch { throw .invalidAddress(text) }
    }

    public var description: String { peer.description }

    /// Why members could not reach this address if it were advertised (a wildcard host, port 0).
    package var advertisingProblem: String? {
        if peer.isUnspecified { return "is a wildcard, which no member can send to; give this node's own address" }
        if peer.port == 0 { return "has port 0; give the port members reach (the one --listen binds)" }
        return nil
    }

    /// `HOST:PORT` split in two (the port may be 0 here); nil when it is not of that form.
    public static func split(_ text: String) -> (host: String, port: UInt16)? { PeerAddress.split(text) }

    /// `HOST:PORT`, with brackets around an IPv6 host.
    public static func join(_ host: String, _ port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

/// An invite: the session secret and the addresses to join through. Whoever holds it can join.
public struct Invite: Sendable, Equatable, CustomStringConvertible {
    package let token: InviteToken

    package init(_ token: InviteToken) { self.token = token }

    public init(_ text: String) throws(GroupMeshError) {
        do { token = try InviteToken(parsing: text) } catch { throw .invalidInvite(error.description) }
    }

    /// The token as people paste it (`gm1…`).
    public var text: String { token.text }
    public var description: String { text }
}

extension Invite {
    /// How long a named pipe is waited on for its invite before the read gives up.
    public static let pipeWait = Duration.seconds(5)

    /// The token in the file at `path` ('-': standard input), surrounding whitespace ignored; at
    /// most 4 KiB. `requirePrivate`: a regular file that others may read is refused, as key files
    /// are (the invite is the session's secret). A named pipe nobody writes to is given up after
    /// `pipeWait`, with a line saying so, instead of hanging.
    public init(file path: String, requirePrivate: Bool = false) throws(GroupMeshError) {
        let name = path == "-" ? "standard input" : path
        let handle: FileHandle
        if path == "-" {
            handle = .standardInput
        } else {
            handle = try Self.openForReading(path, requirePrivate: requirePrivate)
        }
        let bytes: Data
        do { bytes = try handle.read(upToCount: 4097) ?? Data() } catch {
            throw .invalidInvite("cannot read the invite from \(name): \(error.localizedDescription)")
        }
        guard bytes.count <= 4096 else { throw .invalidInvite("\(name) holds more than an invite (over 4 KiB)") }
        guard let text = String(data: bytes, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
            !text.isEmpty
        else {
            throw .invalidInvite("\(name) holds no invite")
        }
        do { try self.init(text) } catch { throw .invalidInvite("\(name): \(error)") }
    }

    private static func openForReading(_ path: String, requirePrivate: Bool) throws(GroupMeshError) -> FileHandle {
        // Non-blocking: opening a named pipe with no writer would otherwise wait for one forever.
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw .invalidInvite("cannot read the invite from \(path): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw .invalidInvite("cannot read the invite from \(path): \(reason)")
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            if requirePrivate, info.st_mode & 0o077 != 0 {
                close(fd)
                throw .invalidInvite(
                    "invite file \(path) is readable by others (mode \(String(info.st_mode & 0o777, radix: 8))): "
                        + "it holds the session's secret; run: chmod 600 \(path)")
            }
        case S_IFIFO:
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(pipeWait.components.seconds * 1000)
            guard poll(&ready, 1, milliseconds) > 0, ready.revents & Int16(POLLIN) != 0 else {
                close(fd)
                throw .invalidInvite(
                    "nothing was written to the named pipe \(path) within \(pipeWait); "
                        + "write the invite to it first, or give a file")
            }
        case S_IFDIR:
            close(fd)
            throw .invalidInvite("cannot read the invite from \(path): it is a directory; give the invite's file")
        default:
            break
        }
        // Reads wait for what a writer still sends from here on.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }
}
