import Foundation
import MeshTestKit
import Testing

/// The WAN link emulator does what its profile says, measured with UDP probes between two hosts
/// of our own (host 1 behind the link). Only lower bounds on time: a busy machine makes packets
/// later, never earlier.
@Suite("WAN link emulator (network namespaces)", .serialized)
struct WANLinkTests {
    @Test(
        "a 60 ms link delays every round trip by at least 48 ms, and tearDown removes it",
        .enabled(if: WANLink.isAvailable, Comment(rawValue: WANLink.unavailableReason ?? "")))
    func delay() throws {
        let lab = try NamespaceLab(hostCount: 2)
        defer { lab.tearDown() }
        let probes = try Probes(lab: lab)
        defer { probes.close() }
        let link = try WANLink(lab: lab, host: 1, profile: .init(roundTripMilliseconds: 60, jitterMilliseconds: 2))
        var rtts: [Double] = []
        for sequence in 0..<8 {
            rtts.append(try #require(probes.roundTrip(sequence)))
        }
        #expect(rtts.allSatisfy { $0 >= 0.8 * 60 }, "round trips \(rtts) ms through a 60 ms link")
        link.tearDown()
        #expect(
            link.emulatorSummary?.contains("packets") == true && link.emulatorMeanLateMilliseconds != nil,
            "\(link.emulatorSummary ?? "no summary")")
        // Without the link the same probes come back at once (the best of 8: robust under load).
        var direct: [Double] = []
        for sequence in 100..<108 { if let rtt = probes.roundTrip(sequence) { direct.append(rtt) } }
        #expect((direct.min() ?? .infinity) < 40, "round trips \(direct) ms after tearDown")
    }

    @Test(
        "50% random loss each way drops about half of 200 datagrams",
        .enabled(if: WANLink.isAvailable, Comment(rawValue: WANLink.unavailableReason ?? "")))
    func loss() throws {
        let lab = try NamespaceLab(hostCount: 2)
        defer { lab.tearDown() }
        let probes = try Probes(lab: lab)
        defer { probes.close() }
        let link = try WANLink(lab: lab, host: 1, profile: .init(roundTripMilliseconds: 2, lossPercent: 50))
        defer { link.tearDown() }
        for sequence in 0..<200 {
            probes.send(sequence, from: probes.behindLink, to: 0)
            usleep(500)
        }
        // Binomial(200, 0.5): 100 ± 7; 60...140 is more than 5 standard deviations either way.
        let arrived = probes.drain(probes.outside, within: 0.5)
        #expect((60...140).contains(arrived.count), "\(arrived.count) of 200 datagrams crossed the link")
    }

    @Test(
        "a 4 Mbit/s cap with a 300 ms queue spreads a 100 KiB burst over at least 0.15 s",
        .enabled(if: WANLink.isAvailable, Comment(rawValue: WANLink.unavailableReason ?? "")))
    func rateCap() throws {
        let lab = try NamespaceLab(hostCount: 2)
        defer { lab.tearDown() }
        let probes = try Probes(lab: lab)
        defer { probes.close() }
        let link = try WANLink(
            lab: lab, host: 1,
            profile: .init(
                roundTripMilliseconds: 0, rateMbit: 4,
                queue: .milliseconds(300)))
        defer { link.tearDown() }
        // 85 datagrams of 1,200 B: 0.21 s at 4 Mbit/s (the bucket lets 8 KiB through at once), all
        // of it within the queue, so none is lost.
        let start = ContinuousClock.now
        for sequence in 0..<85 { probes.send(sequence, from: probes.behindLink, to: 0, size: 1200) }
        let arrived = probes.drain(probes.outside, within: 1.0)
        let last = try #require(arrived.last?.at, "nothing crossed the link")
        let spread = (last - start) / .seconds(1)
        #expect(arrived.count == 85, "\(arrived.count) of 85 datagrams crossed a link whose queue holds them all")
        #expect(spread >= 0.15, "85 × 1,200 B crossed a 4 Mbit/s link in \(spread) s")
    }
}

/// A UDP socket on each of two lab hosts (host 0 outside, host 1 behind the link), all in this
/// process. Host 0 answers by hand, so a round trip needs no program inside the lab.
private struct Probes {
    let outside: Int32
    let behindLink: Int32
    let addresses: [String]
    let port: UInt16 = 7950

    init(lab: NamespaceLab) throws {
        outside = try lab.udpSocket(inHost: 0, port: port)
        do { behindLink = try lab.udpSocket(inHost: 1, port: port) } catch {
            Glibc.close(outside)
            throw error
        }
        addresses = lab.addresses
    }

    func close() {
        Glibc.close(outside)
        Glibc.close(behindLink)
    }

    func send(_ sequence: Int, from fd: Int32, to host: Int, size: Int = 16) {
        var bytes = [UInt8](repeating: 0, count: max(size, 8))
        withUnsafeBytes(of: UInt64(sequence).bigEndian) { bytes.replaceSubrange(0..<8, with: $0) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, addresses[host], &address.sin_addr)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    /// The next datagram's sequence number, or nil after `timeout` seconds.
    func receive(_ fd: Int32, timeout: Double) -> Int? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 2048)
        let count = recv(fd, &bytes, bytes.count, 0)
        guard count >= 8 else { return nil }
        return Int(bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
    }

    /// Milliseconds for a probe to reach host 0 and come back, or nil when it was lost.
    func roundTrip(_ sequence: Int) -> Double? {
        let start = ContinuousClock.now
        send(sequence, from: behindLink, to: 0)
        guard receive(outside, timeout: 2) == sequence else { return nil }
        send(sequence, from: outside, to: 1)
        guard receive(behindLink, timeout: 2) == sequence else { return nil }
        return (ContinuousClock.now - start) / .milliseconds(1)
    }

    /// Every datagram that arrives until none came for `within` seconds, with its arrival time.
    func drain(_ fd: Int32, within: Double) -> [(sequence: Int, at: ContinuousClock.Instant)] {
        var arrived: [(sequence: Int, at: ContinuousClock.Instant)] = []
        while arrived.count < 10_000, let sequence = receive(fd, timeout: within) {
            arrived.append((sequence, ContinuousClock.now))
        }
        return arrived
    }
}
