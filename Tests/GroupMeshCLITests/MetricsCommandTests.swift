import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
import MeshTestKit
import Testing

/// `run --metrics`: the node's figures over HTTP in Prometheus's format, checked by Prometheus's
/// own tools (Debian's package, fetched by scripts/prometheus-tools.sh) where they can be had.
@Suite("metrics with real processes", .serialized)
struct MetricsCommandTests {
    /// Runs `body` with alice and bob, each serving its metrics, in one mesh, and the URLs their
    /// `metrics:` lines gave.
    static func withMetricsPair(
        _ body: (ProcessMesh, _ aliceURL: String, _ bobURL: String) async throws -> Void
    )
        async throws
    {
        try await withProcessMesh(names: ["alice", "bob"], arguments: ["--metrics", "127.0.0.1:0"]) { mesh in
            let aliceURL = try await mesh["alice"].waitForLine(prefix: "metrics:")
            let bobURL = try await mesh["bob"].waitForLine(prefix: "metrics:")
            try await body(mesh, aliceURL, bobURL)
        }
    }

    /// `HOST:PORT` of a `http://HOST:PORT/metrics` URL.
    static func hostPort(_ url: String) -> String {
        url.replacingOccurrences(of: "http://", with: "").replacingOccurrences(of: "/metrics", with: "")
    }

    @Test(
        "run --metrics serves members, traffic by kind, round trips and deliveries; other paths and methods are refused"
    )
    func exposition() async throws {
        try await Self.withMetricsPair { mesh, aliceMetrics, bobMetrics in
            let bob = try mesh["bob"]
            #expect(
                aliceMetrics.hasPrefix("http://127.0.0.1:") && aliceMetrics.hasSuffix("/metrics"),
                "\(aliceMetrics)")

            try await waitUntil("alice's page shows 2 alive members") {
                try await Exposition.fetch(aliceMetrics).value(#"groupmesh_members{state="alive"}"#) == 2
            }
            let first = try await Exposition.fetch(aliceMetrics)
            let probes = try #require(first.value(#"groupmesh_datagrams_sent_total{kind="membership"}"#))
            try await waitUntil("alice's membership datagram count grows") {
                try await Exposition.fetch(aliceMetrics)
                    .value(#"groupmesh_datagrams_sent_total{kind="membership"}"#) ?? 0 > probes
            }
            try await waitUntil("alice measured a probe round trip") {
                try await Exposition.fetch(aliceMetrics).value("groupmesh_probe_rtt_seconds_count") ?? 0 >= 1
            }

            let send = try await NodeProcess.runCommand(["send", "--data-dir", bob.dataDirectory, "hello"])
            #expect(send.status == 0, "\(send.stderr)")
            try await waitUntil("bob counts the acknowledged message and alice the message datagram") {
                let bobPage = try await Exposition.fetch(bobMetrics)
                let alicePage = try await Exposition.fetch(aliceMetrics)
                return bobPage.value(#"groupmesh_reliable_messages_total{outcome="delivered"}"#) == 1
                    && alicePage.value(#"groupmesh_datagrams_received_total{kind="messages"}"#) ?? 0 >= 1
            }
            let page = try await Exposition.fetch(aliceMetrics)
            for family in [
                "groupmesh_attachments", "groupmesh_store_bytes", "groupmesh_store_free_bytes",
                "groupmesh_datagrams_dropped_total", "groupmesh_retransmissions_total",
                "groupmesh_suspicions_total", "groupmesh_refutations_total",
                "groupmesh_chunks_fetched_total",
            ] {
                #expect(page.text.contains("# HELP \(family) "), "no \(family) with help text in:\n\(page.text)")
            }

            let root = try await HTTP.request(aliceMetrics.replacingOccurrences(of: "/metrics", with: "/"))
            #expect(root.status == 404, "\(root)")
            let post = try await HTTP.request(aliceMetrics, method: "POST")
            #expect(post.status == 405, "\(post)")

            switch PrometheusTools.folder {
            case let .failure(reason):
                print("promtool check skipped: \(reason)")
            case let .success(folder):
                let check = try await PrometheusTools.check(page.text, promtool: folder + "/promtool")
                #expect(check.status == 0, "promtool check metrics: \(check.output)")
            }
        }
    }

    @Test("the exporter serves 16 connections at once; a 17th takes the place of the one waiting longest for a request")
    func connectionsAreCapped() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        let url = try await node.waitForLine(prefix: "metrics:")
        let port = try #require(UInt16(Self.hostPort(url).split(separator: ":").last ?? ""))
        let held = try (0..<16).map { _ in try LoopbackTCP(port: port) }
        // The 16 are accepted before the 17th comes: each answers a request.
        for connection in held {
            #expect(try connection.get("/metrics").hasPrefix("HTTP/1.1 200"), "a held connection")
        }
        let extra = try LoopbackTCP(port: port)
        #expect(try extra.get("/metrics").hasPrefix("HTTP/1.1 200"), "the 17th is served")
        _ = try held[0].readUntilClosed(timeout: .seconds(10))  // the one answered first went
    }

    @Test(
        "--metrics on a wildcard address warns in one line that everyone who reaches it reads the members; loopback does not"
    )
    func wildcardMetricsWarn() async throws {
        let open = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--metrics", "0.0.0.0:0"])
        defer { Task { await open.cleanUp() } }
        let warning = try await open.waitForLine(prefix: "groupmesh: warning: --metrics 0.0.0.0:0", onStderr: true)
        #expect(warning.contains("without authentication; bind 127.0.0.1"), "\(warning)")
        let local = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        defer { Task { await local.cleanUp() } }
        _ = try await local.waitForLine(prefix: "metrics:")
        #expect(!local.stderr.contains("warning: --metrics"), "\(local.stderr)")
    }

    @Test(
        "a client that pipelines requests and never reads is cut off, its answers bounded; one that dribbles bytes or idles is closed at the request deadline, and never keeps a scrape out"
    )
    func hostileMetricsClients() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        let url = try await node.waitForLine(prefix: "metrics:")
        let port = try #require(UInt16(Self.hostPort(url).split(separator: ":").last ?? ""))

        // 50,000 requests in one go, nothing read: once its answers wait (the kernel's buffers
        // full), the node cuts the client off instead of keeping them in memory (it grew by
        // hundreds of MiB before).
        let before = ProcessStats.memory(node.pid).resident
        let greedy = try LoopbackTCP(port: port, receiveTimeout: 20, receiveBuffer: 4096)
        greedy.sendWithoutWaiting(String(repeating: "GET /metrics HTTP/1.1\r\nHost: loopback\r\n\r\n", count: 50_000))
        try await waitUntil("the node cuts the client off", timeout: .seconds(30)) { greedy.isReset }
        let grown = ProcessStats.memory(node.pid).resident - before
        #expect(grown < 64, "the node kept \(Int(grown)) MiB of answers for a client that read none")

        // Sixteen slow clients, each with half a request line: a scrape still gets in, and each
        // of them is closed by the deadline however patient it is.
        let slow = try (0..<16).map { _ in try LoopbackTCP(port: port, receiveTimeout: 30) }
        for connection in slow { try connection.send("GET /metr") }
        #expect(try await HTTP.request(url).status == 200, "a scrape beside sixteen slow clients")
        let started = ContinuousClock.now
        // Closed with its half request unread, the node's side may reset rather than close.
        for connection in slow { #expect(connection.waitUntilClosedOrReset(), "a slow client was kept") }
        #expect(ContinuousClock.now - started < .seconds(25), "closed at the request deadline, not kept")
    }

    @Test("--metrics on a port in use stops the node in one line; a bad address is refused at parse time")
    func portInUse() async throws {
        let holder = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        defer { Task { await holder.cleanUp() } }
        let taken = Self.hostPort(try await holder.waitForLine(prefix: "metrics:"))
        let second = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--metrics", taken])
        defer { Task { await second.cleanUp() } }
        #expect(try await second.waitForExit() == 1)
        let lines = second.stderr.split(separator: "\n")
        #expect(
            lines.count == 1 && lines[0].contains("cannot listen on \(taken) (--metrics): the port is in use"),
            "\(second.stderr)")
        #expect(!second.stdout.contains("listening:"), "the node must not start: \(second.stdout)")

        let bad = try await NodeProcess.runCommand([
            "run", "--data-dir", NodeProcess.makeTemporaryDirectory(),
            "--metrics", "localhost",
        ])
        #expect(bad.status != 0 && bad.stderr.contains("invalid address 'localhost'"), "\(bad.stderr)")
    }

    @Test(
        "a real Prometheus scrapes two nodes: the members gauge and the datagram counters move",
        .enabled(if: PrometheusTools.isAvailable, Comment(rawValue: PrometheusTools.unavailableReason)))
    func prometheusScrapesTwoNodes() async throws {
        let folder = try PrometheusTools.folder.get()
        try await Self.withMetricsPair { _, aliceURL, bobURL in
            let targets = [aliceURL, bobURL].map(Self.hostPort)

            let server = try PrometheusServer(folder: folder, targets: targets)
            defer { server.stop() }
            try await waitUntil("Prometheus is ready", timeout: .seconds(60), every: .milliseconds(200)) {
                try await HTTP.request(server.url + "/-/ready").status == 200
            }
            try await waitUntil(
                "Prometheus scraped 2 alive members from both nodes", timeout: .seconds(60),
                every: .milliseconds(250)
            ) {
                let series = try await server.query(#"groupmesh_members{state="alive"}"#)
                return series.count == 2 && series.allSatisfy { $0.value == 2 }
            }
            let up = try await server.query("up")
            #expect(up.count == 2 && up.allSatisfy { $0.value == 1 }, "\(up)")
            let before = try await server.query(#"groupmesh_datagrams_sent_total{kind="membership"}"#)
            #expect(Set(before.map(\.instance)) == Set(targets), "\(before)")
            try await waitUntil(
                "both nodes' membership datagram counters move in Prometheus", timeout: .seconds(60),
                every: .milliseconds(250)
            ) {
                let now = try await server.query(#"groupmesh_datagrams_sent_total{kind="membership"}"#)
                return before.allSatisfy { old in now.contains { $0.instance == old.instance && $0.value > old.value } }
            }
            let received = try await server.query("sum by (instance) (groupmesh_datagrams_received_total)")
            #expect(received.count == 2 && received.allSatisfy { $0.value > 0 }, "\(received)")
        }
    }
}

/// A page of the text exposition format, read by metric and labels.
struct Exposition {
    let text: String

    static func fetch(_ url: String) async throws -> Exposition {
        let response = try await HTTP.request(url)
        guard response.status == 200 else { throw NodeProcessError.timeout("GET \(url): \(response.status)") }
        return Exposition(text: response.body)
    }

    /// The value of the sample written exactly `series` (name and labels as the page has them).
    func value(_ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }
}

/// A plain HTTP request to loopback, bounded by a timeout.
enum HTTP {
    static func request(_ url: String, method: String = "GET") async throws -> (status: Int, body: String) {
        guard let address = URL(string: url) else { throw NodeProcessError.timeout("bad URL \(url)") }
        var request = URLRequest(url: address, timeoutInterval: 10)
        request.httpMethod = method
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}

/// Debian's `prometheus` and `promtool`, on PATH or fetched into .build/tools by the script.
enum PrometheusTools {
    static let folder: Result<String, PrometheusUnavailable> = {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/prometheus-tools.sh").path
        guard let process = try? ChildProcess(executable: "/bin/bash", arguments: [script]) else {
            return .failure(PrometheusUnavailable(reason: "cannot run \(script)"))
        }
        let status = process.waitUntilExit()
        // The pipes drain after the exit (bounded).
        for _ in 0..<500 where !process.outputIsComplete { Thread.sleep(forTimeInterval: 0.01) }
        let folder = process.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        guard status == 0, !folder.isEmpty else {
            return .failure(
                PrometheusUnavailable(reason: process.standardError.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        return .success(folder)
    }()

    static var isAvailable: Bool { (try? folder.get()) != nil }
    static var unavailableReason: String {
        if case let .failure(error) = folder { return "needs Debian's prometheus package; skipped: \(error.reason)" }
        return ""
    }

    /// `promtool check metrics` over `exposition`.
    static func check(_ exposition: String, promtool: String) async throws -> (status: Int32, output: String) {
        let file = NodeProcess.makeTemporaryDirectory("promtool") + "/metrics.txt"
        defer { try? FileManager.default.removeItem(atPath: (file as NSString).deletingLastPathComponent) }
        try exposition.write(toFile: file, atomically: true, encoding: .utf8)
        let process = try ChildProcess(
            executable: "/bin/sh", arguments: ["-c", "\"$0\" check metrics < \"$1\"", promtool, file])
        let deadline = ContinuousClock.now + .seconds(30)
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning { process.signal(SIGKILL) }
        let status = process.waitUntilExit()
        for _ in 0..<500 where !process.outputIsComplete { try await Task.sleep(for: .milliseconds(10)) }
        return (status, process.standardOutput + process.standardError)
    }
}

struct PrometheusUnavailable: Error {
    var reason: String
}

/// A Prometheus server on loopback scraping `targets` every second, its data in a temporary dir.
final class PrometheusServer: Sendable {
    let url: String
    private let process: ChildProcess
    private let directory: String

    struct Sample: CustomStringConvertible {
        var instance: String
        var value: Double
        var description: String { "\(instance)=\(value)" }
    }

    init(folder: String, targets: [String]) throws {
        directory = NodeProcess.makeTemporaryDirectory("prometheus")
        let port = try Self.freePort()
        url = "http://127.0.0.1:\(port)"
        let config = """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: groupmesh
                static_configs:
                  - targets: [\(targets.map { "'\($0)'" }.joined(separator: ", "))]

            """
        try config.write(toFile: directory + "/prometheus.yml", atomically: true, encoding: .utf8)
        process = try ChildProcess(
            executable: folder + "/prometheus",
            arguments: [
                "--config.file=\(directory)/prometheus.yml", "--storage.tsdb.path=\(directory)/data",
                "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn",
            ])
    }

    func stop() {
        process.signal(SIGKILL)
        _ = process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// An instant query's samples, by the instance they were scraped from.
    func query(_ promQL: String) async throws -> [Sample] {
        var components = URLComponents(string: url + "/api/v1/query")
        components?.queryItems = [URLQueryItem(name: "query", value: promQL)]
        guard let address = components?.url?.absoluteString else { return [] }
        let response = try await HTTP.request(address)
        struct Answer: Decodable {
            struct Data: Decodable {
                struct Series: Decodable {
                    var metric: [String: String]
                    var value: [Value]
                }
                var result: [Series]
            }
            enum Value: Decodable {
                case number(Double), text(String)
                init(from decoder: any Decoder) throws {
                    let container = try decoder.singleValueContainer()
                    if let number = try? container.decode(Double.self) {
                        self = .number(number)
                    } else {
                        self = .text(try container.decode(String.self))
                    }
                }
            }
            var status: String
            var data: Data
        }
        let answer = try JSONDecoder().decode(Answer.self, from: Data(response.body.utf8))
        return answer.data.result.compactMap { series in
            guard series.value.count == 2, case let .text(text) = series.value[1], let value = Double(text) else {
                return nil
            }
            return Sample(instance: series.metric["instance"] ?? "", value: value)
        }
    }

    /// A TCP port nobody listens on now (the kernel's pick for a socket bound and closed).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NodeProcessError.timeout("socket: \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw NodeProcessError.timeout("bind: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A blocking TCP connection to loopback, for what URLSession hides (holding a connection open).
final class LoopbackTCP {
    private let fd: Int32

    /// `receiveBuffer`: a small one (set before connecting) makes a client that does not read
    /// fill up at once, as one across the internet would, not after loopback's megabytes.
    init(port: UInt16, receiveTimeout seconds: Int = 10, receiveBuffer: Int32? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NodeProcessError.timeout("socket: \(errno)") }
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            Glibc.close(fd)
            throw NodeProcessError.timeout("connect to 127.0.0.1:\(port): \(errno)")
        }
    }

    deinit { close() }

    private var closed = false
    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, 0) }
            guard sent > 0 else { throw NodeProcessError.timeout("send: \(errno)") }
            offset += sent
        }
    }

    /// Sends a GET and returns the first bytes of the answer (enough for the status line).
    func get(_ path: String) throws -> String {
        let request = Array("GET \(path) HTTP/1.1\r\nHost: loopback\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ Glibc.send(fd, $0.baseAddress, $0.count, 0) }) == request.count else {
            throw NodeProcessError.timeout("send: \(errno)")
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = recv(fd, &buffer, buffer.count, 0)
        return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
    }

    /// Whether the peer closed or reset the connection before the receive timeout (what it sent
    /// meanwhile is read and dropped).
    func waitUntilClosedOrReset() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 { continue }
            if count < 0, errno == EINTR { continue }
            return count == 0 || errno == ECONNRESET
        }
    }

    /// As much of `text` as the kernel takes now.
    func sendWithoutWaiting(_ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            }
            guard sent > 0 else { return }
            offset += sent
        }
    }

    /// The peer closed with our bytes unread, which resets the connection (probed without reading).
    var isReset: Bool {
        let probe: [UInt8] = [0x20]
        let sent = probe.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, 1, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        return sent < 0 && (errno == ECONNRESET || errno == EPIPE)
    }

    /// Everything the peer sends until it closes (bounded by the receive timeout).
    func readUntilClosed(timeout: Duration) throws -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 { return received }
            guard count > 0 else { throw NodeProcessError.timeout("no close within \(timeout): \(errno)") }
            received += buffer[..<count]
        }
    }
}
