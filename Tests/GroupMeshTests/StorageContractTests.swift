import Foundation
@testable import GroupMesh
import MeshCore
import MeshCrypto
import MeshStore
import NIOCore
@testable import MeshTestKit
import Testing

/// A store that answers the core's `StorageRequest`s, under the contract: the node's disk
/// (`AttachmentStore` over `ChunkStore`, in a temporary directory) or the simulator's
/// (`SimStorage` over `SimChunkStore`).
protocol ContractedStore: AnyObject {
    func execute(_ request: StorageRequest) async -> Result<StorageOutcome, StorageFailure>
    /// A byte of a stored chunk changes on the disk.
    func damage(_ digest: SHA256Digest) async throws
    /// The process ends (a crash: nothing is let go in order) and a new one opens the same disk.
    func restart() async throws
    /// The journal's operations as the disk holds them.
    func journal() async -> [JournalOperation]
}

/// The node's disk: a data directory of its own, removed when the test ends.
final class DiskStoreUnderContract: ContractedStore {
    let directory: DataDirectory
    var store: AttachmentStore

    init() throws {
        let path = NSTemporaryDirectory() + "groupmesh-contract-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        directory = DataDirectory(path: path)
        store = try AttachmentStore(directory: directory)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory.path) }

    func execute(_ request: StorageRequest) async -> Result<StorageOutcome, StorageFailure> {
        await store.execute(request)
    }

    func damage(_ digest: SHA256Digest) async throws {
        let stored = try #require(
            ChunkStore.survey(directory.chunksPath)[digest],
            "chunk \(digest.hex) is not on disk")
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: stored.file))
        defer { try? handle.close() }
        let at = UInt64(stored.offset) + UInt64(stored.length / 2)
        try handle.seek(toOffset: at)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: at)
        try handle.write(contentsOf: Data([byte ^ 0x55]))
    }

    func restart() async throws {
        store = try AttachmentStore(directory: directory)
    }

    func journal() async -> [JournalOperation] { await store.loadOperations().operations }
}

/// The simulator's disk, as a simulated node keeps it across a restart (`SimNode.restart`).
final class SimulatedStoreUnderContract: ContractedStore {
    var storage = SimStorage()
    var random = SplitMix64(seed: 1)

    func execute(_ request: StorageRequest) async -> Result<StorageOutcome, StorageFailure> {
        storage.execute(request, random: &random)
    }

    func damage(_ digest: SHA256Digest) async throws {
        try #require(storage.chunks.contains(digest), "chunk \(digest.hex) is not stored")
        storage.chunks.damage(digest)
    }

    func restart() async throws { storage.abandonPending() }

    func journal() async -> [JournalOperation] { storage.log }
}

/// What the core relies on of its store (`StorageRequest`, `StorageOutcome`), asked of both
/// stores alike so that the simulator's cannot drift from the node's. Exports into files, the
/// key epochs and the remembered members are the node's alone (the simulator has no files, and
/// hands those back to a restarted node itself), and are tested with `AttachmentStore`.
@Suite("Storage contract")
struct StorageContractTests {
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case disk, simulated
        var testDescription: String { rawValue }

        func make() throws -> any ContractedStore {
            switch self {
            case .disk: return try DiskStoreUnderContract()
            case .simulated: return SimulatedStoreUnderContract()
            }
        }
    }

    static func payload(_ seed: UInt64, count: Int) -> [UInt8] {
        var random = SplitMix64(seed: seed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    static let limit: UInt64 = 1 << 20

    struct UnexpectedOutcome: Error {
        let result: Result<StorageOutcome, StorageFailure>
    }

    /// Ingests `bytes` in chunks of 1 KiB and ends its hold (as a journal append that succeeded does).
    static func added(_ bytes: [UInt8], to store: any ContractedStore) async throws -> Manifest {
        let result = await store.execute(.ingest(.bytes(bytes), chunkSize: 1024, limit: limit))
        guard case let .success(.ingested(manifest)) = result else { throw UnexpectedOutcome(result: result) }
        #expect(await store.execute(.unpin(manifest, collectKeeping: nil)) == .success(.done))
        return manifest
    }

    @Test(
        "a chunk is kept only under its own hash, read back as written, and claimed once stored",
        arguments: Kind.allCases)
    func writeReadInspect(kind: Kind) async throws {
        let store = try kind.make()
        let bytes = Self.payload(1, count: 700), digest = SHA256Digest.hashing(bytes)
        let other = SHA256Digest.hashing(Self.payload(2, count: 700))
        let manifest = Manifest(size: 2100, chunkSize: 700, chunks: [digest, other, digest])
        #expect(await store.execute(.readChunk(digest)) == .success(.read(nil)), "nothing stored yet")
        #expect(
            await store.execute(.inspect(manifest)) == .success(.inspected(missing: [digest, other])),
            "each missing chunk once, in the manifest's order")
        #expect(await store.execute(.writeChunk(bytes, expected: other)) == .success(.written(stored: false)))
        #expect(await store.execute(.readChunk(other)) == .success(.read(nil)), "bytes under another's name")
        #expect(await store.execute(.readChunk(digest)) == .success(.read(nil)))
        #expect(await store.execute(.writeChunk(bytes, expected: digest)) == .success(.written(stored: true)))
        #expect(
            await store.execute(.readChunk(digest)) == .success(.read(ByteBuffer(bytes: bytes))),
            "readable before a flush")
        #expect(
            await store.execute(.writeChunk(bytes, expected: digest)) == .success(.written(stored: true)),
            "stored again: nothing changes")
        #expect(await store.execute(.flush) == .success(.done))
        #expect(await store.execute(.inspect(manifest)) == .success(.inspected(missing: [other])))
    }

    @Test(
        "an ingest stores its chunks and its manifest under the attachment id; an export gives them back",
        arguments: Kind.allCases)
    func ingestAndExport(kind: Kind) async throws {
        let store = try kind.make()
        let bytes = Self.payload(3, count: 3000)
        let manifest = try await Self.added(bytes, to: store)
        #expect(
            manifest
                == Manifest(
                    size: 3000, chunkSize: 1024,
                    chunks: [
                        SHA256Digest.hashing(Array(bytes[0..<1024])), SHA256Digest.hashing(Array(bytes[1024..<2048])),
                        SHA256Digest.hashing(Array(bytes[2048...])),
                    ]))
        #expect(await store.execute(.readChunk(manifest.id)) == .success(.read(ByteBuffer(bytes: manifest.encoded))))
        #expect(await store.execute(.inspect(manifest)) == .success(.inspected(missing: [])))
        #expect(await store.execute(.export(manifest, to: .memory)) == .success(.exported(bytes)))
        // Preparing or cancelling an export into memory is nothing to do.
        #expect(await store.execute(.prepareExport(manifest, to: .memory)) == .success(.done))
        #expect(await store.execute(.cancelExport(to: .memory)) == .success(.done))
        let empty = try await Self.added([], to: store)
        #expect(empty.chunks.isEmpty)
        #expect(await store.execute(.export(empty, to: .memory)) == .success(.exported([])))
    }

    @Test("an ingest over the limit, or of what cannot be read, stores nothing", arguments: Kind.allCases)
    func ingestRefusals(kind: Kind) async throws {
        let store = try kind.make()
        let bytes = Self.payload(4, count: 2049)
        #expect(
            await store.execute(.ingest(.bytes(bytes), chunkSize: 1024, limit: 2048))
                == .failure(.tooLarge(size: 2049, limit: 2048)))
        let missingFile = NSTemporaryDirectory() + "groupmesh-contract-absent-\(UUID().uuidString.prefix(8))"
        let unreadable = await store.execute(.ingest(.file(path: missingFile), chunkSize: 1024, limit: Self.limit))
        guard case .failure(.unreadable) = unreadable else {
            Issue.record("a file that is not there is unreadable")
            return
        }
        #expect(
            await store.execute(.collectUnreferenced(keeping: [])) == .success(.collected(chunks: 0, bytes: 0)),
            "a refused ingest left chunks behind")
    }

    @Test(
        "a chunk that fails its hash when read is reported, discarded, and no longer claimed",
        arguments: Kind.allCases)
    func damagedChunks(kind: Kind) async throws {
        let store = try kind.make()
        let bytes = Self.payload(5, count: 4096)
        let manifest = try await Self.added(bytes, to: store)
        let (first, third) = (manifest.chunks[0], manifest.chunks[2])
        try await store.damage(first)
        try await store.damage(third)
        // Damaged on disk while no process had it open: nothing read then is trusted.
        try await store.restart()
        #expect(await store.execute(.readChunk(first)) == .success(.read(nil)), "damaged bytes were served")
        #expect(
            await store.execute(.inspect(manifest)) == .success(.inspected(missing: [first])),
            "a chunk found damaged is fetched again")
        // An export stops at the first chunk it cannot read and says how many are no longer held.
        guard case let .failure(.damaged(reason)) = await store.execute(.export(manifest, to: .memory)) else {
            Issue.record("an export of a damaged attachment did not say so")
            return
        }
        #expect(reason.hasPrefix("1 of its 4 chunks"), "\(reason)")
        // The read had not reached the third before: a later one finds it.
        #expect(await store.execute(.readChunk(third)) == .success(.read(nil)))
        #expect(await store.execute(.inspect(manifest)) == .success(.inspected(missing: [first, third])))
        #expect(
            await store.execute(.writeChunk(Array(bytes[0..<1024]), expected: first))
                == .success(.written(stored: true)), "a damaged chunk fetched again is stored again")
        #expect(await store.execute(.readChunk(first)) == .success(.read(ByteBuffer(bytes: bytes[0..<1024]))))
    }

    @Test(
        "a collect takes the removed attachment's own chunks and its manifest, not those another keeps",
        arguments: Kind.allCases)
    func collect(kind: Kind) async throws {
        let store = try kind.make()
        let shared = Self.payload(6, count: 1024)
        let removed = try await Self.added(shared + Self.payload(7, count: 1024), to: store)
        let kept = try await Self.added(shared + Self.payload(8, count: 1024), to: store)
        #expect(await store.execute(.collect(removed, keeping: [kept])) == .success(.done))
        #expect(await store.execute(.inspect(removed)) == .success(.inspected(missing: [removed.chunks[1]])))
        #expect(await store.execute(.readChunk(removed.id)) == .success(.read(nil)), "its manifest stayed")
        #expect(await store.execute(.inspect(kept)) == .success(.inspected(missing: [])))
        #expect(await store.execute(.readChunk(kept.id)) == .success(.read(ByteBuffer(bytes: kept.encoded))))
    }

    @Test(
        "an ingest holds its chunks until unpinned; two ingests of the same bytes hold them twice",
        arguments: Kind.allCases)
    func pins(kind: Kind) async throws {
        let store = try kind.make()
        let bytes = Self.payload(9, count: 3000)
        let request = StorageRequest.ingest(.bytes(bytes), chunkSize: 1024, limit: Self.limit)
        guard case let .success(.ingested(manifest)) = await store.execute(request),
            await store.execute(request) == .success(.ingested(manifest))
        else {
            Issue.record("the ingests failed")
            return
        }
        #expect(await store.execute(.collect(manifest, keeping: [])) == .success(.done))
        #expect(
            await store.execute(.collectUnreferenced(keeping: [])) == .success(.collected(chunks: 0, bytes: 0)),
            "a collect took the chunks of an ingest still held")
        #expect(await store.execute(.unpin(manifest, collectKeeping: [])) == .success(.done))
        #expect(
            await store.execute(.inspect(manifest)) == .success(.inspected(missing: [])),
            "one hold ended, the other still holds them")
        #expect(await store.execute(.unpin(manifest, collectKeeping: [])) == .success(.done))
        #expect(
            await store.execute(.inspect(manifest)) == .success(.inspected(missing: manifest.chunks)),
            "a failed add's unpin collects it in the same step")
        #expect(await store.execute(.readChunk(manifest.id)) == .success(.read(nil)))
    }

    @Test("a restart keeps what was flushed and the journal, and lets every hold go", arguments: Kind.allCases)
    func restart(kind: Kind) async throws {
        let store = try kind.make()
        let fetched = Self.payload(10, count: 800), digest = SHA256Digest.hashing(fetched)
        #expect(await store.execute(.writeChunk(fetched, expected: digest)) == .success(.written(stored: true)))
        #expect(await store.execute(.flush) == .success(.done))
        let bytes = Self.payload(11, count: 3000)
        // Held: its add never reached the journal.
        let ingest = await store.execute(.ingest(.bytes(bytes), chunkSize: 1024, limit: Self.limit))
        guard case let .success(.ingested(manifest)) = ingest else {
            Issue.record("the ingest failed")
            return
        }
        let author = SimulationAuthority(index: 1)
        let operations = (1...3).map { clock in
            JournalOperation(
                kind: .add, attachmentID: AttachmentID(high: UInt64(clock), low: 1),
                attachment: SHA256Digest.hashing([UInt8(clock)]), author: author.signingKey,
                clock: UInt64(clock), size: 1, chunkCount: 1
            ).signed(by: author)
        }
        #expect(await store.execute(.appendJournal(Array(operations[0..<2]))) == .success(.done))
        #expect(await store.execute(.appendJournal([operations[2]])) == .success(.done))
        #expect(await store.execute(.appendJournal([])) == .success(.done))
        try await store.restart()
        #expect(await store.journal() == operations)
        #expect(await store.execute(.readChunk(digest)) == .success(.read(ByteBuffer(bytes: fetched))))
        #expect(await store.execute(.export(manifest, to: .memory)) == .success(.exported(bytes)))
        // The ingest's hold went with the process: start-up collects what nothing keeps.
        let expected = StorageOutcome.collected(
            chunks: 1 + manifest.chunks.count + 1,
            bytes: UInt64(fetched.count + bytes.count + manifest.encoded.count))
        #expect(await store.execute(.collectUnreferenced(keeping: [])) == .success(expected))
        #expect(await store.execute(.readChunk(digest)) == .success(.read(nil)))
    }

    @Test("start-up collection keeps what the journal's attachments use", arguments: Kind.allCases)
    func collectUnreferencedKeeps(kind: Kind) async throws {
        let store = try kind.make()
        let kept = try await Self.added(Self.payload(12, count: 2048), to: store)
        let stray = Self.payload(13, count: 500)
        #expect(
            await store.execute(.writeChunk(stray, expected: SHA256Digest.hashing(stray)))
                == .success(.written(stored: true)))
        #expect(
            await store.execute(.collectUnreferenced(keeping: [kept]))
                == .success(.collected(chunks: 1, bytes: 500)))
        #expect(
            await store.execute(.export(kept, to: .memory))
                == .success(.exported(Self.payload(12, count: 2048))))
    }
}
