import Foundation
import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// Traffic from outside the session, at a high rate, against a real node: random bytes,
/// another session's datagrams, this session's header over a seal that does not open. Every
/// such datagram is dropped, counted, and cheap; the members do not notice.
@Suite("outsiders against real processes", .serialized)
struct OutsiderTests {
    static func udpSend(_ datagrams: [[UInt8]], to address: String) throws {
        guard let target = try? PeerAddress(parsing: address) else {
            throw NodeProcessError.timeout("address \(address)")
        }
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var destination = sockaddr_in()
        destination.sin_family = sa_family_t(AF_INET)
        destination.sin_port = target.port.bigEndian
        destination.sin_addr.s_addr = inet_addr("127.0.0.1")
        for (index, datagram) in datagrams.enumerated() {
            _ = datagram.withUnsafeBytes { bytes in
                withUnsafePointer(to: &destination) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
            }
            // A pause every 200 datagrams: the test is about cost and counting, not about
            // overflowing the receive buffer (that loses datagrams before the node sees them).
            if index % 200 == 199 { usleep(2000) }
        }
    }

    static func dropped(_ status: NodeStatus) -> Double {
        guard case let .object(drops)? = status.counters["dropped"] else { return 0 }
        return drops.values.compactMap(\.number).reduce(0, +)
    }

    @Test("random bytes, foreign sessions and forged seals are dropped, counted and cheap; the mesh carries on")
    func junkIsDropped() async throws {
        try await withProcessMesh(names: ["a", "b"]) { mesh in
            let (first, second) = (try mesh["a"], try mesh["b"])
            let target = try await second.waitForLine(prefix: "listening:")
            let invite = try InviteToken(parsing: mesh.invite)

            var random = SplitMix64(seed: 0x0d0d)
            func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) } }
            var junk: [[UInt8]] = (0..<3000).map { _ in bytes(Int(random.next() % 1400)) }
            // Well-formed datagrams of another session.
            var stranger = DatagramCodec(session: .generate(), localID: NodeID(high: 9, low: 9), localBootID: 1)
            for _ in 0..<2000 {
                let hello = stranger.sealHello([.ping(Ping(token: random.next()))], nonce: .random())
                junk.append(Array(hello.readableBytesView))
            }
            // This session's header, but a seal made without its key.
            for number in 0..<2000 {
                let header = DatagramHeader(
                    keyKind: .hello, sessionID: invite.secret.sessionID,
                    sender: NodeID(high: random.next(), low: random.next()), bootID: 1,
                    packetNumber: UInt64(number + 1), helloNonce: .random())
                var buffer = ByteBuffer()
                header.encode(into: &buffer)
                junk.append(Array(buffer.readableBytesView) + bytes(64))
            }

            let before = try await second.status()
            let cpuBefore = ProcessStats.cpuSeconds(second.pid)
            try Self.udpSend(junk, to: target)
            // Every one is counted as dropped, for a reason (none is taken for a message).
            let after = try await second.waitForStatus(timeout: .seconds(30), "\(junk.count) more drops") {
                Self.dropped($0) - Self.dropped(before) >= Double(junk.count)
            }
            #expect(Self.dropped(after) - Self.dropped(before) == Double(junk.count))
            let cpu = ProcessStats.cpuSeconds(second.pid) - cpuBefore
            #expect(cpu < 1.0, "dropping \(junk.count) datagrams took \(cpu) s of CPU")

            // The members did not notice: both alive, and a reliable message still goes through.
            try await mesh.waitUntilAllSee(timeout: .seconds(10))
            let send = try await NodeProcess.runCommand([
                "send", "--data-dir", first.dataDirectory, "--to", "b",
                "still here",
            ])
            #expect(send.status == 0, "\(send.stderr)")
        }
    }
}
