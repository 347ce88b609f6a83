import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// A UDP socket in a lab namespace, answered on a thread of this process until `stop()`: each
/// datagram gets the datagrams `answers` returns, sent back to its source. The lab's small
/// servers are made of it (a STUN check for miniupnpd, a gateway that lies).
final class UDPResponder: @unchecked Sendable {
    /// What to send back for one datagram from `source`.
    typealias Answers = @Sendable (_ request: [UInt8], _ source: sockaddr_in) -> [[UInt8]]

    let port: UInt16
    private let fd: Int32
    private let answers: Answers
    private let lock = NSLock()
    private var running = true
    private var received = 0
    private let finished = DispatchSemaphore(value: 0)

    init(namespace: String, address: String, port: UInt16, answers: @escaping Answers) throws {
        let socket = try makeUDPSocket(inNamespace: namespace, address: address, port: port)
        fd = socket
        self.answers = answers
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        self.port = UInt16(bigEndian: bound.sin_port)
        Thread { [self] in
            serve(); finished.signal()
        }.start()
    }

    /// Datagrams received so far.
    var requests: Int { lock.withLock { received } }

    private var isRunning: Bool { lock.withLock { running } }

    private func serve() {
        var buffer = [UInt8](repeating: 0, count: 1500)
        while isRunning {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) == 1 else { continue }
            var source = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = withUnsafeMutablePointer(to: &source) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(fd, &buffer, buffer.count, 0, $0, &length)
                }
            }
            guard count > 0 else { continue }
            lock.withLock { received += 1 }
            for answer in answers(Array(buffer[0..<count]), source) {
                _ = withUnsafePointer(to: &source) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, answer, answer.count, 0, $0, length)
                    }
                }
            }
        }
    }

    /// Stops answering and closes the socket; a second call does nothing.
    func stop() {
        let wasRunning = lock.withLock { () -> Bool in
            defer { running = false }
            return running
        }
        guard wasRunning else { return }
        finished.wait()
        close(fd)
    }

    deinit { stop() }
}
