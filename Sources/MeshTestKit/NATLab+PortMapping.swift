import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// A home router that grants port mappings: a real `miniupnpd` (UPnP IGD, NAT-PMP and PCP) in a
/// home's router namespace, listening on its LAN leg, its WAN leg the external interface.
///
/// Debian's miniupnpd is the nftables build: it writes its redirections into `table inet filter`
/// (its default `upnp_table_name` and `upnp_nat_table_name`), chains `prerouting_miniupnpd` (DNAT)
/// and `miniupnpd` (filter accept), which must exist and be hooked: `prerouting_miniupnpd` from a
/// nat prerouting chain, `miniupnpd` from a filter forward chain. The lab's home firewall (the
/// iptables FORWARD drop of what answers no flow from inside) sits in another table, so it would
/// still drop the forwarded datagrams: a rule before it accepts what was DNATed (as OpenWrt's
/// `ct status dnat accept` does). miniupnpd also refuses an external address in a reserved range,
/// as the lab's internet (198.51.100.0/24) is, unless a STUN server tells it that address is
/// reachable: 2.3.1 has no option to allow it otherwise. So each start answers its STUN check
/// from the internet's own address (a minimal responder in this process, ignoring CHANGE-REQUEST,
/// which tells miniupnpd the WAN leg is reachable unfiltered) until miniupnpd is up.
extension NATLab {
    package static let miniupnpdCommand: String? = ["/usr/sbin/miniupnpd", "/sbin/miniupnpd"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Why a router cannot run miniupnpd here (a test's skip reason), or nil.
    package static var miniupnpdUnavailableReason: String? {
        if let reason = unavailableReason { return reason }
        guard miniupnpdCommand != nil, nftCommand != nil else {
            return
                "port-mapping laboratory tests need miniupnpd and nft (apt-get install miniupnpd nftables, or make deps as root); skipped"
        }
        return nil
    }

    /// Starts miniupnpd on home `index`'s router. `natpmp`: NAT-PMP and PCP on port 5351 (one
    /// switch in miniupnpd); `upnp`: UPnP IGD (SSDP and HTTP). Returns once it listens.
    package func startMiniupnpd(home index: Int, natpmp: Bool = true, upnp: Bool = true) throws -> Miniupnpd {
        guard let miniupnpd = Self.miniupnpdCommand, let nft = Self.nftCommand else {
            throw NodeProcessError.exited(status: -1, stderr: Self.miniupnpdUnavailableReason ?? "no miniupnpd")
        }
        let home = homes[index]
        let lan = "gm\(tag)l\(index)"
        // The chains miniupnpd writes to, hooked. Made anew at each start: a restart finds none
        // of the last run's redirections.
        _ = try? run(in: home.router, nft, ["delete", "table", "inet", "filter"])
        let directory = NodeProcess.makeTemporaryDirectory("miniupnpd")
        let rules = """
            table inet filter {
              chain forward { type filter hook forward priority 0; policy accept; jump miniupnpd; }
              chain miniupnpd { }
              chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_miniupnpd; }
              chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_miniupnpd; }
              chain prerouting_miniupnpd { }
              chain postrouting_miniupnpd { }
            }

            """
        try rules.write(toFile: directory + "/rules.nft", atomically: true, encoding: .utf8)
        try checked(run(in: home.router, nft, ["-f", directory + "/rules.nft"]), "nft -f")
        let iptables = Self.iptablesCommand ?? "/usr/sbin/iptables"
        let accept = ["FORWARD", "-i", home.wanInterface, "-m", "conntrack", "--ctstate", "DNAT", "-j", "ACCEPT"]
        if (try? run(in: home.router, iptables, ["-C"] + accept))?.status != 0 {
            try checked(
                run(in: home.router, iptables, ["-I", accept[0], "1"] + accept.dropFirst()), "iptables -I FORWARD")
        }

        // The router's own datagrams leave from its own address unmasqueraded, as a home router's
        // do: `--random-fully` would otherwise give miniupnpd's STUN check a new port per
        // destination, and it refuses to forward behind what looks like another symmetric NAT.
        let wanAddress = home.carrierSideAddress ?? home.publicAddress
        let own = ["POSTROUTING", "-o", home.wanInterface, "-s", wanAddress, "-j", "RETURN"]
        if (try? run(in: home.router, iptables, ["-t", "nat", "-C"] + own))?.status != 0 {
            try checked(
                run(in: home.router, iptables, ["-t", "nat", "-I", own[0], "1"] + own.dropFirst()),
                "iptables -t nat -I POSTROUTING")
        }

        let stun = try STUNResponder.start(namespace: internetNamespace, address: Self.internetGateway)
        defer { stun.stop() }
        let subnet = home.gateway.split(separator: ".").prefix(3).joined(separator: ".") + ".0/24"
        let configuration = """
            ext_ifname=\(home.wanInterface)
            listening_ip=\(lan)
            enable_natpmp=\(natpmp ? "yes" : "no")
            enable_upnp=\(upnp ? "yes" : "no")
            ext_perform_stun=yes
            ext_stun_host=\(Self.internetGateway)
            ext_stun_port=\(stun.port)
            secure_mode=yes
            system_uptime=no
            min_lifetime=2
            uuid=\(UUID().uuidString.lowercased())
            allow 1024-65535 \(subnet) 1024-65535
            deny 0-65535 0.0.0.0/0 0-65535

            """
        try configuration.write(toFile: directory + "/miniupnpd.conf", atomically: true, encoding: .utf8)
        let process = try ChildProcess(
            executable: NamespaceLab.ipCommand ?? "/usr/sbin/ip",
            arguments: [
                "netns", "exec", home.router, miniupnpd, "-d", "-f", directory + "/miniupnpd.conf",
                "-P", directory + "/miniupnpd.pid",
            ])
        let daemon = Miniupnpd(process: process, directory: directory, router: home.router, gateway: home.gateway)
        // Up once it listens on what it serves (after the STUN check, which takes a moment).
        let ready = natpmp ? "Listening for NAT-PMP/PCP traffic" : "HTTP listening on port"
        let deadline = ContinuousClock.now + .seconds(15)
        while !process.standardError.contains(ready) {
            guard process.isRunning, ContinuousClock.now < deadline else {
                daemon.stop()
                throw NodeProcessError.exited(
                    status: process.terminationStatus ?? -1,
                    stderr: "miniupnpd did not start: \(process.standardError.suffix(2000))")
            }
            usleep(20_000)
        }
        guard process.standardError.contains("Port forwarding is now enabled") else {
            daemon.stop()
            throw NodeProcessError.exited(
                status: -1, stderr: "miniupnpd refuses to forward: \(process.standardError.suffix(2000))")
        }
        return daemon
    }

    /// The UDP redirections (DNAT) miniupnpd holds on home `index`'s router, one line each.
    package func redirections(home index: Int) throws -> [String] {
        guard let nft = Self.nftCommand else { return [] }
        let result = try run(in: homes[index].router, nft, ["list", "chain", "inet", "filter", "prerouting_miniupnpd"])
        return result.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            $0.contains("dnat")
        }
    }

    private func checked(_ result: (status: Int32, stdout: String, stderr: String), _ what: String) throws {
        guard result.status == 0 else {
            throw NodeProcessError.exited(status: result.status, stderr: "\(what): \(result.stderr)")
        }
    }
}

/// A miniupnpd running in a router namespace (`NATLab.startMiniupnpd`).
package final class Miniupnpd: @unchecked Sendable {
    let process: ChildProcess
    let directory: String
    package let router: String
    /// The router's LAN address: the home's gateway.
    package let gateway: String

    init(process: ChildProcess, directory: String, router: String, gateway: String) {
        (self.process, self.directory, self.router, self.gateway) = (process, directory, router, gateway)
    }

    /// What it logged (it runs in the foreground, logging to stderr).
    package var log: String { process.standardError }

    /// The device description's URL, for `upnpc -u`.
    package var descriptionURL: String? {
        guard let range = log.range(of: "HTTP listening on port ") else { return nil }
        let port = log[range.upperBound...].prefix { $0.isNumber }
        return "http://\(gateway):\(port)/rootDesc.xml"
    }

    /// Stops it (SIGTERM, then SIGKILL): it removes its redirections on the way out.
    package func stop() {
        process.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { if process.isRunning { stop() } }
}

/// Answers STUN binding requests (RFC 5389) with the source address, ignoring every attribute
/// (CHANGE-REQUEST included): enough for miniupnpd's check of its external address.
enum STUNResponder {
    static func start(namespace: String, address: String) throws -> UDPResponder {
        try UDPResponder(namespace: namespace, address: address, port: 0) { request, source in
            // A binding request: type 0x0001, the magic cookie, a 12-byte transaction id.
            guard request.count >= 20, request[0] == 0, request[1] == 1, request[4...7] == [0x21, 0x12, 0xA4, 0x42]
            else {
                return []
            }
            let port = UInt16(bigEndian: source.sin_port) ^ 0x2112
            let host = UInt32(bigEndian: source.sin_addr.s_addr) ^ 0x2112_A442
            var answer: [UInt8] = [0x01, 0x01, 0, 12] + request[4..<20]
            answer += [
                0x00, 0x20, 0, 8, 0, 1, UInt8(port >> 8), UInt8(port & 0xFF),
                UInt8(host >> 24), UInt8(host >> 16 & 0xFF), UInt8(host >> 8 & 0xFF), UInt8(host & 0xFF),
            ]
            return [answer]
        }
    }
}
