import Logging
import ServiceLifecycle

/// Runs a started node until graceful shutdown (SIGINT/SIGTERM through the `ServiceGroup`),
/// then closes it.
public struct MeshNodeService: Service {
    public let node: MeshNode

    public init(node: MeshNode) {
        self.node = node
    }

    public func run() async throws {
        try? await gracefulShutdown()
        await node.stop()
    }
}
