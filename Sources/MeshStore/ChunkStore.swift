#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CMeshSystem
import MeshCore
import MeshCrypto

/// Chunks on disk, one file per chunk named by its SHA-256 (`chunks/ab/abcd…`), so identical
/// chunks are stored once. A chunk is written to a temporary file and renamed into place only
/// after its bytes are durable, so after any crash every file under a valid name holds its bytes;
/// leftovers of interrupted writes are removed on open. Durability is batched: written chunks
/// wait in `pending` until `flush()` (or the batch limit) syncs them all with one `syncfs` and
/// renames them, so fsync does not cap throughput. Every chunk is verified when written and
/// when read; one that does not verify is discarded and reported.
public final class ChunkStore {
    public static let formatVersion = "chunks-v1"

    public let path: String
    /// How many written chunks may wait for the next sync.
    public var batchLimit = 64
    private var pending: [SHA256Digest: String] = [:]
    private var pendingOrder: [SHA256Digest] = []
    /// Chunks this process hashed as it wrote them, the latest `recentWriteCapacity`: a `get`
    /// writing out what it just fetched need not hash each chunk a second time. A chunk that was
    /// on disk before is always hashed when read.
    private var recentWrites = RecentSet<SHA256Digest>(capacity: 4096)
    /// How many recent writes are remembered (4,096 chunks: 1 GiB at 256 KiB).
    public var recentWriteCapacity: Int {
        get { recentWrites.capacity }
        set { recentWrites = RecentSet(capacity: newValue) }
    }
    private var temporaryCounter: UInt64 = 0

    public init(path: String) throws(MeshStoreError) {
        self.path = path
        try Self.makeDirectory(path)
        let versionPath = path + "/format-version"
        if let found = try Self.readSmallFile(versionPath) {
            guard found == Self.formatVersion else { throw .formatVersion(path: path, found: found) }
        } else {
            try Self.writeFile(versionPath, Array((Self.formatVersion + "\n").utf8), sync: true)
        }
        recoverLeftovers()
    }

    // MARK: reading

    public func contains(_ digest: SHA256Digest) -> Bool {
        pending[digest] != nil || access(finalPath(digest), F_OK) == 0
    }

    /// The chunk's bytes, verified (unless `trustingRecentWrites` and this process wrote it
    /// lately, hashing it then). A chunk that fails verification is deleted and reported.
    public func read(_ digest: SHA256Digest, trustingRecentWrites: Bool = false) throws(MeshStoreError) -> [UInt8] {
        let file = pending[digest] ?? finalPath(digest)
        guard let bytes = try Self.readFile(file) else { throw .notFound(digest) }
        if trustingRecentWrites, recentWrites.contains(digest) { return bytes }
        guard SHA256Digest.hashing(bytes) == digest else {
            unlink(file)
            pending[digest] = nil
            throw .corrupt(digest)
        }
        return bytes
    }

    /// The size of a stored chunk's file, if it is there.
    public func storedSize(_ digest: SHA256Digest) -> UInt64? {
        var info = stat()
        return stat(finalPath(digest), &info) == 0 ? UInt64(info.st_size) : nil
    }

    /// Every stored digest (not the pending ones).
    public func storedDigests() -> [SHA256Digest] {
        var digests: [SHA256Digest] = []
        for prefix in Self.listDirectory(path) where prefix.utf8.count == 2 {
            for name in Self.listDirectory(path + "/" + prefix) {
                if let digest = SHA256Digest(hex: name), name.hasPrefix(prefix) { digests.append(digest) }
            }
        }
        return digests.sorted()
    }

    /// Reads and hashes every stored chunk; discards and returns those that do not verify.
    @discardableResult
    public func verifyAll() -> [SHA256Digest] {
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
    public func write(_ bytes: [UInt8], expected: SHA256Digest? = nil) throws(MeshStoreError) -> SHA256Digest {
        try insert(bytes, expected: expected).digest
    }

    /// `write`, also saying whether the chunk is new to the store (a caller can take back
    /// exactly what it added).
    public func insert(_ bytes: [UInt8], expected: SHA256Digest? = nil) throws(MeshStoreError)
        -> (inserted: Bool, digest: SHA256Digest)
    {
        let digest = SHA256Digest.hashing(bytes)
        if let expected, expected != digest { throw .hashMismatch(expected: expected, actual: digest) }
        if contains(digest) { return (false, digest) }
        temporaryCounter += 1
        let temporary = "\(path)/\(digest.hex).\(getpid()).\(temporaryCounter).tmp"
        try Self.writeFile(temporary, bytes, sync: false)
        pending[digest] = temporary
        pendingOrder.append(digest)
        recentWrites.insert(digest)
        if pendingOrder.count >= batchLimit {
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

    /// Makes every written chunk durable and visible under its name: one `syncfs` for the batch,
    /// then the renames, then one more for the directory entries.
    public func flush() throws(MeshStoreError) {
        guard !pendingOrder.isEmpty else { return }
        try syncFileSystem()
        for digest in pendingOrder {
            guard let temporary = pending[digest] else { continue }
            let final = finalPath(digest)
            try Self.makeDirectory(NSStringPath(value: final).directory)
            guard rename(temporary, final) == 0 else {
                throw .io(path: final, reason: Self.errnoText())
            }
            pending[digest] = nil
        }
        pendingOrder = []
        try syncFileSystem()
    }

    public func remove(_ digest: SHA256Digest) throws(MeshStoreError) {
        // A chunk written again later is hashed again on its way in; until then it is not ours.
        recentWrites.remove(digest)
        if let temporary = pending.removeValue(forKey: digest) {
            unlink(temporary)
            pendingOrder.removeAll { $0 == digest }
        }
        let final = finalPath(digest)
        if unlink(final) != 0 && errno != ENOENT { throw .io(path: final, reason: Self.errnoText()) }
    }

    // MARK: files

    func finalPath(_ digest: SHA256Digest) -> String {
        let hex = digest.hex
        return "\(path)/\(hex.prefix(2))/\(hex)"
    }

    /// Temporary files of writes that a crash interrupted: one whose bytes still hash to the
    /// digest in its name is complete (a killed process's writes survive in the page cache) and
    /// is moved into place; any other is removed.
    private func recoverLeftovers() {
        var recovered = false
        for name in Self.listDirectory(path) where name.hasSuffix(".tmp") {
            let file = path + "/" + name
            if let digest = SHA256Digest(hex: name.prefix(64)),
               let bytes = try? Self.readFile(file), SHA256Digest.hashing(bytes) == digest,
               (try? Self.makeDirectory(NSStringPath(value: finalPath(digest)).directory)) != nil,
               rename(file, finalPath(digest)) == 0 {
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
        guard fd >= 0 else { throw FileIO.isOutOfSpace(errno) ? .diskFull(path: file) : .io(path: file, reason: errnoText()) }
        let failure = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) }
        if failure != 0 {
            close(fd)
            unlink(file)
            throw FileIO.isOutOfSpace(failure) ? .diskFull(path: file) : .io(path: file, reason: FileIO.describe(failure))
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

    static func readFile(_ file: String) throws(MeshStoreError) -> [UInt8]? {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw .io(path: file, reason: errnoText())
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .io(path: file, reason: errnoText()) }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var total = 0
        while total < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) } // safe: non-empty
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            total += n
        }
        // A file that shrank under us: what was read (no copy of a whole chunk otherwise).
        if total < bytes.count { bytes.removeSubrange(total...) }
        return bytes
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

