import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// Homes behind NAT routers, for NAT traversal with real processes, built from network
/// namespaces as `NamespaceLab` builds hosts, so nothing touches the machine's own interfaces:
///
/// - the **internet**: a bridge in a namespace of its own, 198.51.100.0/24 (a documentation range:
///   it exists only inside the lab). **Public hosts** sit on it directly, at 198.51.100.10, .11…;
///   every public host and router has a default route via 198.51.100.1 (the bridge's own address,
///   which forwards nothing), as machines on the internet do: a datagram to an address nobody
///   routes (another home's private one) leaves and is lost on the way, it does not fail at
///   `sendmsg` (ENETUNREACH). `defaultRoutes: false` leaves the routes out;
/// - **homes**: each a router namespace, its WAN leg on the bridge at 198.51.100.101, .102…, and a
///   host namespace behind it on a veth of their own: the host at a private address (10.0.K.2,
///   or 192.168.1.2 in every home with `identicalPrivateSubnets`), its default route via the router
///   (10.0.K.1); with `neighbours`, a second host at .3 on the same LAN (a bridge), which the
///   router does not hairpin to: a datagram from inside to the home's public address is the
///   router's own, and reaches neither host. The router forwards (`net.ipv4.ip_forward=1`), masquerades what leaves its WAN leg
///   (`iptables -t nat -A POSTROUTING -o WAN -j MASQUERADE`, with `--random-fully` for a
///   `symmetric` home: a new port per destination), and drops what comes in on the WAN leg that
///   answers no flow from inside, whether it is for the home (FORWARD) or for the router itself
///   (INPUT), as a home router's firewall does. Nothing on the internet has a route to a private
///   address, so a home is reached only through the mapping its router made.
///
///   The INPUT rule matters for hole punching: without it (`routerInputFirewall: false`, a Linux
///   box that only masquerades), the first punch to reach a router is delivered to the router
///   itself and conntrack keeps it as a flow; the home host's own punch back to that peer then
///   clashes with it, MASQUERADE gives it another port, and neither side's punches get through
///   for as long as they keep coming. Dropped in INPUT, the unsolicited datagram's flow is never
///   confirmed, and the punch back keeps its port.
///
/// Linux conntrack is what makes the mappings: a flow's mapping lives 30 s after its last packet
/// while unanswered, 120 s once answered both ways (`setUDPTimeouts` shortens them);
/// `flushConntrack` deletes a router's UDP mappings, as a router reboot or an expiry does.
///
/// Needs root, iproute2 and iptables (`unavailableReason`), `conntrack` for the conntrack helpers
/// (`conntrackUnavailableReason`). Everything is named with a random tag and removed by
/// `tearDown()` (also on deinit, and on a failure half way through `init`), or by the next lab
/// if the process that made it was killed (`LabRegistry`).
package final class NATLab: @unchecked Sendable {
    /// How a home's router maps its host's flows.
    package enum Mapping: String, Sendable {
        /// `MASQUERADE`: one mapping per inside socket, the inside port kept when free (what
        /// conntrack does by default): endpoint-independent, filtered by address and port.
        case endpointIndependent = "MASQUERADE"
        /// `MASQUERADE --random-fully`: a random port for every new flow, so each destination
        /// sees the host at another port.
        case symmetric = "MASQUERADE --random-fully"
    }

    /// A machine of the lab that programs run in.
    package enum Host: Sendable, Hashable, CustomStringConvertible {
        case publicHost(Int)
        case home(Int)
        /// A second host on home K's LAN (built with `neighbours`), beside `.home(K)`.
        case neighbour(Int)

        package var description: String {
            switch self {
            case let .publicHost(index): "public host \(index)"
            case let .home(index): "home \(index)"
            case let .neighbour(index): "home \(index)'s second host"
            }
        }
    }

    package struct Home: Sendable {
        package let mapping: Mapping
        /// The router's namespace, and the home's address on the internet: its WAN leg's, or its
        /// carrier's when it sits behind one.
        package let router: String
        package let publicAddress: String
        /// Behind a carrier-grade NAT (double NAT): the carrier router's namespace. The home
        /// router's WAN leg is then at `carrierSideAddress` (100.64.K.2, a CGNAT range) on a link
        /// to the carrier, which masquerades (endpoint-independent, with a firewall) onto the
        /// internet at `publicAddress`.
        package let carrier: String?
        package var carrierSideAddress: String? { carrier == nil ? nil : "100.64.\(index + 1).2" }
        let index: Int
        /// The router's interface on the internet (MASQUERADE's `-o`).
        package let wanInterface: String
        /// The home host's namespace, its private address, and the router's address inside.
        package let host: String
        package let privateAddress: String
        package let gateway: String
        /// A second host on the same LAN (a bridge on the router), at `neighbourAddress`: the
        /// router does not hairpin, so the two meet only at their private addresses.
        package let neighbour: String?
        package var neighbourAddress: String? { neighbour == nil ? nil : String(privateAddress.dropLast(2)) + ".3" }
    }

    package let tag: String
    /// Namespaces and addresses of the public hosts.
    package let publicHosts: [String]
    package let publicAddresses: [String]
    package let homes: [Home]
    private let defaultRoutes: Bool
    /// Per home: whether its router drops unsolicited datagrams to itself (see `init`).
    private let routerInputFirewalls: [Bool]
    private var created: [String] = []

    package static let internetPrefix = "198.51.100"
    /// The bridge's address on the internet: every default route's gateway.
    package static let internetGateway = "198.51.100.1"

    package static let iptablesCommand: String? = tool("iptables")
    package static let conntrackCommand: String? = tool("conntrack")
    package static let nftCommand: String? = tool("nft")
    package static let sysctlCommand: String = tool("sysctl") ?? "/sbin/sysctl"
    package static let tcCommand: String? = tool("tc")

    /// Why the lab cannot be built here (a test's skip reason), or nil.
    package static var unavailableReason: String? {
        if getuid() != 0 { return "NAT laboratory tests need root (network namespaces, iptables); skipped" }
        guard NamespaceLab.ipCommand != nil else { return "NAT laboratory tests need iproute2's ip command; skipped" }
        guard iptablesCommand != nil else {
            return "NAT laboratory tests need iptables (apt-get install iptables, or make deps as root); skipped"
        }
        return nil
    }

    package static var isAvailable: Bool { unavailableReason == nil }

    /// Why the conntrack helpers cannot run here (a NAT mapping cannot be made to expire), or nil.
    package static var conntrackUnavailableReason: String? {
        if let reason = unavailableReason { return reason }
        guard conntrackCommand != nil else {
            return
                "NAT laboratory tests that expire a mapping need the conntrack tool (apt-get install conntrack, or make deps as root); skipped"
        }
        return nil
    }

    /// Builds the lab: `publicHosts` hosts on the internet, one home per entry of `homes`.
    package init(
        publicHosts publicCount: Int, homes mappings: [Mapping], identicalPrivateSubnets: Bool = false,
        defaultRoutes: Bool = true, routerInputFirewall: Bool = true,
        routerInputFirewalls: [Bool]? = nil, carrierNAT: [Bool]? = nil, neighbours: Set<Int> = []
    ) throws {
        if let reason = Self.unavailableReason { throw NodeProcessError.exited(status: -1, stderr: reason) }
        guard publicCount >= 0, publicCount <= 80, mappings.count <= 80,
            (routerInputFirewalls?.count ?? mappings.count) == mappings.count,
            (carrierNAT?.count ?? mappings.count) == mappings.count
        else {
            throw NodeProcessError.exited(
                status: -1, stderr: "NATLab: at most 80 public hosts and 80 homes, one firewall setting per home")
        }
        LabRegistry.sweepStale(ip: NamespaceLab.ipCommand ?? "/usr/sbin/ip")
        let tag = String(UInt32.random(in: 0x1000...0xFFFF), radix: 16)
        self.tag = tag
        LabRegistry.register(tag: tag)
        publicHosts = (0..<publicCount).map { "gm\(tag)pub\($0)" }
        publicAddresses = (0..<publicCount).map { "\(Self.internetPrefix).\(10 + $0)" }
        homes = mappings.enumerated().map { index, mapping in
            let subnet = identicalPrivateSubnets ? "192.168.1" : "10.0.\(index + 1)"
            return Home(
                mapping: mapping, router: "gm\(tag)rtr\(index)", publicAddress: "\(Self.internetPrefix).\(101 + index)",
                carrier: carrierNAT?[index] == true ? "gm\(tag)cgn\(index)" : nil, index: index,
                wanInterface: "gm\(tag)w\(index)", host: "gm\(tag)home\(index)",
                privateAddress: "\(subnet).2", gateway: "\(subnet).1",
                neighbour: neighbours.contains(index) ? "gm\(tag)nbr\(index)" : nil)
        }
        self.defaultRoutes = defaultRoutes
        // One setting for every home, or one per home (a matrix of router kinds).
        self.routerInputFirewalls = routerInputFirewalls ?? Array(repeating: routerInputFirewall, count: mappings.count)
        do { try build() } catch {
            tearDown()
            throw error
        }
    }

    /// The namespace of the bridge that is the internet.
    package var internetNamespace: String { "gm\(tag)net" }

    private func build() throws {
        let internet = internetNamespace
        try ip(["netns", "add", internet]); created.append(internet)
        try ip(["-n", internet, "link", "add", "br0", "type", "bridge"])
        try ip(["-n", internet, "addr", "add", "\(Self.internetGateway)/24", "dev", "br0"])
        try ip(["-n", internet, "link", "set", "br0", "up"])
        // The first router beyond a home, as an ISP's is: a datagram that left its home with a TTL
        // of 1 dies there (the bridge forwards frames without counting hops). Short-lived
        // punches rely on it, as they rely on the ISP's router on the internet.
        if let nft = Self.nftCommand {
            try check(
                run(
                    in: internet, nft,
                    [
                        "add table bridge isp; add chain bridge isp forward { type filter hook forward priority 0; }; add rule bridge isp forward ip ttl 1 drop"
                    ]))
        }
        // A public host or router's leg on the bridge.
        func attach(_ space: String, interface: String, port: String, address: String) throws {
            try ip(["link", "add", interface, "netns", space, "type", "veth", "peer", "name", port, "netns", internet])
            try ip(["-n", space, "addr", "add", "\(address)/24", "dev", interface])
            try ip(["-n", space, "link", "set", interface, "up"])
            try ip(["-n", space, "link", "set", "lo", "up"])
            try ip(["-n", internet, "link", "set", port, "master", "br0"])
            try ip(["-n", internet, "link", "set", port, "up"])
            if defaultRoutes { try ip(["-n", space, "route", "add", "default", "via", Self.internetGateway]) }
        }
        for (index, space) in publicHosts.enumerated() {
            try ip(["netns", "add", space]); created.append(space)
            try attach(
                space, interface: "gm\(tag)v\(index)", port: "gm\(tag)p\(index)", address: publicAddresses[index])
        }
        for (index, home) in homes.enumerated() {
            try ip(["netns", "add", home.router]); created.append(home.router)
            if let carrier = home.carrier, let carrierSide = home.carrierSideAddress {
                try buildCarrier(carrier, for: home, carrierSide: carrierSide, attach: attach)
            } else {
                try attach(
                    home.router, interface: home.wanInterface, port: "gm\(tag)q\(index)", address: home.publicAddress)
            }
            try buildLAN(of: home)
            try check(run(in: home.router, Self.sysctlCommand, ["-qw", "net.ipv4.ip_forward=1"]))
            let iptables = Self.iptablesCommand ?? "/usr/sbin/iptables"
            var masquerade = ["-t", "nat", "-A", "POSTROUTING", "-o", home.wanInterface, "-j", "MASQUERADE"]
            if home.mapping == .symmetric { masquerade.append("--random-fully") }
            try check(run(in: home.router, iptables, masquerade))
            // A home router's firewall: only what answers a flow from inside comes in, to the
            // home or to the router itself (OpenWrt's wan zone: input and forward rejected).
            let chains = routerInputFirewalls[index] ? ["FORWARD", "INPUT"] : ["FORWARD"]
            for chain in chains {
                try check(
                    run(
                        in: home.router, iptables,
                        [
                            "-A", chain, "-i", home.wanInterface, "-m", "conntrack",
                            "!", "--ctstate", "ESTABLISHED,RELATED", "-j", "DROP",
                        ]))
            }
        }
    }

    /// The home's LAN: its host on a veth to the router (the router's leg named `gm<tag>l<K>`,
    /// where miniupnpd listens), or, with a neighbour, both hosts on a bridge of that name.
    private func buildLAN(of home: Home) throws {
        let lan = "gm\(tag)l\(home.index)"
        var hosts = [(space: home.host, address: home.privateAddress, inside: "gm\(tag)e\(home.index)")]
        if let neighbour = home.neighbour, let address = home.neighbourAddress {
            hosts.append((neighbour, address, "gm\(tag)f\(home.index)"))
            try ip(["-n", home.router, "link", "add", lan, "type", "bridge"])
        }
        for (number, host) in hosts.enumerated() {
            try ip(["netns", "add", host.space]); created.append(host.space)
            let routerLeg = hosts.count == 1 ? lan : "gm\(tag)\(number == 0 ? "a" : "b")\(home.index)"
            try ip([
                "link", "add", routerLeg, "netns", home.router, "type", "veth", "peer", "name", host.inside, "netns",
                host.space,
            ])
            if hosts.count > 1 { try ip(["-n", home.router, "link", "set", routerLeg, "master", lan]) }
            try ip(["-n", home.router, "link", "set", routerLeg, "up"])
            try ip(["-n", host.space, "addr", "add", "\(host.address)/24", "dev", host.inside])
            try ip(["-n", host.space, "link", "set", host.inside, "up"])
            try ip(["-n", host.space, "link", "set", "lo", "up"])
            try ip(["-n", host.space, "route", "add", "default", "via", home.gateway])
        }
        try ip(["-n", home.router, "addr", "add", "\(home.gateway)/24", "dev", lan])
        try ip(["-n", home.router, "link", "set", lan, "up"])
    }

    /// A carrier router between a home router and the internet: its own leg on the bridge at the
    /// home's public address, a link to the home router (100.64.K.0/24), MASQUERADE onto the
    /// internet and a firewall, as a carrier-grade NAT.
    private func buildCarrier(
        _ carrier: String, for home: Home, carrierSide: String,
        attach: (String, String, String, String) throws -> Void
    ) throws {
        try ip(["netns", "add", carrier]); created.append(carrier)
        let wan = "gm\(tag)c\(home.index)"
        try attach(carrier, wan, "gm\(tag)k\(home.index)", home.publicAddress)
        let inside = "gm\(tag)d\(home.index)"
        let carrierAddress = "100.64.\(home.index + 1).1"
        try ip([
            "link", "add", inside, "netns", carrier, "type", "veth", "peer", "name", home.wanInterface, "netns",
            home.router,
        ])
        try ip(["-n", carrier, "addr", "add", "\(carrierAddress)/24", "dev", inside])
        try ip(["-n", carrier, "link", "set", inside, "up"])
        try ip(["-n", home.router, "addr", "add", "\(carrierSide)/24", "dev", home.wanInterface])
        try ip(["-n", home.router, "link", "set", home.wanInterface, "up"])
        try ip(["-n", home.router, "link", "set", "lo", "up"])
        try ip(["-n", home.router, "route", "add", "default", "via", carrierAddress])
        try check(run(in: carrier, Self.sysctlCommand, ["-qw", "net.ipv4.ip_forward=1"]))
        let iptables = Self.iptablesCommand ?? "/usr/sbin/iptables"
        try check(run(in: carrier, iptables, ["-t", "nat", "-A", "POSTROUTING", "-o", wan, "-j", "MASQUERADE"]))
        for chain in ["FORWARD", "INPUT"] {
            try check(
                run(
                    in: carrier, iptables,
                    [
                        "-A", chain, "-i", wan, "-m", "conntrack",
                        "!", "--ctstate", "ESTABLISHED,RELATED", "-j", "DROP",
                    ]))
        }
    }

    // MARK: - Hosts

    /// The namespace programs of `host` run in.
    package func namespace(_ host: Host) -> String {
        switch host {
        case let .publicHost(index): publicHosts[index]
        case let .home(index): homes[index].host
        case let .neighbour(index): homes[index].neighbour ?? homes[index].host
        }
    }

    /// The host's own address (a home host's is private).
    package func address(_ host: Host) -> String {
        switch host {
        case let .publicHost(index): publicAddresses[index]
        case let .home(index): homes[index].privateAddress
        case let .neighbour(index): homes[index].neighbourAddress ?? homes[index].privateAddress
        }
    }

    /// The prefix that runs a program inside `host` (for `NodeProcess(launcher:)`).
    package func launcher(_ host: Host) -> [String] {
        [NamespaceLab.ipCommand ?? "ip", "netns", "exec", namespace(host)]
    }

    /// Runs `executable ARGUMENTS` inside namespace `space` to completion, killed after `timeout`.
    @discardableResult
    package func run(
        in space: String, _ executable: String, _ arguments: [String], timeout: Duration = .seconds(20)
    ) throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        try ChildProcess.run(
            NamespaceLab.ipCommand ?? "/usr/sbin/ip", ["netns", "exec", space, executable] + arguments,
            timeout: timeout)
    }

    /// Runs a program inside `host`.
    @discardableResult
    package func run(
        on host: Host, _ executable: String, _ arguments: [String], timeout: Duration = .seconds(20)
    ) throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        try run(in: namespace(host), executable, arguments, timeout: timeout)
    }

    // MARK: - Routers' conntrack

    /// Deletes every UDP mapping (conntrack entry) of home `index`'s router, as an expiry or a
    /// router reboot would: the next datagram out gets a new mapping (the same port, when free),
    /// and what answered the old one is dropped until then. Returns how many entries went.
    @discardableResult
    package func flushConntrack(home index: Int) throws -> Int {
        let result = try run(in: homes[index].router, conntrack(), ["-D", "-p", "udp"])
        // "conntrack v1.4.7 (conntrack-tools): 3 flow entries have been deleted." (status 1 for 0).
        let words = result.stderr.split(separator: " ")
        guard let index = words.firstIndex(of: "flow"), index > 0, let count = Int(words[index - 1]) else {
            throw NodeProcessError.exited(status: result.status, stderr: "conntrack -D: \(result.stderr)")
        }
        return count
    }

    /// From now on home `index`'s router maps its host's new UDP flows to `port` on its public
    /// address (for every destination: still endpoint-independent), where MASQUERADE kept the
    /// inside port. With `flushConntrack` after it, the router maps elsewhere after its mappings
    /// expired, as a rebooted NAT or one that allocates ports as it likes does; a flush alone
    /// gives the same port back (Linux keeps a free inside port), so nothing outside notices.
    package func mapToPort(home index: Int, _ port: UInt16) throws {
        let iptables = Self.iptablesCommand ?? "/usr/sbin/iptables"
        try check(
            run(
                in: homes[index].router, iptables,
                [
                    "-t", "nat", "-I", "POSTROUTING", "1", "-o", homes[index].wanInterface,
                    "-p", "udp", "-j", "MASQUERADE", "--to-ports", "\(port)",
                ]))
    }

    /// The UDP mappings of home `index`'s router (`conntrack -L -p udp`, one line each).
    package func conntrackEntries(home index: Int) throws -> [String] {
        let result = try run(in: homes[index].router, conntrack(), ["-L", "-p", "udp"])
        try check(result)
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// Sets how long home `index`'s router keeps a UDP mapping after its last packet: `unreplied`
    /// for a flow answered in one direction only (Linux: 30 s), `replied` for one answered both
    /// ways (Linux: 120 s). Per namespace: only this router changes.
    package func setUDPTimeouts(home index: Int, unreplied: Int, replied: Int) throws {
        try check(
            run(
                in: homes[index].router, Self.sysctlCommand,
                [
                    "-qw", "net.netfilter.nf_conntrack_udp_timeout=\(unreplied)",
                    "net.netfilter.nf_conntrack_udp_timeout_stream=\(replied)",
                ]))
    }

    private func conntrack() throws -> String {
        guard let command = Self.conntrackCommand else {
            throw NodeProcessError.exited(status: -1, stderr: Self.conntrackUnavailableReason ?? "no conntrack")
        }
        return command
    }

    // MARK: - Raw sockets

    /// A UDP socket in `host`'s namespace, bound to 0.0.0.0:`port`, made by this process (for
    /// raw traffic through the NATs with no program inside). The caller closes it.
    package func udpSocket(on host: NATLab.Host, port: UInt16) throws -> Int32 {
        try makeUDPSocket(inNamespace: namespace(host), address: "0.0.0.0", port: port)
    }

    /// Opens a path for raw UDP between two homes' sockets (both bound to `port`, made with
    /// `udpSocket`), in the one order Linux NAT lets through: `first` sends to the other router
    /// (its own router maps it; the other router's firewall drops it before conntrack keeps it),
    /// then `second` answers through the mapping that made. True once each side heard the other.
    package func punchRaw(_ first: (home: Int, fd: Int32), _ second: (home: Int, fd: Int32), port: UInt16) -> Bool {
        func send(_ fd: Int32, to home: Int) {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            inet_pton(AF_INET, homes[home].publicAddress, &address.sin_addr)
            let byte: [UInt8] = [0x70]
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, byte, 1, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        func heard(_ fd: Int32) -> Bool {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) == 1 else { return false }
            var scratch = [UInt8](repeating: 0, count: 65_536)
            return recv(fd, &scratch, scratch.count, 0) > 0
        }
        for _ in 0..<10 {
            send(first.fd, to: second.home)
            usleep(20_000)
            send(second.fd, to: first.home)
            if heard(first.fd) {
                send(first.fd, to: second.home)
                if heard(second.fd) { return true }
            }
        }
        return false
    }

    // MARK: - Line rates

    /// Caps home `index`'s line at `bytesPerSecond` each way, as a home line's rate would: a
    /// token bucket filter (`tc tbf`, 50 ms of queue) on the router's leg on the internet (what
    /// the home sends) and on the bridge's port to it (what it receives). Nil removes both.
    package func capLine(home index: Int, bytesPerSecond: Int?) throws {
        guard let tc = Self.tcCommand else {
            throw NodeProcessError.exited(status: -1, stderr: "capping a line needs iproute2's tc")
        }
        let home = homes[index]
        guard home.carrier == nil else {
            throw NodeProcessError.exited(
                status: -1, stderr: "NATLab: a home behind a carrier NAT has no line to cap here")
        }
        for (space, device) in [(home.router, home.wanInterface), (internetNamespace, "gm\(tag)q\(index)")] {
            guard let rate = bytesPerSecond else {
                _ = try run(in: space, tc, ["qdisc", "del", "dev", device, "root"])
                continue
            }
            // A burst of a few jumbo GSO segments, and never less than a millisecond's worth.
            let burst = max(64 << 10, rate / 1000)
            try check(
                run(
                    in: space, tc,
                    [
                        "qdisc", "replace", "dev", device, "root", "tbf", "rate", "\(rate * 8)bit",
                        "burst", "\(burst)", "latency", "50ms",
                    ]))
        }
    }

    // MARK: - Tear down

    package func tearDown() {
        for space in created.reversed() { try? ip(["netns", "del", space]) }
        created = []
        LabRegistry.unregister(tag: tag)
    }

    deinit { tearDown() }

    // MARK: - Commands

    private func ip(_ arguments: [String]) throws {
        let result = try ChildProcess.run(NamespaceLab.ipCommand ?? "/usr/sbin/ip", arguments)
        guard result.status == 0 else {
            throw NodeProcessError.exited(
                status: result.status, stderr: "ip \(arguments.joined(separator: " ")): \(result.stderr)")
        }
    }

    private func check(_ result: (status: Int32, stdout: String, stderr: String)) throws {
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
    }

    private static func tool(_ name: String) -> String? {
        ["/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"].map { $0 + name }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }
}
