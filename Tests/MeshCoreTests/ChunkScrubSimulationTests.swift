import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The scrub: a chunk damaged on disk that nobody asks for is found by the node that holds it,
/// which stops saying it holds the attachment whole and fetches it again while a member still
/// has it. Without it, the member that leaves counts on the damaged copy and hands nothing over.
@Suite("Chunk scrub (simulation)")
struct ChunkScrubSimulationTests {
    @Test(
        "a chunk damaged on disk that nobody reads is found by the scrub and fetched again before the uploader leaves",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func damageNobodyReadsIsFoundAndRepaired(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2), lossProbability: 0.02))
        var scrubbing = SimNode.Configuration()
        scrubbing.settings.scrub = ChunkScrub.Settings()
        let (uploader, holder, asker) = mesh.uploaderHolderAndAsker(
            attaching: patternBytes(4096 * 40, salt: UInt8(seed % 100)), holder: scrubbing)
        let id = try #require(holder.core.complete.first, "\(replay): the holder did not replicate")
        let manifest = try #require(holder.core.manifests[id])
        let damaged = manifest.chunks[Int(seed) % manifest.chunks.count]
        // One flipped byte: the chunk is still listed, and only a read that hashes it can tell.
        holder.flipByte(ofChunk: damaged)

        // The first pass comes a minute after start; by then nothing has read the chunk.
        let pass = ChunkScrub.Settings()
        mesh.simulator.run(until: .zero + pass.firstAfter + .seconds(20), checkEvery: .seconds(1)) { _ in
            holder.core.scrub.chunksDamaged > 0 && holder.core.complete.contains(id)
        }
        #expect(holder.core.scrub.chunksDamaged == 1, "\(replay): the scrub found \(holder.core.scrub.chunksDamaged)")
        #expect(
            holder.core.complete.contains(id) && holder.storage.chunks.missing(manifest).isEmpty,
            "\(replay): the holder did not fetch the damaged chunk again")
        // The pass goes on over the rest (it waits while the holder fetches).
        mesh.simulator.run(for: .seconds(15))
        // Each distinct chunk once (a pattern repeats, so some chunks are the same).
        let distinct = Set(manifest.chunks).count
        #expect(
            holder.core.scrub.chunksChecked == UInt64(distinct),
            "\(replay): a pass read \(holder.core.scrub.chunksChecked) of \(distinct) chunks")

        // The uploader leaves, counting on the holder's copy: it is whole, and the asker gets it.
        uploader.leave()
        mesh.simulator.run(for: .seconds(10))
        #expect(uploader.core.phase == .stopped, "\(replay): the uploader never left")
        asker.load(id)
        mesh.simulator.run(for: .seconds(20))
        #expect(!asker.failedCommands.contains { $0.contains("load") }, "\(replay): \(asker.failedCommands)")
        #expect(asker.core.complete.contains(id), "\(replay): the asker's load did not complete")
        #expect(mesh.leakViolations().isEmpty, "\(replay)")
    }
}
