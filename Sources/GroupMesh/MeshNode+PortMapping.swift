import MeshCore
import MeshCrypto
import NIOCore

/// The gateway's port mapping (PortMapper): started with the session, its address handed to
/// the core as it comes and goes, its mapping deleted at stop.
extension MeshNode {
    func startPortMapping() {
        let why: String? =
            !configuration.portMapping
            ? "turned off (--no-port-mapping, or port-mapping false in config.json)"
            : localAddress.isIPv6
                ? "listening on IPv6: port mapping asks for IPv4 only"
                : localAddress.isLoopback
                    ? "listening on loopback: nobody outside could use a mapping"
                    : nil
        let eventLoop = eventLoop
        let mapper = PortMapper(port: localAddress.port, disabledBecause: why, eventLoop: eventLoop, logger: logger) {
            [weak self] address in
            guard let node = self else { return }
            eventLoop.execute { node.assumeIsolated { $0.setExternalAddress(address, from: .portMapping) } }
        }
        portMapper = mapper
        mapper.start()
    }

    /// Waits until the first attempt to map ended (mapped or given up), at most `limit`.
    package func waitForPortMapping(within limit: Duration) async {
        let deadline = now + limit
        while let portMapper, !portMapper.settled, now < deadline, !isClosed {
            try? await Task.sleep(for: .milliseconds(50))
        }
    }
}

extension MeshSession {
    /// Waits (at most `limit`) for the gateway's port mapping to be made or given up, so an
    /// invite taken after it holds the mapped address (`run --print-invite`).
    public func waitForPortMapping(within limit: Duration = .seconds(6)) async {
        await node.waitForPortMapping(within: limit)
    }
}
