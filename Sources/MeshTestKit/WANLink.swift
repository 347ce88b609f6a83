import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// Puts one host of a `NamespaceLab` behind an emulated WAN link: a delay (with jitter), random
/// loss, and a rate cap with a bounded queue, for a kernel without sch_netem. Everything happens
/// in the lab's bridge namespace, on the host's port, after packets have left their sender (a
/// packet held in the sender's own stack would count against its socket and slow TCP to a crawl):
///
/// - delay, jitter and loss: `tools/wanlink` (an NFQUEUE program, built on first use) holds each
///   packet for half the round trip, in each direction: iptables `mangle` rules send what the
///   host sends (PREROUTING, `--physdev-in` its port) and what it receives (POSTROUTING,
///   `--physdev-out`) to the queue, with `--queue-bypass`, so traffic passes if the program dies;
/// - the rate cap: `tc tbf` on the port's egress (the downlink), and on an ifb device that the
///   port's ingress is redirected to (the uplink); the queue is sized in time or bytes and drops
///   what overflows it, as a home router does.
///
/// `bench/wan-link-check.sh` checks the same set-up against ping and iperf3 (Docs/BENCHMARKS.md).
/// Needs root, iproute2, iptables and libnetfilter-queue-dev; `unavailableReason` says what is
/// missing. `tearDown()` (also on deinit) removes every rule, qdisc, device and process it made.
package final class WANLink: @unchecked Sendable {
    /// How the link behaves. Loss and the rate apply to each direction; the round trip is split
    /// evenly between them. Two hosts each behind a link add up their round trips.
    package struct Profile: Sendable, Equatable, CustomStringConvertible {
        package enum Queue: Sendable, Equatable {
            /// As long as the rate takes to send it (bytes = rate × duration).
            case milliseconds(Double)
            case bytes(Int)
        }

        package var roundTripMilliseconds: Double
        /// Each packet waits an extra uniform 0...jitter ms in each direction, but never overtakes
        /// the packet ahead of it (no reordering).
        package var jitterMilliseconds: Double
        /// Percent of packets dropped at random, in each direction (a round trip loses about twice).
        package var lossPercent: Double
        /// The cap in each direction, in Mbit/s (10^6 bits) of whole frames; nil: no cap.
        package var rateMbit: Double?
        /// The bottleneck's queue, used only with a rate cap.
        package var queue: Queue
        /// Segment offloaded (GSO) packets into wire-sized ones even without loss (with loss they
        /// always are), so that the receiver reads what it would read from the lossy twin.
        package var segmented = false

        package init(
            roundTripMilliseconds: Double, jitterMilliseconds: Double = 0, lossPercent: Double = 0,
            rateMbit: Double? = nil, queue: Queue = .milliseconds(100)
        ) {
            self.roundTripMilliseconds = roundTripMilliseconds
            self.jitterMilliseconds = jitterMilliseconds
            self.lossPercent = lossPercent
            self.rateMbit = rateMbit
            self.queue = queue
        }

        /// The same link given by its one-way delay.
        package static func oneWay(
            milliseconds: Double, jitterMilliseconds: Double = 0, lossPercent: Double = 0,
            rateMbit: Double? = nil, queue: Queue = .milliseconds(100)
        ) -> Profile {
            Profile(
                roundTripMilliseconds: 2 * milliseconds, jitterMilliseconds: jitterMilliseconds,
                lossPercent: lossPercent, rateMbit: rateMbit, queue: queue)
        }

        package var oneWayMilliseconds: Double { roundTripMilliseconds / 2 }

        // The links the bench and the WAN tests use.
        /// A long uncapped path: 50 ms round trip.
        package static let fiftyMs = Profile(roundTripMilliseconds: 50)
        /// The same with 1% random loss (each way).
        package static let fiftyMsLossy = Profile(roundTripMilliseconds: 50, lossPercent: 1)
        /// `fiftyMsLossy` without its loss: packets reach the receiver one by one, as they do there.
        package static let fiftyMsSegmented: Profile = {
            var profile = Profile(roundTripMilliseconds: 50)
            profile.segmented = true
            return profile
        }()
        /// A fast home line: 50 Mbit/s, 40 ms round trip, 100 ms queue.
        package static let home50 = Profile(roundTripMilliseconds: 40, rateMbit: 50, queue: .milliseconds(100))
        /// A slow, lossy home line: 10 Mbit/s, 80 ms round trip, 0.5% loss, 100 ms queue.
        package static let home10 = Profile(
            roundTripMilliseconds: 80, lossPercent: 0.5, rateMbit: 10,
            queue: .milliseconds(100))

        /// The tbf queue limit in bytes, for a capped link.
        var queueBytes: Int? {
            guard let rateMbit else { return nil }
            switch queue {
            case .bytes(let bytes): return max(bytes, 3000)
            case .milliseconds(let ms): return max(Int(rateMbit * 1e6 / 8 * ms / 1000), 3000)
            }
        }

        /// tbf's bucket: 2 ms of the rate, at least 8 KiB (a few frames).
        var burstBytes: Int? {
            guard let rateMbit else { return nil }
            return max(Int(rateMbit * 1e6 / 8 * 0.002), 8192)
        }

        package var description: String {
            var parts = ["RTT \(roundTripMilliseconds) ms"]
            if jitterMilliseconds > 0 { parts.append("jitter \(jitterMilliseconds) ms") }
            if lossPercent > 0 { parts.append("loss \(lossPercent)% each way") }
            if segmented, lossPercent == 0 { parts.append("segmented") }
            if let rateMbit, let queueBytes { parts.append("\(rateMbit) Mbit/s, queue \(queueBytes) B") }
            return parts.joined(separator: ", ")
        }
    }

    package let lab: NamespaceLab
    package let host: Int
    package let profile: Profile
    /// The emulator's summary line (packets, loss, how late its verdicts were), after `tearDown()`.
    package private(set) var emulatorSummary: String?

    /// How late, on average, the emulator let packets go (ms), after `tearDown()`. A busy machine
    /// makes it late (never early): above a few ms, the link added that much delay of its own,
    /// which a bench should report beside its figures (bench/wan-link-check.sh measures it under
    /// load).
    package var emulatorMeanLateMilliseconds: Double? {
        guard let summary = emulatorSummary, let range = summary.range(of: "after due: mean ") else { return nil }
        return Double(summary[range.upperBound...].prefix { $0.isNumber || $0 == "." })
    }

    private let queueNumber: Int
    private let ifbDevice: String
    private var emulator: ChildProcess?
    private var undo: [[String]] = []  // commands that remove what was set up, run in reverse

    /// Starts the emulator for `host` and applies `profile`. The emulator also stops by itself
    /// after `maxSeconds`, so a crashed test leaves nothing running for long.
    package init(lab: NamespaceLab, host: Int, profile: Profile, maxSeconds: Int = 600) throws {
        if let reason = Self.unavailableReason { throw NodeProcessError.exited(status: -1, stderr: reason) }
        guard lab.hosts.indices.contains(host) else {
            throw NodeProcessError.exited(status: -1, stderr: "the lab has no host \(host)")
        }
        self.lab = lab
        self.host = host
        self.profile = profile
        queueNumber = host + 1
        ifbDevice = "gm\(lab.tag)i\(host)"
        do { try start(maxSeconds: maxSeconds) } catch {
            tearDown()
            throw error
        }
    }

    deinit { tearDown() }

    private func start(maxSeconds: Int) throws {
        guard let binary = Self.emulatorBuild.path else {
            throw NodeProcessError.exited(status: -1, stderr: Self.emulatorBuild.problem ?? "no emulator")
        }
        let space = lab.bridgeNamespace, port = lab.bridgePort(host)
        try run(Self.ipPath, ["netns", "exec", space, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"])

        // The delay line first, then the rules that feed it: a rule without it lets packets pass.
        let process = try ChildProcess(
            executable: Self.ipPath,
            arguments: [
                "netns", "exec", space, binary, "--queue", "\(queueNumber)",
                "--delay", String(format: "%.3f", profile.oneWayMilliseconds),
                "--jitter", String(format: "%.3f", profile.jitterMilliseconds),
                "--loss", String(format: "%.4f", profile.lossPercent),
            ] + (profile.segmented ? ["--segment"] : []) + [
                "--max-seconds", "\(maxSeconds)", "--seed", "\(UInt32.random(in: 1...UInt32.max))",
            ])
        emulator = process
        var waited = 0
        while !process.standardOutput.contains("ready") && process.isRunning && waited < 500 {  // 5 s at most
            usleep(10_000)
            waited += 1
        }
        guard process.standardOutput.contains("ready") else {
            throw NodeProcessError.exited(
                status: process.terminationStatus ?? -1,
                stderr: "wanlink did not start: \(process.standardError)")
        }
        for (chain, match) in [("PREROUTING", "--physdev-in"), ("POSTROUTING", "--physdev-out")] {
            let rule = [
                chain, "-m", "physdev", match, port, "-j", "NFQUEUE", "--queue-num", "\(queueNumber)",
                "--queue-bypass",
            ]
            try inBridge(Self.iptablesPath, ["-t", "mangle", "-A"] + rule)
            undo.append([Self.iptablesPath, "-t", "mangle", "-D"] + rule)
        }

        guard let rate = profile.rateMbit, let limit = profile.queueBytes, let burst = profile.burstBytes else {
            return
        }
        let tbf = ["root", "tbf", "rate", "\(Int(rate * 1000))kbit", "burst", "\(burst)", "limit", "\(limit)"]
        // Downlink: the port's egress toward the host.
        try inBridge(Self.tcPath, ["qdisc", "add", "dev", port] + tbf)
        undo.append([Self.tcPath, "qdisc", "del", "dev", port, "root"])
        // Uplink: everything the host sends, redirected at the port's ingress to an ifb device.
        try inBridge(Self.ipPath, ["link", "add", ifbDevice, "type", "ifb"])
        undo.append([Self.ipPath, "link", "del", ifbDevice])
        try inBridge(Self.ipPath, ["link", "set", ifbDevice, "up"])
        try inBridge(Self.tcPath, ["qdisc", "add", "dev", ifbDevice] + tbf)
        try inBridge(Self.tcPath, ["qdisc", "add", "dev", port, "handle", "ffff:", "ingress"])
        undo.append([Self.tcPath, "qdisc", "del", "dev", port, "ingress"])
        try inBridge(
            Self.tcPath,
            [
                "filter", "add", "dev", port, "parent", "ffff:", "protocol", "all", "u32",
                "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifbDevice,
            ])
    }

    /// Removes the rules, qdiscs and device, then stops the emulator (it lets go of every packet
    /// it still holds) and keeps its summary line. Safe to call twice, and after the lab's own
    /// tearDown (the namespace is gone then; only the process is left to stop).
    package func tearDown() {
        for command in undo.reversed() {
            try? inBridge(command[0], Array(command.dropFirst()))
        }
        undo = []
        guard let process = emulator else { return }
        emulator = nil
        process.stop(with: SIGTERM)
        emulatorSummary = process.standardError.split(separator: "\n").last { $0.hasPrefix("wanlink:") }.map(
            String.init)
    }

    // MARK: - Availability and the emulator binary

    /// Why a WAN link cannot be set up here (printed as the skip reason of a test), or nil.
    package static var unavailableReason: String? {
        if let reason = NamespaceLab.unavailableReason {
            return reason.replacingOccurrences(of: "multi-host tests", with: "WAN link tests")
        }
        if tool("tc") == nil { return "WAN link tests need iproute2's tc; skipped" }
        if tool("iptables") == nil {
            return "WAN link tests need iptables (apt-get install iptables, or make deps as root); skipped"
        }
        if !FileManager.default.fileExists(atPath: "/proc/sys/net/bridge") {
            return "WAN link tests need bridge netfilter (br_netfilter) in the kernel; skipped"
        }
        return emulatorBuild.problem.map { "WAN link tests: \($0); skipped" }
    }

    package static var isAvailable: Bool { unavailableReason == nil }

    package static let ipPath = NamespaceLab.ipCommand ?? "/usr/sbin/ip"
    package static let tcPath = tool("tc") ?? "/usr/sbin/tc"
    static let iptablesPath = tool("iptables") ?? "/usr/sbin/iptables"

    private static func tool(_ name: String) -> String? {
        ["/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"].map { $0 + name }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }

    /// tools/wanlink, built once per source version into a directory of this user's
    /// (`$WANLINK_BIN` names a ready binary instead).
    static let emulatorBuild: (path: String?, problem: String?) = {
        let environment = ProcessInfo.processInfo.environment
        if let given = environment["WANLINK_BIN"] {
            return FileManager.default.isExecutableFile(atPath: given)
                ? (given, nil) : (nil, "WANLINK_BIN=\(given) is not executable")
        }
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("tools/wanlink/wanlink.c").path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: source),
            let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970
        else {
            return (nil, "the emulator's source \(source) is missing")
        }
        let directory = NSTemporaryDirectory() + "groupmesh-wanlink-\(getuid())"
        let binary = "\(directory)/wanlink-\(Int(modified))-\(attributes[.size] as? Int ?? 0)"
        if FileManager.default.isExecutableFile(atPath: binary) { return (binary, nil) }
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Built under a name of its own and renamed, so two test processes never see half a file.
        let partial = "\(binary).\(getpid())"
        let script =
            "pkg-config --exists libnetfilter_queue || { echo 'libnetfilter-queue-dev is missing (make deps installs it as root)'; exit 1; }; "
            + "cc -O2 -o \"$2\" \"$1\" $(pkg-config --cflags --libs libnetfilter_queue) 2>&1 && mv \"$2\" \"$3\""
        let built: (status: Int32, stdout: String, stderr: String)
        do {
            built = try ChildProcess.run(
                "/bin/sh", ["-c", script, "sh", source, partial, binary], timeout: .seconds(300))
        } catch {
            return (nil, "the emulator (tools/wanlink) did not build: \(error)")
        }
        guard built.status == 0, FileManager.default.isExecutableFile(atPath: binary) else {
            let why = built.stdout.split(separator: "\n").first.map(String.init) ?? "cc failed"
            return (nil, "the emulator (tools/wanlink) did not build: \(why)")
        }
        // Builds of other sources go once a day old: another checkout's tests (a clean clone's,
        // a worktree's) may be using theirs right now, and removing it failed their runs.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        where name.hasPrefix("wanlink-") && "\(directory)/\(name)" != binary && !name.contains(".") {
            let path = "\(directory)/\(name)"
            let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
            if let modified, Date().timeIntervalSince(modified) > 86_400 {
                try? FileManager.default.removeItem(atPath: path)
            }
        }
        return (binary, nil)
    }()

    // MARK: - Commands

    private func inBridge(_ executable: String, _ arguments: [String]) throws {
        try run(Self.ipPath, ["netns", "exec", lab.bridgeNamespace, executable] + arguments)
    }

    private func run(_ executable: String, _ arguments: [String]) throws {
        let result = try ChildProcess.run(executable, arguments)
        guard result.status == 0 else {
            throw NodeProcessError.exited(
                status: result.status, stderr: "\(arguments.joined(separator: " ")): \(result.stderr)")
        }
    }
}

extension NamespaceLab {
    /// A UDP socket that lives in host `index`'s network namespace, bound to its address, made by
    /// the calling process itself (a socket keeps the namespace it was made in). For probes
    /// through a `WANLink` with no program inside the host. The caller closes it.
    package func udpSocket(inHost index: Int, port: UInt16 = 0) throws -> Int32 {
        try makeUDPSocket(inNamespace: hosts[index], address: addresses[index], port: port)
    }
}

/// A UDP socket that lives in network namespace `space` (a name under /var/run/netns), bound to
/// `address:port`, made by the calling process itself: a socket keeps the namespace it was made
/// in. The caller closes it.
func makeUDPSocket(inNamespace space: String, address: String, port: UInt16) throws -> Int32 {
    typealias SetNamespace = @convention(c) (Int32, Int32) -> Int32
    let newNetworkNamespace: Int32 = 0x4000_0000  // CLONE_NEWNET
    guard let symbol = dlsym(nil, "setns") else {
        throw NodeProcessError.exited(status: -1, stderr: "setns is not available")
    }
    let setNamespace = unsafeBitCast(symbol, to: SetNamespace.self)
    // Only this thread switches, and switches back before returning (no await in between).
    let original = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)
    let target = open("/var/run/netns/\(space)", O_RDONLY | O_CLOEXEC)
    defer { if original >= 0 { close(original) }; if target >= 0 { close(target) } }
    guard original >= 0, target >= 0, setNamespace(target, newNetworkNamespace) == 0 else {
        throw NodeProcessError.exited(
            status: -1, stderr: "cannot enter the namespace \(space): \(String(cString: strerror(errno)))")
    }
    let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    let socketError = errno
    guard setNamespace(original, newNetworkNamespace) == 0 else {
        // This thread would stay in the lab; nothing sensible can continue on it.
        if fd >= 0 { close(fd) }
        throw NodeProcessError.exited(status: -1, stderr: "cannot return from the namespace \(space)")
    }
    guard fd >= 0 else {
        throw NodeProcessError.exited(status: -1, stderr: "socket: \(String(cString: strerror(socketError)))")
    }
    var socketAddress = sockaddr_in()
    socketAddress.sin_family = sa_family_t(AF_INET)
    socketAddress.sin_port = port.bigEndian
    inet_pton(AF_INET, address, &socketAddress.sin_addr)
    let bound = withUnsafePointer(to: &socketAddress) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else {
        let why = String(cString: strerror(errno))
        close(fd)
        throw NodeProcessError.exited(status: -1, stderr: "bind \(address):\(port) in \(space): \(why)")
    }
    return fd
}
