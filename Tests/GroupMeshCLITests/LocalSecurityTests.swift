import Foundation
import MeshTestKit
import Testing

/// What other local users can reach: the data dir, the keys and the control socket are the
/// owner's alone; the control socket survives garbage and keeps serving.
@Suite("local security with real processes", .serialized)
struct LocalSecurityTests {
    static func mode(_ path: String) -> UInt32? {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt32(info.st_mode) & 0o777 : nil
    }

    /// Connects to a Unix stream socket, writes `bytes`, and reads until `lines` lines came or the
    /// peer closed (bounded by a 10 s receive timeout). Returns what came and whether it closed or reset.
    static func exchange(_ path: String, _ bytes: [UInt8], lines: Int) throws -> (text: String, closed: Bool) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NodeProcessError.timeout("no socket") }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw NodeProcessError.timeout("path too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { throw NodeProcessError.timeout("connect \(path): errno \(errno)") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }  // the node closed on us: what it said is still to be read
            written += n
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var closed = false
        while received.filter({ $0 == UInt8(ascii: "\n") }).count < lines {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { closed = true; break }
            // A close with our bytes still unread in the node's queue arrives as a reset.
            if n < 0 { closed = errno == ECONNRESET; break }
            received += buffer.prefix(n)
        }
        return (String(decoding: received, as: UTF8.self), closed)
    }

    @Test("data dir 0700 (a loose one is tightened), keys and control socket 0600; a readable key is refused")
    func permissions() async throws {
        let directory = NodeProcess.makeTemporaryDirectory("perm")
        chmod(directory, 0o755)
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: directory)
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        try await waitUntil("control socket", timeout: .seconds(10)) { Self.mode(directory + "/control.sock") != nil }
        #expect(Self.mode(directory) == 0o700)
        #expect(Self.mode(directory + "/control.sock") == 0o600)
        #expect(Self.mode(directory + "/session.key") == 0o600)
        #expect(Self.mode(directory + "/identity.key") == 0o600)
        for name in ["members.json", "node.lock", "format-version"] {
            #expect((Self.mode(directory + "/" + name) ?? 0o777) & 0o077 == 0, "\(name) is open to others")
        }
        node.signal(SIGTERM)
        try await node.waitForExit()

        chmod(directory + "/identity.key", 0o644)
        let refused = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0"], dataDirectory: directory, ownsDataDirectory: false)
        defer { Task { await refused.cleanUp() } }
        #expect(try await refused.waitForExit() != 0)
        let message = refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(message.contains("readable by others") && message.contains("chmod 600"), "\(message)")
        #expect(message.split(separator: "\n").count == 1)
    }

    @Test("garbage, truncated and oversized control requests get an error or a close; status still answers")
    func controlSocketGarbage() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let path = node.dataDirectory + "/control.sock"
        try await waitUntil("control socket", timeout: .seconds(10)) { Self.mode(path) != nil }

        let garbage = [
            "not json", "{\"command\": \"fly\"}", "{\"command\": \"status\"", "[1,2,3]", "\u{0}\u{1}\u{2}",
            "{\"command\": \"get\", \"id\": 5}", String(repeating: "{", count: 5000),
        ]
        let answers = try Self.exchange(path, Array(garbage.joined(separator: "\n").utf8) + [10], lines: garbage.count)
        let lines = answers.text.split(separator: "\n")
        #expect(lines.count == garbage.count, "\(answers.text)")
        #expect(lines.allSatisfy { $0.contains("\"ok\":false") }, "\(answers.text)")

        // A request without its newline, cut short: nothing is answered, nothing breaks.
        _ = try Self.exchange(path, Array("{\"command\": \"sta".utf8), lines: 0)
        // 2 MiB without a newline: one error line, then the node closes the connection.
        let oversized = try Self.exchange(path, [UInt8](repeating: 0x61, count: 2 << 20), lines: 2)
        #expect(oversized.text.contains("over"), "\(oversized.text)")
        #expect(oversized.closed)

        let status = try await NodeProcess.runCommand(["status", "--json", "--data-dir", node.dataDirectory])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(node.process.isRunning)
    }
}
