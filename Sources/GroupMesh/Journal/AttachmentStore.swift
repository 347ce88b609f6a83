import Foundation
import MeshCore
import MeshCrypto
import MeshStore

/// The node's disk: chunks (and manifests, stored as chunks named by the attachment id) in a
/// `ChunkStore`, and the journal's operations in an append-only log. An actor of its own, so
/// file I/O never runs on the node's event loop.
actor AttachmentStore {
    let chunks: ChunkStore
    let directory: DataDirectory
    let logPath: String
    /// `get`s whose file is written as their fetch stores chunks.
    private var exportsInProgress = ExportsInProgress()
    /// Output paths whose load was given up while the store may be writing them: the shell marks
    /// them from the node's executor, the store checks before the rename.
    nonisolated let cancelledExports = ExportCancellations()

    init(directory: DataDirectory) throws(GroupMeshError) {
        do {
            chunks = try ChunkStore(path: directory.chunksPath)
        } catch {
            throw .store(error.description)
        }
        chunks.batchLimit = 32
        self.directory = directory
        logPath = directory.journalPath
    }

    /// What opening the chunk store found damaged and left unread, one line each.
    var damage: [String] { chunks.damage }

    // MARK: the core's requests

    /// Carries out `jobs` one at a time, in order, until the stream ends.
    func serve(_ jobs: AsyncStream<StorageWorker.Job>, delivering deliver: StorageWorker.Delivery) async {
        for await job in jobs { deliver(job.ticket, execute(job.request)) }
    }

    func execute(_ request: StorageRequest) -> Result<StorageOutcome, StorageFailure> {
        do throws(GroupMeshError) {
            switch request {
            case let .ingest(.file(path), chunkSize, limit):
                return .success(.ingested(try ingest(fileAt: path, limit: limit, chunkSize: chunkSize)))
            case let .ingest(.bytes(bytes), chunkSize, limit):
                return .success(.ingested(try ingest(bytes, limit: limit, chunkSize: chunkSize)))
            case let .appendJournal(operations):
                try appendOperations(operations)
            case let .readChunk(digest):
                // Served or exported: a chunk this process hashed on its way in moments ago is
                // not hashed again (the asker verifies every chunk it gets in any case).
                return .success(.read(try? chunks.readBuffer(digest, trustingRecentWrites: true)))
            case let .verifyChunk(digest):
                // Damage (or a chunk gone) is the answer; a disk that fails the read is not.
                do throws(MeshStoreError) {
                    return .success(.read(try chunks.readBuffer(digest)))
                } catch .notFound, .corrupt {
                    return .success(.read(nil))
                } catch {
                    return .failure(.unreadable("\(error)"))
                }
            case let .writeChunk(bytes, expected):
                switch writeFetched(bytes, expected: expected) {
                case .stored:
                    if !exportsInProgress.isEmpty { exportsInProgress.stored(bytes, as: expected) }
                    return .success(.written(stored: true))
                case .mismatch: return .success(.written(stored: false))
                case let .failed(reason): return .failure(.failed(reason))
                }
            case .flush:
                try flush()
            case let .inspect(manifest):
                return .success(.inspected(missing: missing(manifest)))
            case let .export(manifest, destination):
                do {
                    if case let .file(path, mode, replace) = destination {
                        try assemble(manifest, to: path, mode: mode, replace: replace)
                        return .success(.exported(nil))
                    }
                    return .success(.exported(try bytes(of: manifest)))
                } catch {
                    // A chunk that did not verify was discarded as it was read: no longer whole.
                    let lost = missing(manifest)
                    guard lost.isEmpty else {
                        return .failure(
                            .damaged(
                                "\(lost.count) of its \(manifest.chunks.count) chunks were damaged on disk and discarded"
                            ))
                    }
                    throw error
                }
            case let .prepareExport(manifest, .file(path, mode, _)):
                exportsInProgress.prepare(manifest, to: path, mode: mode) {
                    try? chunks.read($0, trustingRecentWrites: true)
                }
            case .prepareExport(_, .memory), .cancelExport(.memory):
                break
            case let .cancelExport(.file(path, _, _)):
                exportsInProgress.cancel(path)
            case let .collect(manifest, kept):
                collect(manifest, keeping: kept)
            case let .unpin(manifest, kept):
                unpin(manifest, collectKeeping: kept)
            case let .collectUnreferenced(kept):
                let (count, bytes) = collectUnreferenced(keeping: kept)
                return .success(.collected(chunks: count, bytes: bytes))
            case let .saveEpochs(files):
                try directory.saveEpochs(files)
            case let .saveMembers(members):
                try directory.saveRememberedMembers(members)
            case let .saveEnded(statement):
                try directory.saveEnded(statement)
            case let .saveDamagedManifests(ids):
                try directory.saveDamagedManifests(ids)
            }
            return .success(.done)
        } catch {
            return .failure(StorageFailure(error))
        }
    }

    /// What the data dir holds for a starting node: the journal log, the manifests of its
    /// attachments, and which of them are whole.
    func restore(epochs: KeyEpochs, remembered: RememberedMembers) -> NodeInstance.Restored {
        let (operations, whole) = loadOperations()
        var restored = NodeInstance.Restored(epochs: epochs, remembered: remembered, operations: operations)
        restored.logIsWhole = whole
        // A damaged manifest is discarded as it is read: it goes into the record at once, and
        // the core keeps it there until it is stored again, so that no start before then
        // deletes its chunks. Records the chunk store lost as it opened may have held manifests:
        // every attachment without one is taken for damaged then (the core fetches them).
        var recorded = directory.loadDamagedManifests()
        var damaged = recorded ?? []
        let storeLostRecords = !chunks.damage.isEmpty
        for id in Set(operations.filter { $0.kind == .add }.map(\.attachment)).sorted() {
            let stored = contains(id)
            guard let manifest = manifest(id) else {
                if stored || storeLostRecords { damaged.insert(id) }
                continue
            }
            damaged.remove(id)
            restored.manifests.append(manifest)
            let held = heldCount(manifest)
            if held == manifest.chunks.count && missing(manifest).isEmpty {
                restored.complete.insert(id)
            } else {
                restored.held[id] = held
            }
        }
        // A record that could not be read is written over, but stays unknown for this start.
        if damaged != recorded, (try? directory.saveDamagedManifests(damaged.sorted())) != nil, recorded != nil {
            recorded = damaged
        }
        restored.damagedManifests = damaged.sorted()
        restored.damagedManifestsRecorded = recorded.map { $0.sorted() }
        return restored
    }

    // MARK: adding

    /// Chunks, hashes and stores a file without loading it whole; returns its manifest (stored too).
    /// A file written to while it is read is refused (its size, change or status time moved):
    /// what it shared would be partly old, partly new, content that was never on disk.
    /// `afterChunk` runs after each chunk read (tests change the file there).
    func ingest(
        fileAt path: String, limit: UInt64, chunkSize: Int, afterChunk: (Int) -> Void = { _ in }
    ) throws(GroupMeshError) -> Manifest {
        // Its keys among them: attached, a secret would go to every member. Through links too.
        guard !directory.ownsFile(DataDirectory.resolved(path) ?? path) else {
            throw .attachment("\(path) is one of the node's own files (its keys, members, store); it is never attached")
        }
        // Non-blocking, so that a pipe named by mistake is refused below instead of blocking the
        // store until someone writes to it.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let code = errno
            var info = stat()
            if code != ENOENT, stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
                throw .attachment("\(path) is not a regular file; only files can be attached")
            }
            throw code == ENOENT
                ? .attachment("no such file: \(path)") : .attachment("cannot read \(path): \(FileIO.describe(code))")
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw .attachment("\(path) is not a regular file; only files can be attached")
        }
        guard !directory.isOwnFile(descriptor: fd) else {
            close(fd)
            throw .attachment("\(path) is one of the node's own files (its keys, members, store); it is never attached")
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        defer { try? handle.close() }
        let size = UInt64(info.st_size)
        guard size <= limit else { throw .attachmentTooLarge(size: size, limit: limit) }
        let changed = GroupMeshError.attachment(
            "\(path) changed while it was being added; nothing was attached (attach it again once it is written)")
        return try ingesting { (added) throws(GroupMeshError) in
            var digests: [SHA256Digest] = []
            var total: UInt64 = 0
            // To the end, not to the size: a file that grows is seen, and one that gives no size
            // (of /proc) is read whole, within the limit.
            while true {
                let data: Data
                do { data = try handle.read(upToCount: chunkSize) ?? Data() } catch {
                    throw .attachment("cannot read \(path): \(error)")
                }
                guard !data.isEmpty else { break }
                total += UInt64(data.count)
                guard total <= limit else { throw size == 0 ? .attachmentTooLarge(size: total, limit: limit) : changed }
                digests.append(try insert(Array(data), into: &added))
                afterChunk(digests.count)
            }
            var after = stat()
            guard fstat(fd, &after) == 0, Self.sameFile(info, after), size == 0 || total == size else { throw changed }
            return Manifest(size: total, chunkSize: chunkSize, chunks: digests)
        }
    }

    /// Whether two looks at one open file see it unchanged: same size, and neither its contents'
    /// time nor its status time moved (a write sets both; a kernel without fine-grained
    /// timestamps may miss a write made in the same clock tick as the first look).
    static func sameFile(_ before: stat, _ after: stat) -> Bool {
        before.st_size == after.st_size && before.st_mtim.tv_sec == after.st_mtim.tv_sec
            && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec && before.st_ctim.tv_sec == after.st_ctim.tv_sec
            && before.st_ctim.tv_nsec == after.st_ctim.tv_nsec
    }

    func ingest(_ bytes: [UInt8], limit: UInt64, chunkSize: Int) throws(GroupMeshError) -> Manifest {
        guard UInt64(bytes.count) <= limit else { throw .attachmentTooLarge(size: UInt64(bytes.count), limit: limit) }
        return try ingesting { (added) throws(GroupMeshError) in
            var digests: [SHA256Digest] = []
            var offset = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + chunkSize)
                digests.append(try insert(Array(bytes[offset..<end]), into: &added))
                offset = end
            }
            return Manifest(size: UInt64(bytes.count), chunkSize: chunkSize, chunks: digests)
        }
    }

    /// Stores the chunks `chunking` cuts, then their manifest, durably. A failure (a full disk,
    /// above all) takes back every chunk this call added, so a failed attach leaves the store as
    /// it found it; the actor runs nothing else meanwhile, so nobody else can rely on them yet.
    private func ingesting(
        _ chunking: (inout [SHA256Digest]) throws(GroupMeshError) -> Manifest
    ) throws(GroupMeshError) -> Manifest {
        var added: [SHA256Digest] = []
        do throws(GroupMeshError) {
            let manifest = try chunking(&added)
            _ = try insert(manifest.encoded, into: &added)
            try flush()
            pin(manifest)
            return manifest
        } catch {
            for digest in added { try? chunks.remove(digest) }
            try? chunks.flush()
            throw error
        }
    }

    private func insert(_ bytes: [UInt8], into added: inout [SHA256Digest]) throws(GroupMeshError) -> SHA256Digest {
        let result: (inserted: Bool, digest: SHA256Digest)
        do { result = try chunks.insert(bytes) } catch { throw .store(error.description) }
        if result.inserted { added.append(result.digest) }
        return result.digest
    }

    // MARK: chunks

    func contains(_ digest: SHA256Digest) -> Bool { chunks.contains(digest) }

    func read(_ digest: SHA256Digest) -> [UInt8]? { try? chunks.read(digest) }

    /// Stores a chunk, checking it against `expected` when given.
    @discardableResult
    func write(_ bytes: [UInt8], expected: SHA256Digest? = nil) throws(GroupMeshError) -> SHA256Digest {
        do { return try chunks.write(bytes, expected: expected) } catch { throw .store(error.description) }
    }

    enum FetchedWrite: Sendable { case stored, mismatch, failed(String) }

    /// Stores a chunk that came from another member: its hash is checked here, once.
    func writeFetched(_ bytes: [UInt8], expected: SHA256Digest) -> FetchedWrite {
        do {
            _ = try chunks.write(bytes, expected: expected)
            return .stored
        } catch .hashMismatch {
            return .mismatch
        } catch {
            return .failed(error.description)
        }
    }

    func flush() throws(GroupMeshError) {
        do { try chunks.flush() } catch { throw .store(error.description) }
    }

    /// The manifest of an attachment, if stored (it is a chunk named by the attachment id).
    func manifest(_ id: SHA256Digest) -> Manifest? {
        guard let bytes = read(id), let manifest = try? Manifest(decoding: bytes), manifest.id == id else { return nil }
        return manifest
    }

    func heldCount(_ manifest: Manifest) -> Int {
        manifest.chunks.reduce(0) { $0 + (chunks.contains($1) ? 1 : 0) }
    }

    func missing(_ manifest: Manifest) -> [SHA256Digest] {
        var seen: Set<SHA256Digest> = []
        return manifest.chunks.filter { !chunks.contains($0) && seen.insert($0).inserted }
    }

    /// Writes the attachment's bytes to `path` (through a temporary file, renamed when complete),
    /// verifying every chunk on the way, except those this process hashed as it stored them
    /// moments ago (a `get` of what was just fetched: a second pass would only hash them again).
    /// Only a regular file is replaced: a link, a device or a pipe there (checked again here, the
    /// request may have waited for a fetch) is refused. The temporary file is made new (never
    /// through a link someone left in its place).
    /// A `get` prepared while its fetch ran (`ExportsInProgress`) has most of the file written
    /// already: only what is missing is written before the sync and rename.
    func assemble(_ manifest: Manifest, to path: String, mode: UInt32?, replace: Bool = true) throws(GroupMeshError) {
        let prepared = exportsInProgress.take(path, of: manifest)
        do {
            try OutputPath.check(path)
        } catch {
            // What is there now (a link, a directory) is refused; what was written for it goes.
            prepared?.file.discard()
            throw error
        }
        if cancelledExports.take(path) {
            prepared?.file.discard()
            throw .cancelled
        }
        var export: ExportsInProgress.Export
        if let prepared {
            export = prepared
        } else {
            export = .init(manifest, into: try OutputFile.create(for: path, mode: mode))
        }
        for digest in export.missing.keys.sorted() where !export.file.hasFailed {
            guard let bytes = try? chunks.read(digest, trustingRecentWrites: true) else {
                export.file.discard()
                throw .store("chunk \(digest) is missing from the store (damaged?); nothing was written")
            }
            ExportsInProgress.write(bytes, of: digest, into: &export)
        }
        let failure = export.file.drain()
        guard failure == 0 else {
            export.file.discard()
            throw GroupMeshError.fileWrite(failure, path, doing: "write")
        }
        // The last moment a given-up load can still leave nothing behind.
        if cancelledExports.take(path) {
            export.file.discard()
            throw .cancelled
        }
        try export.file.commit(replace: replace)
    }

    /// Waits until the outputs of `get`s under way hold every chunk handed to them so far.
    func settleExports() { exportsInProgress.drainAll() }

    func bytes(of manifest: Manifest) throws(GroupMeshError) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Int(manifest.size))
        for digest in manifest.chunks {
            guard let bytes = read(digest) else { throw .attachment("chunk \(digest) is missing") }
            out += bytes
        }
        return out
    }

    /// Deletes the chunks of `removed` that none of `kept` uses, and its manifest. Chunks of an
    /// attach still waiting for its journal append are not the node's to judge yet: kept too.
    func collect(_ removed: Manifest, keeping kept: [Manifest]) {
        let used = Set(kept.flatMap(\.chunks) + kept.map(\.id))
        for digest in Set(removed.chunks + [removed.id]) where !used.contains(digest) && pinned[digest] == nil {
            try? chunks.remove(digest)
        }
        // The removals made durable, then their space freed.
        try? chunks.flush()
    }

    /// Deletes every stored chunk and manifest that none of `kept` uses and no ingest holds
    /// (start-up: what a crash left behind). How many, and their bytes.
    func collectUnreferenced(keeping kept: [Manifest]) -> (chunks: Int, bytes: UInt64) {
        let used = Set(kept.flatMap(\.chunks) + kept.map(\.id))
        var count = 0, bytes: UInt64 = 0
        for digest in chunks.storedDigests() where !used.contains(digest) && pinned[digest] == nil {
            let size = chunks.storedSize(digest) ?? 0
            guard (try? chunks.remove(digest)) != nil else { continue }
            count += 1
            bytes += size
        }
        try? chunks.flush()
        return (count, bytes)
    }

    /// Ingested attachments between their ingest and the end of their journal append, by digest:
    /// how many hold each chunk (two attaches can share chunks).
    private var pinned: [SHA256Digest: Int] = [:]

    private func pin(_ manifest: Manifest) {
        for digest in manifest.chunks + [manifest.id] { pinned[digest, default: 0] += 1 }
    }

    /// Ends an ingest's hold on its chunks; when its attach failed, collects them too (in the
    /// same step, so no other attach's hold can lapse in between).
    func unpin(_ manifest: Manifest, collectKeeping kept: [Manifest]? = nil) {
        for digest in manifest.chunks + [manifest.id] {
            if let count = pinned[digest], count > 1 { pinned[digest] = count - 1 } else { pinned[digest] = nil }
        }
        if let kept { collect(manifest, keeping: kept) }
    }

    // MARK: the journal's operations

    func appendOperations(_ operations: [JournalOperation]) throws(GroupMeshError) {
        guard !operations.isEmpty else { return }
        var record: [UInt8] = []
        for operation in operations {
            let bytes = JournalMessage.operations([operation]).encoded
            withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { record += $0 }
            record += bytes
        }
        let fd = open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw GroupMeshError.fileWrite(errno, logPath, doing: "open") }
        defer { close(fd) }
        // An earlier append failed part-way and could not be cut back then: cut it now, or write
        // nothing (a record behind a torn one is never read).
        if let tornAt {
            guard ftruncate(fd, tornAt) == 0 else { throw GroupMeshError.fileWrite(errno, logPath, doing: "repair") }
            self.tornAt = nil
        }
        let end = lseek(fd, 0, SEEK_END)
        guard end >= 0 else { throw GroupMeshError.fileWrite(errno, logPath, doing: "append to") }
        var failure = record.withUnsafeBytes { FileIO.writeAll(fd, $0) }
        if failure == 0, fsync(fd) != 0 { failure = errno }
        guard failure != 0 else { return }  // durable: a failing close changes nothing
        if ftruncate(fd, end) != 0 { tornAt = end }
        throw GroupMeshError.fileWrite(failure, logPath, doing: "append to")
    }

    /// Where the log must be cut back to before the next append, when cutting failed.
    private var tornAt: off_t?

    /// Every operation in the log, and whether the log was read whole: it could be read (or is
    /// not there yet), and every record decoded (a torn last record, cut off, still counts as whole: it
    /// was never acknowledged). A torn last record (a crash mid-append) is cut off the file,
    /// so that the next append does not land behind it, where a reader would never find it.
    func loadOperations() -> (operations: [JournalOperation], whole: Bool) {
        guard let data = FileManager.default.contents(atPath: logPath) else {
            // No log yet is an empty journal (a first attach cut short by a crash leaves one);
            // one that is there and cannot be read is not.
            return ([], access(logPath, F_OK) != 0 && errno == ENOENT)
        }
        var whole = true
        let bytes = [UInt8](data)
        var operations: [JournalOperation] = []
        var offset = 0
        while offset + 4 <= bytes.count {
            let length = Int(bytes[offset..<offset + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
            offset += 4
            guard offset + length <= bytes.count else {
                offset -= 4
                break
            }
            if case let .operations(decoded)? = try? JournalMessage(decoding: Array(bytes[offset..<offset + length])) {
                operations += decoded
            } else {
                whole = false
            }
            offset += length
        }
        if offset < bytes.count, let handle = FileHandle(forWritingAtPath: logPath) {
            try? handle.truncate(atOffset: UInt64(offset))
            try? handle.synchronize()
            try? handle.close()
        }
        return (operations, whole)
    }
}

/// Output paths of loads given up (`MeshNode.performCancellable`): set on the node's executor,
/// taken by the store before it renames a finished export into place.
final class ExportCancellations: @unchecked Sendable {
    private let lock = NSLock()
    private var paths: Set<String> = []

    func insert(_ path: String) { _ = lock.withLock { paths.insert(path) } }

    /// A new load of `path` starts: an older cancel does not apply to it.
    func clear(_ path: String) { _ = lock.withLock { paths.remove(path) } }

    /// Whether `path`'s load was given up (and forgets it).
    func take(_ path: String) -> Bool { lock.withLock { paths.remove(path) != nil } }
}
