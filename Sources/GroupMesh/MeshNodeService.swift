import Logging
import ServiceLifecycle

/// Runs a started node until it stops by itself (`groupmesh leave`) or the service group asks
/// for a graceful shutdown (SIGINT/SIGTERM); either way the node leaves the mesh first.
public struct MeshNodeService: Service {
    let node: MeshNode
    private let onRunning: @Sendable () async -> Void

    /// `onRunning` is called once the service runs: by then the group traps its shutdown
    /// signals, so whoever is told the node is up (`listening:`) may signal it at once and
    /// still get a graceful leave.
    public init(session: MeshSession, onRunning: @escaping @Sendable () async -> Void = {}) {
        node = session.node
        self.onRunning = onRunning
    }

    public func run() async throws {
        await onRunning()
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
