import MeshCore
import MeshCrypto
import NIOCore

/// A simulated node's disk, answering the core's storage requests as `AttachmentStore` does on
/// a real one: chunks in a `SimChunkStore` (verified on write and read), the journal log, the
/// key epochs and the remembered members kept (a restarted node reads them back). Requests are
/// answered in order, at once or each after a seeded delay, and may fail or lie as the
/// conditions say, so that the interleavings of a slow or failing disk replay from a seed.
package struct SimStorage {
    package struct Conditions: Sendable {
        /// Each request takes a random time in this range; nil: answered in the same step.
        package var delay: ClosedRange<Duration>?
        /// Writes (chunks, log appends, flushes, ingests, epochs) fail with this probability
        /// while `failingWrites` is set: a disk that is full now and then.
        package var writeFailureProbability = 0.0
        package var failingWrites = false
        /// Chunks read for serving come back with a byte changed and unverified: a member that
        /// serves bad pieces.
        package var corruptReads = false
        /// Every journal log append fails (an unwritable log), the rest works.
        package var refuseJournalAppends = false
        /// Every chunk read finds nothing (a disk that cannot be read for a while).
        package var refuseReads = false

        package init(delay: ClosedRange<Duration>? = nil) {
            self.delay = delay
        }
    }

    package var conditions: Conditions
    package internal(set) var chunks = SimChunkStore()
    package internal(set) var log: [JournalOperation] = []
    package internal(set) var epochs: KeyEpochs.Files?
    package internal(set) var remembered = RememberedMembers()
    /// The disk made the session's secret (the data dir's `founded` mark): its node founded it.
    package internal(set) var founded = false
    /// The nonce of the session's founding id that the founding drew (nil: founded by a release
    /// without it).
    package internal(set) var foundingNonce: [UInt8]?
    /// The session end this disk recorded (`StorageRequest.saveEnded`).
    package internal(set) var ended: [UInt8]?
    /// The attachments whose manifests are recorded damaged (`StorageRequest.saveDamagedManifests`).
    package internal(set) var damagedManifests: [SHA256Digest] = []
    package internal(set) var failedWrites = 0

    package init(conditions: Conditions = .init()) {
        self.conditions = conditions
    }

    /// A crash: what was written stays, what was held for ingests in progress is let go.
    mutating func abandonPending() {
        chunks.releasePins()
    }

    /// What a node booting on this disk restores (`identity` checks the log's signatures).
    func restored(origin: SessionSecret, identity: NodeIdentity) -> NodeInstance.Restored {
        var epochs =
            self.epochs.flatMap { try? KeyEpochs.decode($0.chain, origin: origin) } ?? KeyEpochs(origin: origin)
        // As the data dir does: a rivals file that does not load is left out, not fatal.
        try? epochs.restoreRivals(self.epochs?.rivals ?? [])
        var state = JournalState()
        for operation in log { _ = state.apply(operation, authority: Ed25519Authority(identity: identity)) }
        let manifests = state.presentContents.compactMap { chunks.manifest($0) }
        let complete = Set(manifests.filter { chunks.missing($0).isEmpty }.map(\.id))
        var restored = NodeInstance.Restored(
            epochs: epochs, remembered: remembered, operations: log,
            manifests: manifests, complete: complete)
        restored.logIsWhole = true
        restored.founded = founded
        restored.foundingNonce = foundingNonce
        // Stored, but no longer what it is named: damaged (the store discards it when it reads it).
        let found = state.presentContents.filter { chunks.contains($0) && chunks.manifest($0) == nil }
        restored.damagedManifests = Set(found + damagedManifests).filter { chunks.manifest($0) == nil }.sorted()
        // What the disk holds: the core records the rest at start (`AttachmentStore.restore`
        // records what it found itself, a step sooner).
        restored.damagedManifestsRecorded = damagedManifests
        return restored
    }

    /// Carries out one request.
    package mutating func execute(
        _ request: StorageRequest, random: inout SplitMix64
    ) -> Result<StorageOutcome, StorageFailure> {
        if request.isWrite, conditions.failingWrites,
            Double(random.next() >> 11) / Double(1 << 53) < conditions.writeFailureProbability
        {
            failedWrites += 1
            return .failure(.failed("no space left on the simulated disk; nothing was lost"))
        }
        if case .appendJournal = request, conditions.refuseJournalAppends {
            failedWrites += 1
            return .failure(.failed("cannot append to the simulated journal log"))
        }
        switch request {
        case let .ingest(source, chunkSize, limit):
            guard case let .bytes(bytes) = source else { return .failure(.unreadable("a simulated node has no files")) }
            guard UInt64(bytes.count) <= limit else {
                return .failure(.tooLarge(size: UInt64(bytes.count), limit: limit))
            }
            return .success(.ingested(chunks.ingest(bytes, chunkSize: chunkSize)))
        case let .appendJournal(operations):
            log += operations
            return .success(.done)
        case let .readChunk(digest), let .verifyChunk(digest):
            if conditions.refuseReads { return .success(.read(nil)) }
            if conditions.corruptReads, var bytes = chunks.chunks[digest], !bytes.isEmpty {
                bytes[bytes.count / 2] ^= 0x55
                return .success(.read(ByteBuffer(bytes: bytes)))
            }
            return .success(.read(chunks.readDiscardingDamage(digest).map { ByteBuffer(bytes: $0) }))
        case let .writeChunk(bytes, expected):
            return .success(.written(stored: chunks.write(bytes, expected: expected)))
        case .flush:
            return .success(.done)
        case let .inspect(manifest):
            return .success(.inspected(missing: chunks.missing(manifest)))
        case let .export(manifest, destination):
            guard destination == .memory else { return .failure(.failed("a simulated node has no files")) }
            var bytes: [UInt8] = []
            for digest in manifest.chunks {
                // As the real store does: a chunk that does not verify is discarded as it is read,
                // the export stops there, and says how many chunks are no longer held.
                guard let chunk = chunks.readDiscardingDamage(digest) else {
                    let lost = chunks.missing(manifest).count
                    return .failure(
                        .damaged("\(lost) of its \(manifest.chunks.count) chunks were damaged on disk and discarded"))
                }
                bytes += chunk
            }
            return .success(.exported(bytes))
        case .prepareExport, .cancelExport:
            // No files here: an export into memory is written at the end.
            return .success(.done)
        case let .collect(manifest, kept):
            chunks.collect(manifest, keeping: kept)
            return .success(.done)
        case let .unpin(manifest, kept):
            chunks.unpin(manifest, collectKeeping: kept)
            return .success(.done)
        case let .collectUnreferenced(kept):
            let (count, bytes) = chunks.collectUnreferenced(keeping: kept)
            return .success(.collected(chunks: count, bytes: bytes))
        case let .saveEpochs(files):
            epochs = files
            return .success(.done)
        case let .saveMembers(members):
            remembered = members
            return .success(.done)
        case let .saveEnded(statement):
            ended = statement
            return .success(.done)
        case let .saveDamagedManifests(ids):
            damagedManifests = ids
            return .success(.done)
        }
    }
}

extension StorageRequest {
    /// What a full disk refuses.
    var isWrite: Bool {
        switch self {
        case .ingest, .appendJournal, .writeChunk, .flush, .saveEpochs, .saveEnded, .saveDamagedManifests: return true
        case .readChunk, .verifyChunk, .inspect, .export, .prepareExport, .cancelExport, .collect, .unpin,
            .collectUnreferenced,
            .saveMembers:
            return false
        }
    }
}
