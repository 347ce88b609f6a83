import MeshCrypto
import NIOCore

/// Work the core hands to the store. The driver executes requests one at a time in the order
/// they came (a chunk written before a collect is collected by it; an export queued before a
/// collect reads whole chunks), and answers each with a `StorageOutcome` or a `StorageFailure`.
package enum StorageRequest: Sendable {
    /// Cut `source` into chunks of `chunkSize`, store them and their manifest durably, and hold
    /// them (no collect takes them) until an `unpin` of that manifest. `.ingested(manifest)`.
    case ingest(AttachmentSource, chunkSize: Int, limit: UInt64)
    /// Append and fsync operations to the journal log. `.done`.
    case appendJournal([JournalOperation])
    /// A chunk (or manifest), verified against its name on the way unless this process verified
    /// it as it stored it lately. `.read(bytes or nil)`.
    case readChunk(SHA256Digest)
    /// A chunk read and hashed again whatever this process wrote lately (the scrub: damage can
    /// come after the write). `.read(bytes or nil)`; one that fails is discarded.
    case verifyChunk(SHA256Digest)
    /// Store bytes if they hash to `expected` (hashed here, once). `.written(stored:)`.
    case writeChunk([UInt8], expected: SHA256Digest)
    /// Make every chunk written so far durable. `.done`.
    case flush
    /// Which chunks of a manifest are not stored. `.inspected(missing:)`.
    case inspect(Manifest)
    /// The attachment's bytes, every chunk verified. `.exported(bytes when into memory)`.
    case export(Manifest, to: ExportDestination)
    /// A load into a file waits for this attachment's fetch: open the file's temporary now and
    /// write into it what is stored and every chunk as it is stored, so that the `export` at the
    /// end only fills what is missing, syncs and renames. `.done`; the export still does
    /// everything itself when this could not be done.
    case prepareExport(Manifest, to: ExportDestination)
    /// The export prepared for this destination will not come: its temporary file goes. `.done`.
    case cancelExport(to: ExportDestination)
    /// Delete the chunks of `removed` (and its manifest) that none of `keeping` uses and no
    /// ingest holds. `.done`.
    case collect(Manifest, keeping: [Manifest])
    /// End an ingest's hold; when its add failed, collect it too in the same step. `.done`.
    case unpin(Manifest, collectKeeping: [Manifest]?)
    /// At start, before anything else: delete every stored chunk and manifest that none of
    /// `keeping` uses (what a crash left: an ingest whose add never reached the log, a remove
    /// whose collect never ran). `.collected(chunks:bytes:)`.
    case collectUnreferenced(keeping: [Manifest])
    /// Write the key epochs (`KeyEpochs.files`, secrets inside) durably: the chain first, then
    /// the rotations that lost (none: no file). `.done`.
    case saveEpochs(KeyEpochs.Files)
    /// Write what the node remembers of the members. `.done`.
    case saveMembers(RememberedMembers)
    /// Remember for good that the session was ended (`SessionEnd.encoded`): the data dir
    /// refuses to start again. `.done`.
    case saveEnded([UInt8])
    /// Write which attachments' manifests are damaged and not stored again yet
    /// (`Restored.damagedManifests`), durably. `.done`.
    case saveDamagedManifests([SHA256Digest])
}

package enum StorageOutcome: Sendable, Equatable {
    case done
    case ingested(Manifest)
    /// Nil: not stored, or no longer matching its name. A buffer of its own: a served chunk's
    /// pieces are views of it, sealed straight out of it.
    case read(ByteBuffer?)
    /// False: the bytes did not hash to the expected digest, and were not stored.
    case written(stored: Bool)
    case inspected(missing: [SHA256Digest])
    case exported([UInt8]?)
    case collected(chunks: Int, bytes: UInt64)
}

/// Why the store could not do what it was asked; the text is a sentence a person can act on.
package enum StorageFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What `ingest` was given is over the attachment limit.
    case tooLarge(size: UInt64, limit: UInt64)
    /// What `ingest` was given cannot be read as an attachment (no such file, not a regular file…).
    case unreadable(String)
    /// The disk refused (full, unwritable…).
    case failed(String)
    /// Chunks of the attachment did not verify when read (damaged on disk) and were discarded:
    /// it is no longer whole here.
    case damaged(String)

    package var description: String {
        switch self {
        case let .tooLarge(size, limit):
            return
                "attachment of \(size) bytes is over the limit of \(limit) bytes (\(limit >> 20) MiB); nothing was stored"
        case let .unreadable(message), let .failed(message), let .damaged(message):
            return message
        }
    }
}

/// Says what a storage request was for; the driver hands it back with the outcome and never
/// looks inside.
package struct StorageTicket: Sendable {
    let purpose: StoragePurpose
}

/// What the core does with a storage outcome.
enum StoragePurpose: Sendable {
    case ingest(RequestID, metadata: [UInt8])
    /// A local operation, published only once it is in the log.
    case appendLocal(RequestID, JournalOperation, LocalChange)
    /// Operations of others: on failure they are appended again later.
    case appendRemote([JournalOperation])
    case serveChunk(ChunkWant, to: NodeID)
    case serveManifest(SHA256Digest, to: NodeID)
    /// A read of the scrub.
    case scrubChunk(SHA256Digest)
    /// A manifest the scrub found damaged, written again from memory, then synced.
    case rewriteManifest(SHA256Digest, synced: Bool)
    case saveDamagedManifests
    case storeChunk(SHA256Digest, refs: [ChunkRef], from: NodeID, contributors: Set<NodeID>)
    case storeManifest(Manifest)
    case inspect(SHA256Digest)
    /// The last chunk of a fetch is stored: it is complete once durable.
    case completeFetch(SHA256Digest)
    case export(RequestID, Manifest, ExportDestination)
    case saveRemoval(RequestID, KeyEpochs.Transition, member: NodeID)
    case saveEpochs
    case saveMembers
    case saveEnded
    /// What start-up collected, for the log.
    case startupCollection
    /// Nothing to do but report a failure.
    case housekeeping
}

enum LocalChange: Sendable {
    case add(Manifest)
    case remove
}

/// One chunk of one attachment: what a chunk request was for.
struct ChunkRef: Hashable, Sendable {
    var attachment: SHA256Digest
    var index: Int
}
