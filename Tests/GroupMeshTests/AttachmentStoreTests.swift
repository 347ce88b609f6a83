import Foundation
@testable import GroupMesh
import MeshCore
import MeshCrypto
import Testing

/// The node's disk, directly: what a failed or unfinished attach leaves in the chunk store.
@Suite struct AttachmentStoreTests {
    static func store() throws -> (AttachmentStore, String) {
        let path = NSTemporaryDirectory() + "groupmesh-store-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return (try AttachmentStore(directory: DataDirectory(path: path)), path)
    }

    static func payload(_ seed: UInt64, count: Int) -> [UInt8] {
        var random = SplitMix64(seed: seed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    @Test("an attach's chunks are pinned until its journal append ends: a collect meanwhile keeps them")
    func pinnedChunksOutliveACollect() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let manifest = try await store.ingest(Self.payload(1, count: 3000), limit: 1 << 20, chunkSize: 1024)
        // A remove of another attachment that shares these chunks, collecting while the attach waits.
        await store.collect(manifest, keeping: [])
        #expect(await store.missing(manifest).isEmpty, "a collect took the chunks of an attach still under way")
        #expect(await store.manifest(manifest.id) != nil)
        // The attach failed: its hold ends and, with nothing else using them, its chunks go.
        await store.unpin(manifest, collectKeeping: [])
        #expect(await store.missing(manifest).count == manifest.chunks.count)
        #expect(await store.manifest(manifest.id) == nil)
    }

    @Test(
        "a chunk damaged after this process wrote it: a serving read trusts the write, the scrub's read finds it and drops it"
    )
    func scrubReadVerifiesRecentWrites() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let chunk = Self.payload(3, count: 1024)
        let digest = SHA256Digest.hashing(chunk)
        #expect(await store.execute(.writeChunk(chunk, expected: digest)) == .success(.written(stored: true)))
        try Self.flipByteOfLastChunk(in: path)
        guard case .success(.read(.some)) = await store.execute(.readChunk(digest)) else {
            Issue.record("a serving read of a chunk written moments ago hashed it again")
            return
        }
        #expect(await store.execute(.verifyChunk(digest)) == .success(.read(nil)), "the scrub's read took it as intact")
        #expect(await store.execute(.readChunk(digest)) == .success(.read(nil)), "the damaged chunk was kept")
    }

    @Test("a file written to while it is attached is refused and leaves nothing; one of /proc (no size) is read whole")
    func fileChangedWhileAttached() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = path + "-file"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let original = Self.payload(5, count: 5 * 1024)
        try Data(original).write(to: URL(fileURLWithPath: file))
        let error = await #expect(throws: GroupMeshError.self) {
            try await store.ingest(fileAt: file, limit: 1 << 20, chunkSize: 1024) { chunks in
                // In place, the size kept: the last chunk, not read yet, is rewritten.
                guard chunks == 2, let handle = FileHandle(forUpdatingAtPath: file) else { return }
                try? handle.seek(toOffset: 4 * 1024)
                try? handle.write(contentsOf: Data(repeating: 0x42, count: 1024))
                try? handle.close()
                // A kernel without fine-grained timestamps may give a write in the same clock
                // tick as the attach's first look the same time; the writer's next tick would not.
                var times = [timespec(tv_sec: 1, tv_nsec: 0), timespec(tv_sec: 1, tv_nsec: 0)]
                _ = utimensat(AT_FDCWD, file, &times, 0)
            }
        }
        #expect(
            "\(error.map { "\($0)" } ?? "")".contains("changed while it was being added"),
            "\(String(describing: error))")
        let whole = Manifest(
            size: UInt64(original.count), chunkSize: 1024,
            chunks: stride(from: 0, to: original.count, by: 1024).map {
                SHA256Digest.hashing(Array(original[$0..<$0 + 1024]))
            })
        #expect(await store.missing(whole).count == 5, "chunks of the refused attach were kept")
        // Unchanged, it goes in.
        let manifest = try await store.ingest(fileAt: file, limit: 1 << 20, chunkSize: 1024)
        #expect(manifest.size == UInt64(original.count))

        let status = try await store.ingest(fileAt: "/proc/self/status", limit: 1 << 20, chunkSize: 1024)
        #expect(status.size > 0, "a file that gives no size was attached empty")
    }

    /// One flipped byte near the end of the data dir's pack: inside the bytes of the chunk
    /// written last.
    static func flipByteOfLastChunk(in path: String) throws {
        let packs = try FileManager.default.subpathsOfDirectory(atPath: path).filter { $0.hasSuffix(".pack") }
        let pack = try #require(packs.first.map { path + "/" + $0 }, "no pack in \(path)")
        let handle = try #require(FileHandle(forUpdatingAtPath: pack))
        let end = try handle.seekToEnd()
        try handle.seek(toOffset: end - 10)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: end - 10)
        try handle.write(contentsOf: [byte ^ 0x55])
        try handle.close()
    }

    @Test("a damaged manifest is reported at start as damaged, not as absent, and its chunks are left alone")
    func damagedManifestIsReported() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        // Ingest stores the manifest after the chunks: the pack's last record.
        let manifest = try await store.ingest(Self.payload(4, count: 3000), limit: 1 << 20, chunkSize: 1024)
        await store.unpin(manifest)
        let add = JournalState().makeAdd(
            AttachmentID(high: 4, low: 4), content: manifest.id, size: manifest.size,
            chunkCount: manifest.chunks.count, metadata: [],
            authority: Ed25519Authority(identity: NodeIdentity.generate()))
        try await store.appendOperations([add])
        let epochs = KeyEpochs(origin: SessionSecret.generate())
        let whole = await store.restore(epochs: epochs, remembered: .init())
        #expect(whole.complete == [manifest.id] && whole.damagedManifests.isEmpty)
        try Self.flipByteOfLastChunk(in: path)
        let damaged = await store.restore(epochs: epochs, remembered: .init())
        #expect(damaged.damagedManifests == [manifest.id], "\(damaged.damagedManifests)")
        #expect(damaged.damagedManifestsRecorded == [manifest.id], "recorded at once: the read discarded it")
        #expect(damaged.manifests.isEmpty && damaged.complete.isEmpty && damaged.logIsWhole)
        #expect(await store.missing(manifest).isEmpty, "reading the manifest took chunks with it")
        // Discarded as it was read: only the record says so now.
        #expect(await store.manifest(manifest.id) == nil)
        #expect(await store.restore(epochs: epochs, remembered: .init()).damagedManifests == [manifest.id])
        // Stored again (as a fetch stores it): whole, and the record goes.
        #expect(
            await store.execute(.writeChunk(manifest.encoded, expected: manifest.id))
                == .success(.written(stored: true)))
        let repaired = await store.restore(epochs: epochs, remembered: .init())
        #expect(repaired.damagedManifests.isEmpty && repaired.complete == [manifest.id])
        #expect(repaired.damagedManifestsRecorded == [])
        #expect(!FileManager.default.fileExists(atPath: path + "/damaged-manifests"))
        // The core's write of the record; a manifest recorded that reads whole is damaged no more.
        #expect(await store.execute(.saveDamagedManifests([manifest.id])) == .success(.done))
        let read = await store.restore(epochs: epochs, remembered: .init())
        #expect(read.damagedManifests.isEmpty && read.damagedManifestsRecorded == [])
        // A record that cannot be read whole: nothing is known of earlier damage (and it is
        // written again with what is known now).
        try Data("not an id\n".utf8).write(to: URL(fileURLWithPath: path + "/damaged-manifests"))
        #expect(await store.restore(epochs: epochs, remembered: .init()).damagedManifestsRecorded == nil)
        #expect(!FileManager.default.fileExists(atPath: path + "/damaged-manifests"))
        try FileManager.default.createDirectory(atPath: path + "/damaged-manifests", withIntermediateDirectories: false)
        #expect(await store.restore(epochs: epochs, remembered: .init()).damagedManifestsRecorded == nil)
    }

    @Test("two attaches sharing chunks: one ending its hold does not expose the other's")
    func sharedPinsCount() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let bytes = Self.payload(2, count: 2048)
        let first = try await store.ingest(bytes, limit: 1 << 20, chunkSize: 1024)
        let second = try await store.ingest(bytes, limit: 1 << 20, chunkSize: 1024)
        #expect(first == second)
        await store.unpin(first, collectKeeping: [])
        #expect(await store.missing(second).isEmpty, "the second attach's chunks went with the first's failure")
        await store.unpin(second)
        await store.collect(second, keeping: [])
        #expect(await store.missing(second).count == second.chunks.count, "unpinned chunks are collected as before")
    }

    @Test("a journal log of format 1 (before attachment ids) is read whole: every add, with its derived id")
    func formatOneLog() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let authority = Ed25519Authority(identity: NodeIdentity.generate())
        let content = SHA256Digest.hashing([1, 2, 3])
        let legacy = JournalOperation(
            kind: .add, attachmentID: nil, attachment: content, author: authority.signingKey,
            clock: 1, size: 3, chunkCount: 1, metadata: Array("old".utf8)
        ).signed(by: authority)
        let current = JournalOperation(
            kind: .add, attachmentID: AttachmentID(high: 5, low: 5), attachment: content,
            author: authority.signingKey, clock: 2, size: 3, chunkCount: 1
        ).signed(by: authority)
        try await store.appendOperations([legacy, current])
        let restored = await store.restore(epochs: KeyEpochs(origin: SessionSecret.generate()), remembered: .init())
        #expect(restored.logIsWhole && restored.operations == [legacy, current])
        var state = JournalState()
        for operation in restored.operations { state.apply(operation, authority: authority) }
        #expect(
            state.attachments.map(\.id)
                == [AttachmentID(legacyContent: content), AttachmentID(high: 5, low: 5)].sorted())
        #expect(state.attachments.allSatisfy { $0.content == content })
    }

    @Test(
        "start-up collection runs only on a journal log read whole: missing is empty, unreadable or undecodable is not")
    func logIsWholeOnlyWhenRead() async throws {
        let (store, path) = try Self.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let epochs = KeyEpochs(origin: SessionSecret.generate())
        #expect(await store.restore(epochs: epochs, remembered: .init()).logIsWhole, "no log yet: an empty journal")
        let identity = NodeIdentity.generate()
        let state = JournalState()
        let add = state.makeAdd(
            AttachmentID(high: 1, low: 2), content: SHA256Digest.hashing([1]), size: 1, chunkCount: 1, metadata: [],
            authority: Ed25519Authority(identity: identity))
        try await store.appendOperations([add])
        #expect(await store.restore(epochs: epochs, remembered: .init()).logIsWhole)
        // A record that does not decode (not a torn tail: another record follows it).
        let log = path + "/journal.log"
        let handle = try #require(FileHandle(forWritingAtPath: log))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0, 0, 0, 3, 0xde, 0xad, 0xbe]))
        try handle.close()
        try await store.appendOperations([add])
        let damaged = await store.restore(epochs: epochs, remembered: .init())
        #expect(damaged.operations.count == 2 && !damaged.logIsWhole, "\(damaged.operations.count) operations")
        // A log that is there and cannot be read (a directory in its place).
        try FileManager.default.removeItem(atPath: log)
        try FileManager.default.createDirectory(atPath: log, withIntermediateDirectories: false)
        #expect(!(await store.restore(epochs: epochs, remembered: .init()).logIsWhole))
    }
}

/// A `get` whose file is written while its fetch stores chunks (`ExportsInProgress`).
@Suite struct ProgressiveExportTests {
    /// Four 1 KiB chunks, the third the same bytes as the first (one chunk at two offsets),
    /// the last short; the manifest made by another node's store.
    static func attachment() async throws -> (Manifest, [UInt8], [[UInt8]]) {
        let (source, path) = try AttachmentStoreTests.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = AttachmentStoreTests.payload(7, count: 1024)
        let bytes =
            first + AttachmentStoreTests.payload(8, count: 1024) + first + AttachmentStoreTests.payload(9, count: 500)
        let manifest = try await source.ingest(bytes, limit: 1 << 20, chunkSize: 1024)
        let pieces = stride(from: 0, to: bytes.count, by: 1024).map { Array(bytes[$0..<min(bytes.count, $0 + 1024)]) }
        return (manifest, bytes, pieces)
    }

    static func stored(_ chunk: [UInt8], in store: AttachmentStore) async -> Bool {
        await store.execute(.writeChunk(chunk, expected: SHA256Digest.hashing(chunk)))
            == .success(.written(stored: true))
    }

    @Test(
        "what was held is written at prepare, each chunk as it is stored (at every offset it stands at), the rest at the end; the file appears only complete"
    )
    func writtenAsChunksArrive() async throws {
        let (manifest, bytes, pieces) = try await Self.attachment()
        let (store, path) = try AttachmentStoreTests.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let output = path + "/out.bin"
        #expect(await Self.stored(pieces[1], in: store))
        #expect(await store.execute(.prepareExport(manifest, to: .file(path: output))) == .success(.done))
        let partial = output + ".groupmesh-partial"
        #expect(FileManager.default.fileExists(atPath: partial))
        #expect(!FileManager.default.fileExists(atPath: output), "the file appears only once complete")
        // The repeated chunk arrives: it lands at both of its offsets.
        #expect(await Self.stored(pieces[0], in: store))
        await store.settleExports()
        let written = try [UInt8](Data(contentsOf: URL(fileURLWithPath: partial)))
        #expect(Array(written[0..<1024]) == pieces[0] && Array(written[2048..<3072]) == pieces[0])
        #expect(Array(written[1024..<2048]) == pieces[1], "what was held at prepare is in")
        // The last chunk reaches the store by another way than a fetched chunk's (no prepared
        // export hears of it): the export at the end writes what is missing.
        try await store.write(pieces[3], expected: SHA256Digest.hashing(pieces[3]))
        await store.settleExports()
        let before = try [UInt8](Data(contentsOf: URL(fileURLWithPath: partial)))
        #expect(before.count < bytes.count, "the last chunk was written before the export's end")
        let exported = await store.execute(.export(manifest, to: .file(path: output)))
        #expect(exported == .success(.exported(nil)))
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: output))) == bytes)
        #expect(!FileManager.default.fileExists(atPath: partial))
    }

    @Test(
        "an export given up is not renamed into place, prepared or not; a later export of the path is not given up; without replace a file there is kept"
    )
    func givenUpAndKept() async throws {
        let (manifest, bytes, pieces) = try await Self.attachment()
        let (store, path) = try AttachmentStoreTests.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        for piece in Set(pieces.map { $0 }) { try await store.write(piece, expected: SHA256Digest.hashing(piece)) }
        let output = path + "/out.bin"
        for prepared in [false, true] {
            if prepared {
                #expect(await store.execute(.prepareExport(manifest, to: .file(path: output))) == .success(.done))
            }
            store.cancelledExports.insert(output)
            let exported = await store.execute(.export(manifest, to: .file(path: output)))
            #expect(exported != .success(.exported(nil)), "prepared: \(prepared)")
            #expect(
                !FileManager.default.fileExists(atPath: output)
                    && !FileManager.default.fileExists(atPath: output + ".groupmesh-partial"))
        }
        #expect(
            await store.execute(.export(manifest, to: .file(path: output))) == .success(.exported(nil)),
            "the cancel was taken once")
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: output))) == bytes)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: output))
        let kept = await store.execute(.export(manifest, to: .file(path: output, replace: false)))
        #expect(kept != .success(.exported(nil)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)) == Data("mine".utf8))
    }

    @Test(
        "chunks on the 4 KiB grid (written around the page cache where the file system allows) and a short last one: the file holds exactly the attachment"
    )
    func gridSizedChunks() async throws {
        let (source, sourcePath) = try AttachmentStoreTests.store()
        defer { try? FileManager.default.removeItem(atPath: sourcePath) }
        let bytes = AttachmentStoreTests.payload(11, count: 8192 * 5 + 1234)
        let manifest = try await source.ingest(bytes, limit: 1 << 20, chunkSize: 8192)
        let chunks = stride(from: 0, to: bytes.count, by: 8192).map { Array(bytes[$0..<min(bytes.count, $0 + 8192)]) }
        let (store, path) = try AttachmentStoreTests.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let output = path + "/out.bin"
        #expect(await store.execute(.prepareExport(manifest, to: .file(path: output))) == .success(.done))
        // Out of order, as holders deliver them; the last one (short) is left to the export.
        for index in [3, 0, 4, 1, 2] { #expect(await Self.stored(chunks[index], in: store)) }
        try await store.write(chunks[5], expected: SHA256Digest.hashing(chunks[5]))
        #expect(await store.execute(.export(manifest, to: .file(path: output))) == .success(.exported(nil)))
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: output))) == bytes)
        #expect(!FileManager.default.fileExists(atPath: output + ".groupmesh-partial"))
    }

    @Test(
        "a cancelled export leaves nothing behind; one prepared for other content is discarded and the right bytes written"
    )
    func cancelledAndMismatched() async throws {
        let (manifest, bytes, pieces) = try await Self.attachment()
        let (store, path) = try AttachmentStoreTests.store()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let output = path + "/out.bin"
        _ = await store.execute(.prepareExport(manifest, to: .file(path: output)))
        #expect(await store.execute(.cancelExport(to: .file(path: output))) == .success(.done))
        #expect(!FileManager.default.fileExists(atPath: output + ".groupmesh-partial"))
        // Prepared for one content, exported as another (a remove and a new add in between).
        let other = Manifest(size: 1024, chunkSize: 1024, chunks: [SHA256Digest.hashing(pieces[1])])
        _ = await store.execute(.prepareExport(other, to: .file(path: output)))
        for piece in pieces { #expect(await Self.stored(piece, in: store)) }
        #expect(await store.execute(.export(manifest, to: .file(path: output))) == .success(.exported(nil)))
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: output))) == bytes)
    }
}
