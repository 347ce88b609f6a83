import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// A load given up (an interrupted `get`, a cancelled task): the caller hears `cancelled`; a lazy
/// node stops fetching what nobody else waits for, a node that replicates everything goes on.
@Suite("Load cancel")
struct LoadCancelTests {
    /// A holder of `chunks` 64 KiB chunks behind a 20 ms path, and a joiner that loads them at 4 s
    /// and gives the load up once a few chunks came.
    static func interruptedLoad(lazy: Bool, seed: UInt64) throws -> (mesh: SimMesh, joiner: SimNode, id: SHA256Digest) {
        var configuration = SimNode.Configuration()
        configuration.settings.chunkSize = 65_536
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(20)), configuration: configuration)
        let holder = mesh.addNode(joiningThrough: [], at: .zero)
        var joining = configuration
        joining.settings.lazy = lazy
        let joiner = mesh.addNode(
            joiningThrough: [holder.address], at: .zero + .milliseconds(10), configuration: joining)
        var random = SplitMix64(seed: seed)
        let bytes = random.bytes(65_536 * 256)
        holder.plan(at: .zero + .seconds(1)) { $0.attach(bytes) }
        mesh.simulator.run(until: .zero + .seconds(10)) { _ in !joiner.core.attachments.isEmpty }
        let id = try #require(
            joiner.core.attachments.first?.content, "seed \(seed): the joiner never heard of the attachment")
        var request: RequestID?
        joiner.plan(at: mesh.simulator.now + .milliseconds(1)) { request = $0.load(id) }
        mesh.simulator.run(until: .zero + .seconds(30)) { _ in
            guard let entry = joiner.core.attachments.first(where: { $0.content == id }) else { return false }
            return joiner.core.chunksHeld(of: entry) >= 8
        }
        let entry = try #require(joiner.core.attachments.first { $0.content == id })
        let held = joiner.core.chunksHeld(of: entry)
        try #require(held >= 8 && held < entry.chunkCount, "seed \(seed): \(held) chunks held: not a fetch under way")
        joiner.cancel(try #require(request))
        return (mesh, joiner, id)
    }

    @Test(
        "a lazy node gives the fetch up with the load: the load fails as cancelled, and no more chunks come",
        arguments: [1, 2, 3] as [UInt64])
    func lazyNodeStops(seed: UInt64) throws {
        let (mesh, joiner, id) = try Self.interruptedLoad(lazy: true, seed: seed)
        #expect(
            joiner.failedCommands.contains { $0.hasSuffix(": cancelled") }, "seed \(seed): \(joiner.failedCommands)")
        #expect(joiner.core.fetches[id] == nil, "seed \(seed): the fetch goes with its only load")
        #expect(!joiner.core.transfer.activeAttachments.contains(id), "seed \(seed): nothing more is asked")
        let entry = try #require(joiner.core.attachments.first { $0.content == id })
        #expect(joiner.core.chunksHeld(of: entry) >= 8, "seed \(seed): what was fetched still counts as held")
        // Pieces already on their way may still land; then the holder sends nothing more.
        mesh.simulator.run(until: mesh.simulator.now + .seconds(1))
        // Stored, or dropped as not asked for: either way, what the holder still sends.
        func arrived() -> UInt64 {
            joiner.core.counters.chunkPayloadBytesFetched + joiner.core.counters.piecesUnsolicited
        }
        let settled = arrived()
        mesh.simulator.run(until: mesh.simulator.now + .seconds(10))
        #expect(arrived() == settled, "seed \(seed): chunks kept coming after the fetch was given up")
        #expect(joiner.core.chunksHeld(of: entry) < entry.chunkCount, "seed \(seed)")
    }

    @Test(
        "a node that replicates everything keeps fetching when the load is given up", arguments: [1, 2, 3] as [UInt64])
    func eagerNodeGoesOn(seed: UInt64) throws {
        let (mesh, joiner, id) = try Self.interruptedLoad(lazy: false, seed: seed)
        #expect(
            joiner.failedCommands.contains { $0.hasSuffix(": cancelled") }, "seed \(seed): \(joiner.failedCommands)")
        #expect(joiner.core.fetches[id] != nil, "seed \(seed): replication goes on")
        mesh.simulator.run(until: mesh.simulator.now + .seconds(60)) { _ in joiner.core.complete.contains(id) }
        #expect(joiner.core.complete.contains(id), "seed \(seed): the replica was not completed")
    }

    @Test("cancelling a load that already completed, or one never made, changes nothing")
    func cancelAfterTheFact() throws {
        let (mesh, joiner, id) = try Self.interruptedLoad(lazy: false, seed: 9)
        mesh.simulator.run(until: mesh.simulator.now + .seconds(60)) { _ in joiner.core.complete.contains(id) }
        try #require(joiner.core.complete.contains(id), "the replica was not completed")
        var loaded: RequestID?
        joiner.plan(at: mesh.simulator.now + .milliseconds(1)) { loaded = $0.load(id) }
        mesh.simulator.run(until: mesh.simulator.now + .seconds(1))
        let failures = joiner.failedCommands
        joiner.cancel(try #require(loaded))
        joiner.cancel(RequestID(999_999))
        mesh.simulator.run(until: mesh.simulator.now + .milliseconds(100))
        #expect(joiner.failedCommands == failures, "a completed load stays completed")
        #expect(joiner.violations.isEmpty, "\(joiner.violations)")
        #expect(joiner.core.complete.contains(id))
    }
}
