import Logging
import ServiceLifecycle

/// Runs a started node until it stops by itself (`groupmesh leave`) or the service group asks
/// for a graceful shutdown (SIGINT/SIGTERM); either way the node leaves the mesh first.
public struct MeshNodeService: Service {
    public let node: MeshNode

    public init(node: MeshNode) {
        self.node = node
    }

    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await node.waitUntilStopped() }
            group.addTask {
                // Throws only when cancelled, which means the node stopped by itself.
                if (try? await gracefulShutdown()) != nil { await node.leave() }
            }
            await group.next()
            group.cancelAll()
        }
        await node.leave()
    }
}
