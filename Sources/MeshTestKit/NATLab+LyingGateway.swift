import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// A home router that answers port-mapping requests (PCP and NAT-PMP, port 5351 on its LAN
/// address) with lies, for tests of what a node believes. It runs in this process, on a socket
/// in the router's namespace, and counts the requests it got.
package final class LyingGateway: @unchecked Sendable {
    package enum Lie: Sendable {
        /// Every PCP request gets garbage, then a MAP answer with another nonce, then a "success"
        /// of lifetime 0; NAT-PMP names 127.0.0.1 as the external address and grants a mapping
        /// there (of another port than asked).
        case impossible
        /// PCP grants the mapping, at a private external address (as a router behind a carrier's
        /// NAT would, or one that lies about it).
        case privateExternal
    }

    package let lie: Lie
    private let responder: UDPResponder

    /// Starts answering at home `index`'s gateway address, port 5351.
    package init(lab: NATLab, home index: Int, lie: Lie) throws {
        self.lie = lie
        responder = try UDPResponder(
            namespace: lab.homes[index].router, address: lab.homes[index].gateway,
            port: 5351
        ) { request, _ in Self.answers(to: request, lie: lie) }
    }

    /// Requests received so far (PCP and NAT-PMP datagrams).
    package var requests: Int { responder.requests }

    private static func answers(to request: [UInt8], lie: Lie) -> [[UInt8]] {
        guard request.count >= 2 else { return [] }
        if request[0] == 2, request.count >= 60, request[1] == 1 {
            // PCP MAP: echo the request's MAP fields (nonce, protocol, internal port) as a server does.
            let nonce = Array(request[24..<36]), internalPort = Array(request[40..<42])
            func map(nonce: [UInt8], lifetime: UInt32, port: [UInt8], external: [UInt8]) -> [UInt8] {
                [2, 0x81, 0, 0] + bigEndian(lifetime) + bigEndian(1) + [UInt8](repeating: 0, count: 12)
                    + nonce + [17, 0, 0, 0] + internalPort + port
                    + [UInt8](repeating: 0, count: 10) + [0xFF, 0xFF] + external
            }
            switch lie {
            case .impossible:
                return [
                    [0xFF, 0xEE] + [UInt8](repeating: 0x5A, count: 40),
                    map(
                        nonce: nonce.map { $0 ^ 0xFF }, lifetime: 7200, port: internalPort,
                        external: [198, 51, 100, 250]),
                    map(nonce: nonce, lifetime: 0, port: internalPort, external: [198, 51, 100, 250]),
                ]
            case .privateExternal:
                return [map(nonce: nonce, lifetime: 7200, port: internalPort, external: [10, 200, 0, 7])]
            }
        }
        guard case .impossible = lie, request[0] == 0 else { return [] }
        switch request[1] {
        case 0:
            return [[0, 128, 0, 0] + bigEndian(1) + [127, 0, 0, 1]]
        case 1 where request.count >= 12:
            let port = UInt16(request[4]) << 8 | UInt16(request[5])
            let other = port &+ 1
            return [
                [0, 129, 0, 0] + bigEndian(1) + Array(request[4..<6]) + [UInt8(other >> 8), UInt8(other & 0xFF)]
                    + bigEndian(7200)
            ]
        default:
            return []
        }
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// Stops answering and closes the socket; a second call does nothing.
    package func stop() { responder.stop() }
}
