import Foundation

/// Hosts of our own for multi-host tests: network namespaces joined by veth links to a bridge in
/// a namespace of their own, so nothing touches the machine's real interfaces. Needs root and
/// iproute2; `unavailableReason` says why not when they are missing. Everything it makes is
/// named with a random tag and removed by `tearDown()`, or by the next lab if the process that
/// made it was killed (`LabRegistry`).
package final class NamespaceLab: @unchecked Sendable {
    package let tag: String
    package let hosts: [String]
    /// The address of each host, in a 10.213.X.0/24 subnet used only inside the lab.
    package let addresses: [String]
    private var created: [String] = []

    package static let ipCommand: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    package static var unavailableReason: String? {
        if getuid() != 0 { return "multi-host tests need root (network namespaces); skipped" }
        guard ipCommand != nil else { return "multi-host tests need iproute2's ip command; skipped" }
        return nil
    }

    package static var isAvailable: Bool { unavailableReason == nil }

    package init(hostCount: Int) throws {
        LabRegistry.sweepStale(ip: Self.ipCommand ?? "/usr/sbin/ip")
        let tag = String(UInt32.random(in: 0x1000...0xFFFF), radix: 16)
        self.tag = tag
        LabRegistry.register(tag: tag)
        hosts = (0..<hostCount).map { "gm\(tag)h\($0)" }
        let subnet = Int.random(in: 1...250)
        addresses = (0..<hostCount).map { "10.213.\(subnet).\($0 + 1)" }
        let bridgeSpace = bridgeNamespace
        do {
            try ip(["netns", "add", bridgeSpace]); created.append(bridgeSpace)
            try ip(["-n", bridgeSpace, "link", "add", "br0", "type", "bridge"])
            try ip(["-n", bridgeSpace, "link", "set", "br0", "up"])
            for (index, host) in hosts.enumerated() {
                try ip(["netns", "add", host]); created.append(host)
                let inside = "gm\(tag)v\(index)", outside = bridgePort(index)
                try ip([
                    "link", "add", inside, "netns", host, "type", "veth", "peer", "name", outside, "netns", bridgeSpace,
                ])
                try ip(["-n", host, "addr", "add", "\(addresses[index])/24", "dev", inside])
                try ip(["-n", host, "link", "set", inside, "up"])
                try ip(["-n", host, "link", "set", "lo", "up"])
                try ip(["-n", bridgeSpace, "link", "set", outside, "master", "br0"])
                try ip(["-n", bridgeSpace, "link", "set", outside, "up"])
            }
        } catch {
            tearDown()
            throw error
        }
    }

    /// The namespace of the bridge that joins the hosts (WANLink shapes and delays traffic there).
    package var bridgeNamespace: String { "gm\(tag)br" }

    /// Host `index`'s port on the bridge: the far end of its link.
    package func bridgePort(_ index: Int) -> String { "gm\(tag)p\(index)" }

    /// The prefix that runs a program inside host `index`.
    package func launcher(_ index: Int) -> [String] {
        [Self.ipCommand ?? "ip", "netns", "exec", hosts[index]]
    }

    package func tearDown() {
        for space in created.reversed() { try? ip(["netns", "del", space]) }
        created = []
        LabRegistry.unregister(tag: tag)
    }

    deinit { tearDown() }

    private func ip(_ arguments: [String]) throws {
        let result = try ChildProcess.run(Self.ipCommand ?? "/usr/sbin/ip", arguments)
        guard result.status == 0 else {
            throw NodeProcessError.exited(
                status: result.status, stderr: "ip \(arguments.joined(separator: " ")): \(result.stderr)")
        }
    }

}
