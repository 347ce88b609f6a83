import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// The baseline for transfers: `bytes` sent from one socket to another on loopback in datagrams
/// of the node's size, with the node's socket setup (4 MiB buffers, GSO batches of 64
/// datagrams, GRO on receive), and nothing on top: no sealing, hashing, disk or retransmission.
/// The only flow control is ideal and off the wire: the sender stays at most `window` bytes
/// ahead of what the receiver has read (a shared counter), so the rate is what the receiving
/// socket can drain, not how much a flat-out sender loses.
enum RawUDPTransfer {
    static let solUDP: Int32 = 17, udpSegment: Int32 = 103, udpGRO: Int32 = 104

    struct Result { var mebibytesPerSecond: Double; var lossPercent: Double }

    static func run(bytes total: Int, datagramSize: Int, offload: Bool = true, window: Int = 2 << 20) -> Result {
        let receiver = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        let sender = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(receiver); close(sender) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(receiver, $0, length) }
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(receiver, $0, &length) }
        }
        return run(
            bytes: total, datagramSize: datagramSize, offload: offload, window: window, sender: sender,
            receiver: receiver, destination: address)
    }

    /// The same between two sockets the caller made and closes (`sender` sends to `destination`,
    /// where `receiver` gets it: through NATs, say); the sockets get the same setup.
    static func run(
        bytes total: Int, datagramSize: Int, offload: Bool = true, window: Int = 2 << 20,
        sender: Int32, receiver: Int32, destination: sockaddr_in
    ) -> Result {
        var buffer: Int32 = 4 << 20, on: Int32 = 1, segment = Int32(datagramSize)
        setsockopt(receiver, SOL_SOCKET, SO_RCVBUF, &buffer, 4)
        setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &buffer, 4)
        if offload { setsockopt(receiver, solUDP, udpGRO, &on, 4) }
        let segmented = offload && setsockopt(sender, solUDP, udpSegment, &segment, 4) == 0
        var timeout = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(receiver, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = destination
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(sender, $0, length) }
        }

        final class Outcome: @unchecked Sendable {  // written by the reader, read after `done`
            let progress = Atomic<Int>(0)
            let finished = Atomic<Bool>(false)
            var received = 0
            var first: ContinuousClock.Instant?, last: ContinuousClock.Instant?
        }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        Thread {
            var scratch = [UInt8](repeating: 0, count: 65_536)
            var count = 0
            var start: ContinuousClock.Instant?, end: ContinuousClock.Instant?
            while count < total {
                let n = scratch.withUnsafeMutableBytes { recv(receiver, $0.baseAddress, $0.count, 0) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }  // quiet for 300 ms: the rest was lost
                if start == nil { start = .now }
                end = .now
                count += n
                outcome.progress.store(count, ordering: .releasing)
            }
            (outcome.received, outcome.first, outcome.last) = (count, start, end)
            outcome.finished.store(true, ordering: .releasing)
            done.signal()
        }.start()

        let batch = segmented ? min(64, 65_000 / datagramSize) : 1
        let payload = [UInt8](repeating: 0x5a, count: datagramSize * batch)
        var sent = 0
        while sent < total {
            while sent - outcome.progress.load(ordering: .acquiring) > window {
                if outcome.finished.load(ordering: .acquiring) { break }
                sched_yield()
            }
            let n = payload.withUnsafeBytes { send(sender, $0.baseAddress, min($0.count, total - sent), 0) }
            if n < 0 && (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) { continue }
            guard n > 0 else { break }
            sent += n
        }
        done.wait()
        let received = outcome.received
        guard let first = outcome.first, let last = outcome.last, last > first else {
            return Result(mebibytesPerSecond: 0, lossPercent: 100)
        }
        let elapsed = last - first
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Result(
            mebibytesPerSecond: Double(received) / 1_048_576 / seconds,
            lossPercent: 100 * Double(total - received) / Double(total))
    }
}
