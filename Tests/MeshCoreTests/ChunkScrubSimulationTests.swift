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
        // Each distinct chunk once (a pattern repeats, so some chunks are the same), and the manifest.
        let distinct = Set(manifest.chunks).count + 1
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

    @Test(
        "a manifest damaged on disk is found by the scrub and written again from memory: a restart finds the attachment whole",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func damagedManifestIsWrittenAgain(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2)))
        var scrubbing = SimNode.Configuration()
        scrubbing.settings.scrub = ChunkScrub.Settings()
        let (_, holder, _) = mesh.uploaderHolderAndAsker(
            attaching: patternBytes(4096 * 10, salt: UInt8(seed % 100)), holder: scrubbing)
        let id = try #require(holder.core.complete.first, "\(replay): the holder did not replicate")
        holder.flipByte(ofChunk: id)
        mesh.simulator.run(until: .zero + ChunkScrub.Settings().firstAfter + .seconds(10), checkEvery: .seconds(1)) {
            _ in
            holder.core.scrub.chunksDamaged > 0 && holder.storage.chunks.manifest(id) != nil
        }
        #expect(holder.core.scrub.chunksDamaged == 1, "\(replay): the scrub found \(holder.core.scrub.chunksDamaged)")
        #expect(holder.storage.chunks.manifest(id) != nil, "\(replay): the manifest was not written again")
        #expect(holder.core.complete.contains(id), "\(replay)")
        #expect(holder.storage.damagedManifests.isEmpty, "\(replay): still recorded damaged once synced")
        mesh.restart(holder.address, at: mesh.simulator.now + .milliseconds(100))
        mesh.simulator.run(for: .seconds(2))
        let restarted = mesh.node(holder.address)
        #expect(restarted.core.complete.contains(id), "\(replay): not whole after the restart")
        #expect(restarted.core.counters.chunkPayloadBytesFetched == 0, "\(replay): fetched after the restart")
    }

    @Test(
        "a manifest found damaged at start: no chunk is deleted as unused, also at a second start while no member can send it; once it is fetched again the attachment is whole without a chunk fetched, also on a lazy member",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func manifestDamagedAtStartKeepsItsChunks(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2), lossProbability: 0.02))
        let (uploader, holder, asker) = mesh.uploaderHolderAndAsker(
            attaching: patternBytes(4096 * 10, salt: UInt8(seed % 100)))
        let id = try #require(holder.core.complete.first, "\(replay): the holder did not replicate")
        let manifest = try #require(holder.core.manifests[id])
        asker.load(id)
        mesh.simulator.run(for: .seconds(5))
        #expect(asker.core.complete.contains(id), "\(replay): the lazy member's load did not complete")
        // The uploader is down: nobody can send the manifest, and both start twice without it.
        mesh.simulator.crash(uploader.address)
        for node in [holder, asker] { node.flipByte(ofChunk: id) }
        for _ in 0..<2 {
            for address in [holder.address, asker.address] {
                mesh.restart(address, at: mesh.simulator.now + .milliseconds(100))
            }
            mesh.simulator.run(for: .seconds(5))
            for node in [holder, asker].map({ mesh.node($0.address) }) {
                #expect(!node.core.complete.contains(id), "\(replay)")
                #expect(node.storage.chunks.missing(manifest).isEmpty, "\(replay): \(node.address) lost chunks")
                #expect(node.storage.damagedManifests == [id], "\(replay): \(node.storage.damagedManifests)")
            }
        }
        mesh.restart(uploader.address, at: mesh.simulator.now + .milliseconds(100))
        let restarted = [holder, asker].map { mesh.node($0.address) }
        let whole = mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(100)) { _ in
            restarted.allSatisfy { $0.core.complete.contains(id) }
        }
        #expect(whole == .satisfied, "\(replay): \(restarted.map { $0.core.complete.contains(id) })")
        for node in restarted {
            #expect(node.storage.chunks.missing(manifest).isEmpty, "\(replay): \(node.address) lost chunks")
            #expect(node.storage.damagedManifests.isEmpty, "\(replay): \(node.address) still records damage")
            #expect(
                node.core.counters.chunkPayloadBytesFetched == 0,
                "\(replay): \(node.address) fetched \(node.core.counters.chunkPayloadBytesFetched) bytes of chunks it had"
            )
        }
    }

    @Test(
        "a lazy member that held part of an attachment fetches only its damaged manifest, and a removed attachment's damage is forgotten",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func lazyMemberFetchesOnlyTheManifest(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2)))
        let (uploader, holder, asker) = mesh.uploaderHolderAndAsker(
            attaching: patternBytes(4096 * 10, salt: UInt8(seed % 100)))
        let id = try #require(uploader.core.complete.first, "\(replay): nothing attached")
        let manifest = try #require(uploader.core.manifests[id])
        // Part of it: the manifest and two chunks, as a load given up would leave.
        asker.putOnDisk(manifest.encoded)
        for digest in manifest.chunks.prefix(2) {
            asker.putOnDisk(try #require(uploader.storage.chunks.read(digest)))
        }
        asker.flipByte(ofChunk: id)
        mesh.restart(asker.address, at: mesh.simulator.now + .milliseconds(100))
        let restarted = mesh.node(asker.address)
        let back = mesh.simulator.run(for: .seconds(20), checkEvery: .milliseconds(100)) { _ in
            restarted.core.manifests[id] != nil && restarted.storage.damagedManifests.isEmpty
        }
        #expect(back == .satisfied, "\(replay): the manifest was not fetched again")
        #expect(restarted.core.fetches.isEmpty && !restarted.core.complete.contains(id), "\(replay)")
        #expect(restarted.core.counters.chunkPayloadBytesFetched == 0, "\(replay): it fetched chunks")

        // Damaged again and recorded, then removed while no member can send it: forgotten.
        restarted.flipByte(ofChunk: id)
        mesh.simulator.crash(uploader.address)
        mesh.simulator.crash(holder.address)
        mesh.restart(asker.address, at: mesh.simulator.now + .milliseconds(100))
        mesh.simulator.run(for: .seconds(2))
        let again = mesh.node(asker.address)
        #expect(again.storage.damagedManifests == [id], "\(replay)")
        again.removeAttachment(pick: 0)
        mesh.simulator.run(for: .seconds(2))
        #expect(again.storage.damagedManifests.isEmpty, "\(replay): a removed attachment's damage is kept")
    }

    @Test(
        "a lazy member fetching only its damaged manifest when the uploader, leaving, asks it to hold the attachment fetches it whole",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func leavingMemberUpgradesAManifestOnlyFetch(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(20)))
        let uploader = mesh.addNode(joiningThrough: [], at: .zero)
        var lazy = SimNode.Configuration()
        lazy.settings.lazy = true
        let asker = mesh.addNode(joiningThrough: [uploader.address], at: .zero + .milliseconds(10), configuration: lazy)
        uploader.plan(at: .zero + .seconds(1)) { $0.attach(patternBytes(4096 * 10, salt: UInt8(seed % 100))) }
        mesh.simulator.run(until: .zero + .seconds(4))
        let id = try #require(uploader.core.complete.first, "\(replay): nothing attached")
        let manifest = try #require(uploader.core.manifests[id])
        asker.putOnDisk(manifest.encoded)
        asker.putOnDisk(try #require(uploader.storage.chunks.read(manifest.chunks[0])))
        asker.flipByte(ofChunk: id)
        // The asker starts again and asks for the manifest; the uploader leaves as the request
        // is on its way, and asks the asker to hold what only it holds.
        mesh.restart(asker.address, at: mesh.simulator.now + .milliseconds(100))
        uploader.plan(at: mesh.simulator.now + .milliseconds(130)) { $0.leave() }
        let restarted = mesh.node(asker.address)
        let done = mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(100)) { _ in
            uploader.core.phase == .stopped
        }
        #expect(done == .satisfied, "\(replay): the uploader never left")
        #expect(restarted.core.complete.contains(id), "\(replay): the asker does not hold it whole")
        #expect(uploader.leaveReports.first?.unavailable == [], "\(replay): \(uploader.leaveReports)")
    }
}
