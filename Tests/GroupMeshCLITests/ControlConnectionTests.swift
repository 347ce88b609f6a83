import Foundation
import GroupMesh
import MeshTestKit
import Testing

/// The control socket under clients that misbehave: a `listen` that reads slowly or
/// stops reading, and connections opened and left idle until the node runs out of descriptors.
@Suite("control connections that stall or idle cannot exhaust the node", .serialized)
struct ControlConnectionTests {
    @Test("a slow listen gets every message it was sent; one that stops reading is cut off, memory bounded")
    func slowAndStalledListens() async throws {
        try await withProcessMesh(names: ["first", "second"], timeout: .seconds(30)) { mesh in
            let (first, second) = (try mesh["first"], try mesh["second"])

            let listener = try RawControlConnection(dataDirectory: first.dataDirectory)
            try listener.write(#"{"command":"listen"}"# + "\n")
            #expect(try listener.readLines(count: 1).first?.contains("subscribed") == true)
            let residentBefore = ProcessStats.memory(first.pid).resident

            // 120 messages of 64 KiB to a client reading 8 KiB at a time with a pause between:
            // slower than the sends, so the node falls behind it and holds new messages.
            let sender = ControlClient(directory: DataDirectory(path: second.dataDirectory))
            let body = Array(repeating: UInt8(ascii: "m"), count: 64 * 1024)
            listener.readSize = 8 * 1024
            listener.pauseBetweenReads = 2_000
            let reader = SlowReader(listener, messages: 120)
            let (sent, failures) = await Self.send(120, body, from: sender)
            let read = await reader.finish()
            #expect(failures.isEmpty, "\(failures.prefix(3))")
            #expect(
                sent > 0 && read.messages == sent,
                "\(sent) sent, \(read.messages) printed, other lines: \(read.other)")
            #expect(read.other.isEmpty, "no dropped line, no failure")

            // Stopped reading: the node holds new messages for the stall limit, then closes the
            // connection and takes them again (every send still succeeds, to nobody listening).
            listener.readSize = 256 * 1024
            listener.pauseBetweenReads = 0
            // More than the bound below: what waits must be held back, not buffered.
            let (stalledSent, stalledFailures) = await Self.send(250, body, from: sender)
            #expect(stalledSent == 250 && stalledFailures.isEmpty, "\(stalledFailures.prefix(3))")
            try await first.waitForStatus(timeout: .seconds(30), "the stalled listen cut off") {
                HostileMemberTests.counter($0, "consumersStalled") >= 1
            }
            #expect(try listener.readUntilClosed(limit: 64 << 20), "the node closed the connection")
            let growth = ProcessStats.memory(first.pid).resident - residentBefore
            // What waits for a stalled listen is bounded by the hold, not by what peers send.
            #expect(growth < 12, "node resident memory grew \(growth) MiB")
            let status = try await first.status()
            #expect(status.aliveCount == 2)
        }
    }

    @Test("connections left open past the node's descriptors: the idlest are closed, status still answers")
    func idleConnectionsCannotExhaustTheNode() async throws {
        // The node gets 64 descriptors, so the connections below exhaust them for certain.
        let node = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0"],
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
        let status = try await node.waitForStatus(timeout: .seconds(60), "status answered beside 150 idle connections")
        {
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
    /// and the test runner's cooperative pool has one thread per core. Returns how many the
    /// node said were sent, and the failures.
    static func send(
        _ count: Int, _ body: [UInt8],
        from client: ControlClient
    ) async -> (sent: Int, failures: [String]) {
        let lanes = 4
        let log = FailureLog()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for lane in 0..<lanes {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    for _ in stride(from: lane, to: count, by: lanes) {
                        do {
                            if case .sent = try client.send(.send(body: body, to: ["first"], unreliable: false)) {
                                log.succeeded()
                            } else {
                                log.record("not sent")
                            }
                        } catch {
                            log.record("\(error)")
                        }
                    }
                }
            }
            group.notify(queue: .global()) { done.resume() }
        }
        return (log.successes, log.all)
    }
}

/// Reads a `listen` connection on a thread of its own until `messages` message lines came or
/// the connection ended (or a read waited 30 s).
final class SlowReader: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result = (messages: 0, other: [String]())

    init(_ connection: RawControlConnection, messages: Int) {
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            while result.messages < messages, let line = try? connection.readLines(count: 1).first {
                if line.contains(#""message""#) {
                    result.messages += 1
                } else {
                    result.other.append(String(line.prefix(120)))
                }
            }
        }
    }

    func finish() async -> (messages: Int, other: [String]) {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { [self] in
                done.wait()
                continuation.resume()
            }
        }
        return result
    }
}

final class FailureLog: @unchecked Sendable {
    private let lock = NSLock()
    private var failures: [String] = []
    private var sent = 0
    func record(_ failure: String) { lock.withLock { failures.append(failure) } }
    func succeeded() { lock.withLock { sent += 1 } }
    var first: String? { lock.withLock { failures.first } }
    var all: [String] { lock.withLock { failures } }
    var successes: Int { lock.withLock { sent } }
}

/// A control connection driven by hand, byte by byte, so a test can stop reading.
final class RawControlConnection: @unchecked Sendable {
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
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
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

    /// How much one read takes, and the pause before each (microseconds): a slow reader.
    var readSize = 256 * 1024
    var pauseBetweenReads: useconds_t = 0

    private func fill() throws -> Bool {
        if pauseBetweenReads > 0 { usleep(pauseBetweenReads) }
        var chunk = [UInt8](repeating: 0, count: readSize)
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
