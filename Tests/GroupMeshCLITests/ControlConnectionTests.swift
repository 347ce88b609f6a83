import Foundation
import GroupMesh
import MeshTestKit
import Testing

/// The control socket under clients that misbehave: a `listen` that
/// stops reading, and connections opened and left idle until the node runs out of descriptors.
@Suite("control connections that stall or idle cannot exhaust the node", .serialized)
struct ControlConnectionTests {
    @Test("a listen that stops reading: a dropped line when it reads again, disconnected far behind, memory bounded")
    func stalledListenIsBounded() async throws {
        let (first, second, _) = try await HostileMemberTests.startPair("first", "second")
        let nodes = [first.node, second.node]
        defer { for node in nodes { Task { await node.cleanUp() } } }
        try await nodes.waitForMesh(alive: 2, timeout: .seconds(30))

        let listener = try RawControlConnection(dataDirectory: first.node.dataDirectory)
        try listener.write(#"{"command":"listen"}"# + "\n")
        #expect(try listener.readLines(count: 1).first?.contains("subscribed") == true)
        let residentBefore = ProcessStats.memory(first.node.pid).resident

        // 150 messages of 128 KiB while the client reads nothing: the node writes what fits in
        // the channel's buffer (1 MiB) and the sockets, and counts the rest.
        let sender = ControlClient(directory: DataDirectory(path: second.node.dataDirectory))
        let body = Array(repeating: UInt8(ascii: "m"), count: 128 * 1024)
        let started = ContinuousClock.now
        try await Self.send(150, body, from: sender)
        try await first.node.waitForStatus(timeout: .seconds(30), "messages dropped for the stalled listen") {
            HostileMemberTests.counter($0, "messagesDroppedForSlowReaders") > 0
        }
        // Reading again: the messages that were written, then one line saying how many were not.
        var messages = 0, dropped = 0
        while messages + dropped < 150 {
            for line in try listener.readLines(count: 1) {
                let response = try JSONDecoder().decode(ControlResponse.self, from: Data(line.utf8))
                switch response {
                case .message: messages += 1
                case let .dropped(count):
                    #expect(messages > 0, "a dropped line comes after the messages written before it")
                    dropped += count
                default: Issue.record("unexpected line \(line.prefix(80))")
                }
            }
        }
        #expect(messages + dropped == 150)
        #expect(dropped > 0 && messages < 100, "written \(messages), dropped \(dropped)")
        let firstPhase = ContinuousClock.now - started

        // Stalled again, far behind: the node closes the connection and keeps its memory. (Some
        // 80 messages of 16 KiB fill the buffers first; then 1,000 are dropped.)
        let smaller = Array(body.prefix(16 * 1024))
        try await Self.send(ControlRequest.listenMaxMessagesBehind + 200, smaller, from: sender)
        try await first.node.waitForStatus(timeout: .seconds(30), "the stalled listen disconnected") {
            HostileMemberTests.counter($0, "messagesDroppedForSlowReaders") >= Double(dropped + ControlRequest.listenMaxMessagesBehind)
        }
        #expect(try listener.readUntilClosed(limit: 64 << 20), "the node closed the connection")
        let growth = ProcessStats.memory(first.node.pid).resident - residentBefore
        // Unbounded, the last 1,200 messages (19 MiB) would sit in the node's write buffer (and
        // 37 MiB in all had the test not read); bounded, it grew 0.8 MiB when measured.
        #expect(growth < 12, "node resident memory grew \(growth) MiB")
        print("stalled listen: \(messages) written, \(dropped) dropped; node memory grew \(growth) MiB; "
              + "first phase \(firstPhase), in all \(ContinuousClock.now - started)")
        // The CLI tells a disconnected listen from a stopped node.
        let status = try await first.node.status()
        #expect(status.aliveCount == 2)
    }

    @Test("connections left open past the node's descriptors: the idlest are closed, status still answers")
    func idleConnectionsCannotExhaustTheNode() async throws {
        // The node gets 64 descriptors, so the connections below exhaust them for certain.
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"],
                                   launcher: ["/bin/sh", "-c", "ulimit -n 64 && exec \"$0\" \"$@\""])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        RawControlConnection.raiseDescriptorLimit()
        var idle: [RawControlConnection] = []
        defer { idle.removeAll() }
        for _ in 0..<150 {
            if let connection = try? RawControlConnection(dataDirectory: node.dataDirectory, nonBlocking: true) {
                idle.append(connection)
            }
        }
        let status = try await node.waitForStatus(timeout: .seconds(60), "status answered beside 150 idle connections") {
            HostileMemberTests.counter($0, "controlConnectionsClosed") > 0
        }
        #expect(status.aliveCount == 1)
        // A node spinning on a failing accept uses what it can get of a core (a third of one,
        // even on a machine loaded three times over); one that backs off, next to nothing.
        let cpuBefore = ProcessStats.cpuSeconds(node.pid)
        try await Task.sleep(for: .seconds(3))
        let cpu = ProcessStats.cpuSeconds(node.pid) - cpuBefore
        #expect(cpu < 0.5, "node used \(cpu) s of CPU in 3 s beside 150 idle control connections")
        let again = try await NodeProcess.runCommand(["status", "--data-dir", node.dataDirectory])
        #expect(again.status == 0, "\(again.stderr)")
    }

    /// Reliable sends over 4 connections at once, on threads of their own: ControlClient blocks,
    /// and the test runner's cooperative pool has one thread per core.
    static func send(_ count: Int, _ body: [UInt8], from client: ControlClient) async throws {
        let lanes = 4
        let failures = FailureLog()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for lane in 0..<lanes {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    for _ in stride(from: lane, to: count, by: lanes) {
                        do { _ = try client.send(.send(body: body, to: ["first"], unreliable: false)) } catch {
                            failures.record("\(error)")
                            return
                        }
                    }
                }
            }
            group.notify(queue: .global()) { done.resume() }
        }
        if let failure = failures.first { throw NodeProcessError.timeout("send failed: \(failure)") }
    }
}

final class FailureLog: @unchecked Sendable {
    private let lock = NSLock()
    private var failures: [String] = []
    func record(_ failure: String) { lock.withLock { failures.append(failure) } }
    var first: String? { lock.withLock { failures.first } }
}

/// A control connection driven by hand, byte by byte, so a test can stop reading.
final class RawControlConnection {
    let fd: Int32
    private var buffer: [UInt8] = []

    init(dataDirectory: String, nonBlocking: Bool = false) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NodeProcessError.timeout("socket: \(String(cString: strerror(errno)))") }
        if nonBlocking { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array((dataDirectory + "/control.sock").utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.prefix(raw.count - 1))
        }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 || errno == EINPROGRESS else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw NodeProcessError.timeout("connect: \(reason)")
        }
    }

    deinit { close(fd) }

    func write(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard Glibc.write(fd, bytes, bytes.count) == bytes.count else {
            throw NodeProcessError.timeout("write: \(String(cString: strerror(errno)))")
        }
    }

    /// The next `count` lines (blocking, 30 s at most for each read).
    func readLines(count: Int) throws -> [String] {
        var lines: [String] = []
        while lines.count < count {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
                buffer.removeSubrange(...newline)
                continue
            }
            guard try fill() else { throw NodeProcessError.timeout("the node closed the connection") }
        }
        return lines
    }

    /// Reads until the node closes the connection (true), or `limit` bytes came first (false).
    func readUntilClosed(limit: Int) throws -> Bool {
        var total = 0
        while total < limit {
            let before = buffer.count
            guard try fill() else { return true }
            total += buffer.count - before
            buffer.removeAll(keepingCapacity: true)
        }
        return false
    }

    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw NodeProcessError.timeout("read: \(String(cString: strerror(errno)))") }
            if n == 0 { return false }
            buffer.append(contentsOf: chunk[0..<n])
            return true
        }
    }

    /// Lets this test process hold more connections than the node may.
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = min(limit.rlim_max, 4096)
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
