import MeshCore
import MeshCrypto

/// A simulated mesh of whole nodes (`SimNode`) in one session on one seeded `Simulator`, and
/// the invariants every run must end with (`SimMesh+Invariants`).
package final class SimMesh {
    package let simulator: Simulator
    package let seed: UInt64
    package let session: SessionSecret
    package let configuration: SimNode.Configuration
    package private(set) var nodes: [SimAddress] = []

    package init(
        seed: UInt64, link: LinkConditions = .default, configuration: SimNode.Configuration = .init(),
        trace: SimTraceOptions = []
    ) {
        simulator = Simulator(seed: seed, defaultLink: link, trace: trace)
        self.seed = seed
        self.configuration = configuration
        var random = SplitMix64(seed: seed)
        let secret = random.bytes(32)
        session = try! SessionSecret(bytes: secret)  // safe: 32 bytes
    }

    /// Adds a node that starts at `time` and joins through `seeds`, on the mesh's configuration
    /// or its own.
    @discardableResult
    package func addNode(
        joiningThrough seeds: [SimAddress], at time: MeshInstant,
        configuration: SimNode.Configuration? = nil
    ) -> SimNode {
        let address = SimAddress(simulator.addresses.count)
        let node = SimNode(
            address: address, session: session, seed: seed, seeds: seeds, startTime: time,
            configuration: configuration ?? self.configuration)
        nodes.append(simulator.addNode(node, startingAt: time))
        return node
    }

    package func node(_ address: SimAddress) -> SimNode {
        // safe: every node of a SimMesh is a SimNode
        simulator.process(at: address, as: SimNode.self)!
    }

    package var all: [SimNode] { nodes.map(node) }

    /// Every "dead" any node declared so far (a calm network, or one whose paths all work, has none).
    package var deaths: [MembershipProcess.Change] {
        all.flatMap(\.membershipChanges).filter { $0.status == .dead }
    }

    /// Nodes that are up.
    package var running: [SimNode] { simulator.runningAddresses.map(node) }

    /// Members removed from the session (a key epoch without them), as any running node knows.
    package var removed: Set<NodeID> { Set(running.flatMap(\.core.epochs.removed)) }

    /// Nodes that are up, not left, and still in the session: what the invariants speak of.
    package var live: [SimNode] {
        let removed = removed
        return running.filter { !removed.contains($0.id) && $0.core.phase != .stopped }
    }

    /// Restarts a crashed node on its own disk, with a new boot, given the seeds it was given
    /// before (or `seeds`).
    package func restart(_ address: SimAddress, at time: MeshInstant, seeds: [SimAddress]? = nil) {
        let old = node(address)
        simulator.restart(address, with: SimNode(restarting: old, seed: seed, startTime: time, seeds: seeds), at: time)
    }
}
