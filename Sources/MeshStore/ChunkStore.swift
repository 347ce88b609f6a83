#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import CMeshSystem
import MeshCore
import MeshCrypto
import NIOCore

/// Chunks on disk, named by their SHA-256, so identical chunks are stored once. A chunk is
/// appended to a pack file (`chunks/0000000000000001.pack`, see `PackFormat`) instead of a file
/// of its own: making a file per chunk is what a large fetch waited on (Docs/DESIGN-NOTES.md),
/// more so right after many files were removed, as a removed attachment's are. Durability is batched:
/// `flush()` (or the batch limit) syncs the pack being written once and records how far it is
/// durable; what was written after that is hashed when the store opens again, so after any
/// crash every chunk the store lists holds its bytes. A removed chunk is marked dead, and its
/// blocks are freed (a hole punched, where the file system can) once that mark is synced; a
/// pack with no live chunk left is deleted, the one being written too. Every chunk is verified
/// when written and when read; one that does not verify is discarded and reported. Chunks of
/// the earlier format (`chunks-v1`, one file each under `chunks/ab/`) are still read and
/// removed, never written.
package final class ChunkStore {
    package static let formatVersion = "chunks-v2"
    /// One file per chunk: read and upgraded in place (new chunks go to packs).
    static let looseFormatVersion = "chunks-v1"

    package let path: String
    /// How many written chunks may wait for the next sync.
    package var batchLimit = 64
    /// A pack takes new chunks until it holds this many bytes; the next chunk starts another.
    package var packLimit: Int64 = 128 << 20
    /// How many packs are kept open at once (one descriptor each).
    static let openPackLimit = 16

    enum Location {
        case packed(pack: UInt64, offset: Int64, length: Int)
        case loose
    }

    private struct Pack {
        var size: Int64
        /// Synced up to here: what lies past it is hashed when the store opens.
        var durable: Int64
        var live: Int
        /// False for a pack found damaged where it was durable, or whose sync failed when the
        /// store opened: read, never written to again.
        var appendable = true
        /// Found damaged where it was durable: kept even with nothing readable left in it (what
        /// follows the damage may be whole, and is not ours to throw away unread); reported at
        /// every open until someone removes it.
        var damaged = false
        /// Nothing live in it, and nothing unread that may be: the file goes.
        var isDisposable: Bool { live == 0 && !damaged }
    }

    private var index: [SHA256Digest: Location] = [:]
    private var packs: [UInt64: Pack] = [:]
    private var descriptors: [UInt64: Int32] = [:]
    /// The pack new chunks go to; made when the first one comes.
    private var active: UInt64?
    private var nextPack: UInt64 = 1
    /// The pack `loadPack` is reading (its descriptor is kept open meanwhile).
    private var loading: UInt64?
    /// Chunks appended to the active pack since its last sync.
    private var unsynced = 0
    /// Ranges of removed chunks, by pack, whose blocks are freed once their dead marks are
    /// synced: punched first, a power loss could leave a live header over zeros.
    private var unpunched: [UInt64: [(offset: Int64, length: Int)]] = [:]
    /// What opening the store found damaged and left as it was, one line each (for the node to
    /// log): a pack whose header this version cannot read, or one damaged where it was durable.
    /// Chunks lost that way are missing, and fetched again like any other.
    package private(set) var damage: [String] = []
    /// `fdatasync`; a test makes it fail (a device error) to see what the store then believes.
    var syncData: (Int32) -> Int32 = { fdatasync($0) }
    /// Chunks this process hashed as it wrote them, the latest `recentWriteCapacity`: a `get`
    /// writing out what it just fetched need not hash each chunk a second time. A chunk that was
    /// on disk before is always hashed when read.
    private var recentWrites = RecentSet<SHA256Digest>(capacity: 4096)
    /// How many recent writes are remembered (4,096 chunks: 1 GiB at 256 KiB).
    package var recentWriteCapacity: Int {
        get { recentWrites.capacity }
        set { recentWrites = RecentSet(capacity: newValue) }
    }

    package init(path: String) throws(MeshStoreError) {
        self.path = path
        try Self.makeDirectory(path)
        let versionPath = path + "/format-version"
        let found = try Self.readSmallFile(versionPath)
        if let found, found != Self.formatVersion, found != Self.looseFormatVersion {
            throw .formatVersion(path: path, found: found)
        }
        recoverLeftovers()
        loadLooseChunks()
        try loadPacks()
        if found == nil {
            try writeFormatVersion()
        } else if found == Self.looseFormatVersion {
            // Not written (a full disk): still read as it is, and upgraded at the next start.
            try? writeFormatVersion()
        }
    }

    /// Written whole and renamed, so that a crash leaves the old version or the new, never an
    /// empty file that would keep the node from starting.
    private func writeFormatVersion() throws(MeshStoreError) {
        let versionPath = path + "/format-version", temporary = versionPath + ".new"
        try Self.writeFile(temporary, Array((Self.formatVersion + "\n").utf8), sync: true)
        guard rename(temporary, versionPath) == 0 else {
            let reason = Self.errnoText()
            unlink(temporary)
            throw .io(path: versionPath, reason: reason)
        }
        _ = Self.syncDirectory(path)
    }

    deinit {
        for fd in descriptors.values { close(fd) }
    }

    // MARK: reading

    package func contains(_ digest: SHA256Digest) -> Bool {
        index[digest] != nil
    }

    /// The chunk's bytes, verified (unless `trustingRecentWrites` and this process wrote it
    /// lately, hashing it then). A chunk that fails verification is deleted and reported.
    package func read(_ digest: SHA256Digest, trustingRecentWrites: Bool = false) throws(MeshStoreError) -> [UInt8] {
        try verifiedRead(
            digest, trustingRecentWrites: trustingRecentWrites,
            loose: { path throws(MeshStoreError) in
                try Self.readFile(path)
            }, packed: { FileIO.readAll($0, count: $1, at: $2) }, hash: { SHA256Digest.hashing($0) })
    }

    /// `read` into a buffer of its own, for serving: the pieces sent are views of it.
    package func readBuffer(
        _ digest: SHA256Digest, trustingRecentWrites: Bool = false, allocator: ByteBufferAllocator = .init()
    ) throws(MeshStoreError) -> ByteBuffer {
        try verifiedRead(
            digest, trustingRecentWrites: trustingRecentWrites,
            loose: { path throws(MeshStoreError) in
                try Self.readFile(path, allocator: allocator)
            }, packed: { FileIO.readAll($0, count: $1, at: $2, allocator: allocator) },
            hash: { $0.withUnsafeReadableBytes { SHA256Digest.hashing($0) } })
    }

    /// Where a chunk is, read by `loose` (its file) or `packed` (descriptor, length, offset), and
    /// checked against its name by `hash` unless this process wrote it lately.
    private func verifiedRead<Bytes>(
        _ digest: SHA256Digest, trustingRecentWrites: Bool,
        loose: (String) throws(MeshStoreError) -> Bytes?, packed: (Int32, Int, Int64) -> Bytes?,
        hash: (Bytes) -> SHA256Digest
    ) throws(MeshStoreError) -> Bytes {
        guard let location = index[digest] else { throw .notFound(digest) }
        let bytes: Bytes
        switch location {
        case .loose:
            guard let found = try loose(finalPath(digest)) else {
                index[digest] = nil
                throw .notFound(digest)
            }
            bytes = found
        case let .packed(pack, offset, length):
            let fd = try descriptor(pack)
            guard let found = packed(fd, length, offset + Int64(PackFormat.recordHeaderSize)) else {
                try? remove(digest)
                throw .corrupt(digest)
            }
            bytes = found
        }
        if trustingRecentWrites, recentWrites.contains(digest) { return bytes }
        guard hash(bytes) == digest else {
            try? remove(digest)
            throw .corrupt(digest)
        }
        return bytes
    }

    /// The size of a stored chunk, if it is there.
    package func storedSize(_ digest: SHA256Digest) -> UInt64? {
        switch index[digest] {
        case nil: return nil
        case let .packed(_, _, length): return UInt64(length)
        case .loose:
            var info = stat()
            return stat(finalPath(digest), &info) == 0 ? UInt64(info.st_size) : nil
        }
    }

    /// Every stored digest, in order.
    package func storedDigests() -> [SHA256Digest] {
        index.keys.sorted()
    }

    /// Reads and hashes every stored chunk; discards and returns those that do not verify.
    @discardableResult
    package func verifyAll() -> [SHA256Digest] {
        var discarded: [SHA256Digest] = []
        for digest in storedDigests() {
            do { _ = try read(digest) } catch { discarded.append(digest) }
        }
        return discarded
    }

    // MARK: writing

    /// Stores `bytes`, checking them against `expected` when given. Returns the digest. Storing
    /// a chunk that is already there writes nothing.
    @discardableResult
    package func write(_ bytes: [UInt8], expected: SHA256Digest? = nil) throws(MeshStoreError) -> SHA256Digest {
        try insert(bytes, expected: expected).digest
    }

    /// `write`, also saying whether the chunk is new to the store (a caller can take back
    /// exactly what it added).
    package func insert(
        _ bytes: [UInt8], expected: SHA256Digest? = nil
    ) throws(MeshStoreError)
        -> (inserted: Bool, digest: SHA256Digest)
    {
        let digest = SHA256Digest.hashing(bytes)
        if let expected, expected != digest { throw .hashMismatch(expected: expected, actual: digest) }
        if contains(digest) { return (false, digest) }
        guard bytes.count <= PackFormat.maximumLength else {
            throw .chunkTooLarge(size: bytes.count, limit: PackFormat.maximumLength)
        }
        let record = Int64(PackFormat.recordHeaderSize + bytes.count)
        let id = try packWithRoom(for: record)
        let fd = try descriptor(id)
        guard let offset = packs[id]?.size else { throw .io(path: packPath(id), reason: "pack not open") }
        // The bytes first, then the header that makes them a record: a reader (or a crash)
        // between the two finds no record there, never a record with half its bytes.
        let header = PackFormat.recordHeader(.init(state: .live, length: bytes.count, digest: digest))
        var failure = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset + Int64(PackFormat.recordHeaderSize)) }
        if failure == 0 { failure = header.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset) } }
        if failure != 0 {
            _ = ftruncate(fd, off_t(offset))
            let file = packPath(id)
            throw FileIO.isOutOfSpace(failure)
                ? .diskFull(path: file) : .io(path: file, reason: FileIO.describe(failure))
        }
        packs[id]?.size = offset + record
        packs[id]?.live += 1
        index[digest] = .packed(pack: id, offset: offset, length: bytes.count)
        unsynced += 1
        recentWrites.insert(digest)
        if unsynced >= batchLimit {
            do throws(MeshStoreError) {
                try flush()
            } catch {
                // Not stored after all: the caller is told of a failure, not of a new chunk.
                try? remove(digest)
                throw error
            }
        }
        return (true, digest)
    }

    /// Makes every written chunk durable: one sync of the pack being written, then its header
    /// says how far it is durable (that write rides on the next sync; lost, the store only hashes
    /// more when it opens). Removals since the last flush are synced too, then their blocks freed.
    package func flush() throws(MeshStoreError) {
        var synced: UInt64?
        if unsynced > 0, let id = active, let size = packs[id]?.size {
            let fd = try descriptor(id)
            guard syncData(fd) == 0 else {
                let code = errno
                abandonUnsynced(id)
                throw FileIO.isOutOfSpace(code)
                    ? .diskFull(path: packPath(id)) : .io(path: packPath(id), reason: FileIO.describe(code))
            }
            unsynced = 0
            synced = id
            packs[id]?.durable = size
            Self.writeDurable(fd, size)
        }
        for (id, ranges) in unpunched {
            // The space back where the file system can free a range (ext4, XFS, Btrfs, tmpfs);
            // elsewhere when the whole pack is dead. A pack that cannot be synced now keeps its
            // ranges for the next flush.
            guard let fd = try? descriptor(id), id == synced || syncData(fd) == 0 else { continue }
            for range in ranges {
                _ = cmesh_punch_hole(fd, range.offset + Int64(PackFormat.recordHeaderSize), Int64(range.length))
            }
            unpunched[id] = nil
        }
    }

    /// After a failed sync, the chunks written since the last good one are not believed: Linux
    /// marks the pages that failed to reach the disk clean, so a later sync would say they did.
    /// They are dropped (fetched again), and new chunks go to a new pack.
    private func abandonUnsynced(_ id: UInt64) {
        guard let durable = packs[id]?.durable, let fd = descriptors[id] else { return }
        for (digest, location) in index {
            guard case let .packed(pack, offset, _) = location, pack == id, offset >= durable else { continue }
            _ = PackFormat.deadMark.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset) }
            index[digest] = nil
            recentWrites.remove(digest)
            packs[id]?.live -= 1
        }
        active = nil
        unsynced = 0
        if packs[id]?.live == 0 { deletePack(id) }
    }

    package func remove(_ digest: SHA256Digest) throws(MeshStoreError) {
        // A chunk written again later is hashed again on its way in; until then it is not ours.
        recentWrites.remove(digest)
        guard let location = index[digest] else { return }
        switch location {
        case .loose:
            let final = finalPath(digest)
            if unlink(final) != 0 && errno != ENOENT { throw .io(path: final, reason: Self.errnoText()) }
        case let .packed(id, offset, length):
            let fd = try descriptor(id)
            let failure = PackFormat.deadMark.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset) }
            guard failure == 0 else { throw .io(path: packPath(id), reason: FileIO.describe(failure)) }
            unpunched[id, default: []].append((offset, length))
            packs[id]?.live -= 1
            if packs[id]?.isDisposable == true { deletePack(id) }
        }
        index[digest] = nil
    }

    // MARK: packs

    func packPath(_ id: UInt64) -> String { path + "/" + PackFormat.fileName(id) }

    /// Where a stored chunk's bytes are (file and offset), for tests that damage them.
    func bytesLocation(_ digest: SHA256Digest) -> (file: String, offset: Int64, length: Int)? {
        switch index[digest] {
        case nil: return nil
        case .loose: return (finalPath(digest), 0, Int(storedSize(digest) ?? 0))
        case let .packed(id, offset, length): return (packPath(id), offset + Int64(PackFormat.recordHeaderSize), length)
        }
    }

    /// The active pack if `record` bytes fit in it (an empty pack takes any chunk), else a new one.
    private func packWithRoom(for record: Int64) throws(MeshStoreError) -> UInt64 {
        if let id = active, let pack = packs[id],
            pack.size + record <= packLimit || pack.size == Int64(PackFormat.headerSize)
        {
            return id
        }
        try flush()
        return try makePack()
    }

    private func makePack() throws(MeshStoreError) -> UInt64 {
        let id = nextPack
        let file = packPath(id)
        let fd = open(file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw FileIO.isOutOfSpace(errno) ? .diskFull(path: file) : .io(path: file, reason: Self.errnoText())
        }
        let failure = PackFormat.header(durable: Int64(PackFormat.headerSize)).withUnsafeBytes {
            FileIO.writeAll(fd, $0, at: 0)
        }
        guard failure == 0, Self.syncDirectory(path) else {
            let reason = failure != 0 ? FileIO.describe(failure) : Self.errnoText()
            close(fd)
            unlink(file)
            throw FileIO.isOutOfSpace(failure) ? .diskFull(path: file) : .io(path: file, reason: reason)
        }
        nextPack += 1
        packs[id] = Pack(size: Int64(PackFormat.headerSize), durable: Int64(PackFormat.headerSize), live: 0)
        keepOpen(id, fd)
        active = id
        return id
    }

    private func descriptor(_ id: UInt64) throws(MeshStoreError) -> Int32 {
        if let fd = descriptors[id] { return fd }
        let file = packPath(id)
        let fd = open(file, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw .io(path: file, reason: Self.errnoText()) }
        keepOpen(id, fd)
        return fd
    }

    private func keepOpen(_ id: UInt64, _ fd: Int32) {
        // Never the pack being written or being loaded: their descriptors are held across calls.
        if descriptors.count >= Self.openPackLimit,
            let idle = descriptors.keys.first(where: { $0 != active && $0 != loading && $0 != id })
        {
            close(descriptors.removeValue(forKey: idle) ?? -1)
        }
        descriptors[id] = fd
    }

    private func deletePack(_ id: UInt64) {
        if let fd = descriptors.removeValue(forKey: id) { close(fd) }
        unlink(packPath(id))
        // Made durable now: a pack back after a power loss would hold chunks nobody wants.
        _ = Self.syncDirectory(path)
        packs[id] = nil
        unpunched[id] = nil
        if active == id {
            active = nil
            unsynced = 0
        }
    }

    /// Indexes every pack, cutting each at its first torn record; the last one, if it has room,
    /// takes the new chunks.
    private func loadPacks() throws(MeshStoreError) {
        let ids = Self.listDirectory(path).compactMap(PackFormat.id(ofFileName:)).sorted()
        nextPack = (ids.last ?? 0) + 1
        for id in ids { try loadPack(id) }
        // Packs emptied by a copy found again in a later one.
        for (id, pack) in packs where pack.isDisposable { deletePack(id) }
        if let last = ids.last, let pack = packs[last], pack.appendable, pack.size < packLimit { active = last }
    }

    private func loadPack(_ id: UInt64) throws(MeshStoreError) {
        let file = packPath(id)
        let fd = open(file, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw .io(path: file, reason: Self.errnoText()) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            throw .io(path: file, reason: Self.errnoText())
        }
        let headerSize = Int64(PackFormat.headerSize)
        guard let header = FileIO.readAll(fd, count: PackFormat.headerSize, at: 0),
            let durable = PackFormat.durable(inHeader: header)
        else {
            close(fd)
            // Made, then the process died before its header: it never held a chunk.
            if info.st_size < headerSize {
                unlink(file)
            } else {
                // Anything else is not ours to write to or to delete: left alone, and unread.
                damage.append("\(file): not a pack this version reads (its header is damaged or newer); left unread")
            }
            return
        }
        let size = Int64(info.st_size)
        let scan = Self.scan(fd, size: size, durable: durable, verifyingPastDurable: true)
        packs[id] = Pack(size: size, durable: durable, live: 0)
        loading = id
        defer { loading = nil }
        keepOpen(id, fd)
        for (digest, offset, length) in scan.records {
            if case let .packed(other, otherOffset, _) = index[digest] {
                // Stored twice (removed, then stored again; or two packs written when a crash
                // came): the copy that verifies is kept, the earlier one if both do.
                guard !verifies(digest, inPack: other, at: otherOffset, length: length),
                    verifies(digest, inPack: id, at: offset, length: length)
                else {
                    _ = PackFormat.deadMark.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset) }
                    unpunched[id, default: []].append((offset, length))
                    continue
                }
                if let otherFD = try? descriptor(other) {
                    _ = PackFormat.deadMark.withUnsafeBytes { FileIO.writeAll(otherFD, $0, at: otherOffset) }
                    unpunched[other, default: []].append((otherOffset, length))
                }
                packs[other]?.live -= 1
            }
            index[digest] = .packed(pack: id, offset: offset, length: length)
            packs[id]?.live += 1
        }
        if scan.end >= durable {
            // A torn tail past the last sync: cut off, and what was kept past the mark (it
            // verified) made durable now, not hashed at every start.
            if scan.end < size { _ = ftruncate(fd, off_t(scan.end)) }
            packs[id]?.size = scan.end
            if scan.end > durable {
                if syncData(fd) == 0 {
                    Self.writeDurable(fd, scan.end)
                    packs[id]?.durable = scan.end
                } else {
                    // Not believed durable (see `abandonUnsynced`): hashed again at the next
                    // start, and never written to, so that no later sync vouches for it.
                    packs[id]?.appendable = false
                }
            }
        } else {
            // Damage where the pack was durable (a bad block): what could be read is kept, the
            // rest is left as it is, and nothing is written to this pack again.
            packs[id]?.appendable = false
            packs[id]?.damaged = true
            damage.append(
                "\(file): damaged at byte \(scan.end) of \(durable) synced; the chunks after it are left unread")
        }
        if packs[id]?.isDisposable == true { deletePack(id) }
    }

    private func verifies(_ digest: SHA256Digest, inPack id: UInt64, at offset: Int64, length: Int) -> Bool {
        guard let fd = try? descriptor(id),
            let bytes = FileIO.readAll(fd, count: length, at: offset + Int64(PackFormat.recordHeaderSize))
        else { return false }
        return SHA256Digest.hashing(bytes) == digest
    }

    /// The live records of a pack up to its first torn one (a header that does not decode or a
    /// length past the end), and where that is. With `verifyingPastDurable`, a record written
    /// after the last sync whose bytes do not hash to its name is marked dead (the only write a
    /// scan makes).
    static func scan(
        _ fd: Int32, size: Int64, durable: Int64, verifyingPastDurable: Bool
    )
        -> (records: [(SHA256Digest, Int64, Int)], end: Int64)
    {
        var records: [(SHA256Digest, Int64, Int)] = []
        var offset = Int64(PackFormat.headerSize)
        let headerSize = Int64(PackFormat.recordHeaderSize)
        while size - offset >= headerSize {
            guard let bytes = FileIO.readAll(fd, count: PackFormat.recordHeaderSize, at: offset),
                let header = PackFormat.recordHeader(decoding: bytes),
                Int64(header.length) <= size - offset - headerSize
            else { break }
            let end = offset + headerSize + Int64(header.length)
            if header.state == .live {
                if verifyingPastDurable && end > durable,
                    FileIO.readAll(fd, count: header.length, at: offset + headerSize).map({ SHA256Digest.hashing($0) })
                        != header.digest
                {
                    // Its bytes did not all reach the disk: dead, and the records after it are judged on their own.
                    _ = PackFormat.deadMark.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset) }
                } else {
                    records.append((header.digest, offset, header.length))
                }
            }
            offset = end
        }
        return (records, offset)
    }

    private static func writeDurable(_ fd: Int32, _ size: Int64) {
        _ = PackFormat.durableBytes(size).withUnsafeBytes { FileIO.writeAll(fd, $0, at: PackFormat.durableOffset) }
    }

    private static func syncDirectory(_ directory: String) -> Bool {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return fsync(fd) == 0
    }

    // MARK: a look from outside

    /// A stored chunk as `survey` finds it: where its bytes are.
    package struct StoredChunk: Sendable {
        package let file: String
        package let offset: Int64
        package let length: Int
        /// Where its record's state is, in a pack.
        let stateOffset: Int64?

        /// Its bytes as they are on disk, unverified; nil if they are gone (removed since the
        /// survey: its record reads dead after its bytes were read).
        package func bytes() -> [UInt8]? {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            guard let bytes = FileIO.readAll(fd, count: length, at: offset) else { return nil }
            if let stateOffset, FileIO.readAll(fd, count: 4, at: stateOffset) != PackFormat.liveMark { return nil }
            return bytes
        }
    }

    /// What the store at `path` holds, found without changing anything: for tests and tools that
    /// look at the store of a node that has it open. A record still being written is not listed.
    package static func survey(_ path: String) -> [SHA256Digest: StoredChunk] {
        var found: [SHA256Digest: StoredChunk] = [:]
        for digest in looseDigests(path) {
            let file = loosePath(path, digest)
            var info = stat()
            guard stat(file, &info) == 0 else { continue }
            found[digest] = StoredChunk(file: file, offset: 0, length: Int(info.st_size), stateOffset: nil)
        }
        for name in listDirectory(path) where PackFormat.id(ofFileName: name) != nil {
            let file = path + "/" + name
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0, let header = FileIO.readAll(fd, count: PackFormat.headerSize, at: 0),
                let durable = PackFormat.durable(inHeader: header)
            else { continue }
            let scan = scan(fd, size: Int64(info.st_size), durable: durable, verifyingPastDurable: false)
            for (digest, offset, length) in scan.records where found[digest] == nil {
                found[digest] = StoredChunk(
                    file: file, offset: offset + Int64(PackFormat.recordHeaderSize), length: length,
                    stateOffset: offset)
            }
        }
        return found
    }

    // MARK: chunks of the earlier format

    /// Chunk files of `chunks-v1` (`ab/abcd…`), indexed to be read and removed.
    private func loadLooseChunks() {
        for digest in Self.looseDigests(path) { index[digest] = .loose }
    }

    private static func looseDigests(_ path: String) -> [SHA256Digest] {
        var digests: [SHA256Digest] = []
        for prefix in listDirectory(path) where prefix.utf8.count == 2 {
            for name in listDirectory(path + "/" + prefix) {
                if let digest = SHA256Digest(hex: name), name.hasPrefix(prefix) { digests.append(digest) }
            }
        }
        return digests
    }

    private static func loosePath(_ path: String, _ digest: SHA256Digest) -> String {
        let hex = digest.hex
        return "\(path)/\(hex.prefix(2))/\(hex)"
    }

    // MARK: files

    func finalPath(_ digest: SHA256Digest) -> String { Self.loosePath(path, digest) }

    /// Temporary files of `chunks-v1` writes that a crash interrupted: one whose bytes still hash to the
    /// digest in its name is complete (a killed process's writes survive in the page cache) and
    /// is moved into place; any other is removed.
    private func recoverLeftovers() {
        var recovered = false
        for name in Self.listDirectory(path) where name.hasSuffix(".tmp") {
            let file = path + "/" + name
            if let digest = SHA256Digest(hex: name.prefix(64)),
                let bytes = try? Self.readFile(file), SHA256Digest.hashing(bytes) == digest,
                (try? Self.makeDirectory(NSStringPath(value: finalPath(digest)).directory)) != nil,
                rename(file, finalPath(digest)) == 0
            {
                recovered = true
            } else {
                unlink(file)
            }
        }
        if recovered { try? syncFileSystem() }
    }

    private func syncFileSystem() throws(MeshStoreError) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .io(path: path, reason: Self.errnoText()) }
        defer { close(fd) }
        guard cmesh_syncfs(fd) == 0 else { throw .io(path: path, reason: Self.errnoText()) }
    }

    static func makeDirectory(_ directory: String) throws(MeshStoreError) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw FileIO.isOutOfSpace(errno) ? .diskFull(path: directory) : .io(path: directory, reason: errnoText())
        }
    }

    static func writeFile(_ file: String, _ bytes: [UInt8], sync: Bool) throws(MeshStoreError) {
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw FileIO.isOutOfSpace(errno) ? .diskFull(path: file) : .io(path: file, reason: errnoText())
        }
        let failure = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) }
        if failure != 0 {
            close(fd)
            unlink(file)
            throw FileIO.isOutOfSpace(failure)
                ? .diskFull(path: file) : .io(path: file, reason: FileIO.describe(failure))
        }
        if sync && fsync(fd) != 0 {
            let reason = errnoText()
            close(fd)
            unlink(file)
            throw .io(path: file, reason: reason)
        }
        // close can report a delayed write error (NFS, quota): treat it like a failed write.
        guard close(fd) == 0 else {
            let full = FileIO.isOutOfSpace(errno)
            let reason = errnoText()
            unlink(file)
            throw full ? .diskFull(path: file) : .io(path: file, reason: reason)
        }
    }

    /// A whole file's bytes (nil when there is no such file). A file that shrank under us gives
    /// what was read.
    static func readFile(_ file: String) throws(MeshStoreError) -> [UInt8]? {
        try withOpenFile(file) { fd, size in
            [UInt8](unsafeUninitializedCapacity: size) { space, initialized in
                initialized = FileIO.read(fd, into: UnsafeMutableRawBufferPointer(space), at: 0)
            }
        }
    }

    /// `readFile` into a buffer of its own.
    static func readFile(_ file: String, allocator: ByteBufferAllocator) throws(MeshStoreError) -> ByteBuffer? {
        try withOpenFile(file) { fd, size in
            var buffer = allocator.buffer(capacity: size)
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { space in
                FileIO.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: space[..<size]), at: 0)
            }
            return buffer
        }
    }

    /// Opens `file` for reading and hands `body` its descriptor and size; nil when there is no
    /// such file.
    private static func withOpenFile<Bytes>(
        _ file: String, _ body: (Int32, Int) -> Bytes
    ) throws(MeshStoreError) -> Bytes? {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw .io(path: file, reason: errnoText())
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .io(path: file, reason: errnoText()) }
        return body(fd, Int(info.st_size))
    }

    static func readSmallFile(_ file: String) throws(MeshStoreError) -> String? {
        guard let bytes = try readFile(file) else { return nil }
        return String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
    }

    static func listDirectory(_ directory: String) -> [String] {
        guard let handle = opendir(directory) else { return [] }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    static func errnoText() -> String { FileIO.describe(errno) }
}

/// `dirname` without Foundation.
private struct NSStringPath {
    let value: String
    var directory: String {
        guard let slash = value.lastIndex(of: "/") else { return "." }
        return String(value[..<slash])
    }
}
