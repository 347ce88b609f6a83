import Foundation
import MeshCore
import MeshCrypto
import MeshStore

/// `get`s whose file is written while their fetch runs: each verified chunk goes into the
/// output's temporary file as it is stored (by the `OutputWriter`, beside the store's worker), so
/// that when the fetch ends the file only needs its sync and rename (writing it all out after
/// the fetch, read back from the store, would add to every `get`'s wall time). Keyed by output
/// path; owned by `AttachmentStore`, on its actor.
struct ExportsInProgress {
    struct Export {
        let manifest: SHA256Digest
        let file: OutputFile
        /// Where each chunk not yet handed to the writer goes (a chunk may stand at several offsets).
        var missing: [SHA256Digest: [Int64]]

        /// Nothing written yet: every chunk of `manifest` at every offset it stands at.
        init(_ manifest: Manifest, into file: OutputFile) {
            self.manifest = manifest.id
            self.file = file
            missing = [:]
            for (index, digest) in manifest.chunks.enumerated() {
                missing[digest, default: []].append(Int64(index) * Int64(manifest.chunkSize))
            }
        }
    }

    private var exports: [String: Export] = [:]
    /// The outputs each missing chunk is awaited by.
    private var awaiting: [SHA256Digest: [String]] = [:]

    var isEmpty: Bool { exports.isEmpty }

    /// Opens `path`'s temporary file and writes what the store holds of `manifest` (`read`).
    /// A path already prepared, or one that cannot be written, is left to the export at the end
    /// (which says what is wrong).
    mutating func prepare(
        _ manifest: Manifest, to path: String, mode: UInt32?,
        read: (SHA256Digest) -> [UInt8]?
    ) {
        guard exports[path] == nil, (try? OutputPath.check(path)) != nil,
            let file = try? OutputFile.create(for: path, mode: mode)
        else { return }
        var export = Export(manifest, into: file)
        for digest in export.missing.keys.sorted() {
            guard let bytes = read(digest) else {
                awaiting[digest, default: []].append(path)
                continue
            }
            Self.write(bytes, of: digest, into: &export)
        }
        exports[path] = export
    }

    /// A verified chunk was stored: into every output waiting for it.
    mutating func stored(_ bytes: [UInt8], as digest: SHA256Digest) {
        guard let paths = awaiting.removeValue(forKey: digest) else { return }
        for path in paths {
            // Taken out while written to: its table of offsets changes in place, not copied.
            guard var export = exports.removeValue(forKey: path) else { continue }
            Self.write(bytes, of: digest, into: &export)
            exports[path] = export
        }
    }

    /// The export for `path` of `manifest`, taken out: the rest of its chunks are for the caller
    /// to write. Nil when none was prepared, or one for other content (closed and removed), or
    /// one whose writes failed (likewise: the caller starts over and meets the failure itself).
    mutating func take(_ path: String, of manifest: Manifest) -> Export? {
        guard let export = exports.removeValue(forKey: path) else { return nil }
        forgetAwaiting(path, export)
        guard export.manifest == manifest.id, export.file.drain() == 0 else {
            export.file.discard()
            return nil
        }
        return export
    }

    /// The `get` will not come (its fetch failed, the node stops): the temporary file goes.
    mutating func cancel(_ path: String) {
        guard let export = exports.removeValue(forKey: path) else { return }
        forgetAwaiting(path, export)
        export.file.discard()
    }

    /// Waits for every write handed over so far (what a reader of the temporary files sees).
    func drainAll() {
        for export in exports.values { _ = export.file.drain() }
    }

    private mutating func forgetAwaiting(_ path: String, _ export: Export) {
        for digest in export.missing.keys {
            awaiting[digest]?.removeAll { $0 == path }
            if awaiting[digest]?.isEmpty == true { awaiting[digest] = nil }
        }
    }

    /// Hands `bytes` to the output writer for every offset `digest` stands at in `export`.
    static func write(_ bytes: [UInt8], of digest: SHA256Digest, into export: inout Export) {
        guard let offsets = export.missing.removeValue(forKey: digest) else { return }
        export.file.write(bytes, at: offsets)
    }
}

/// The temporary file an export writes before it is renamed to its path: made new (never through
/// a link someone left in its place), with the requested mode. It is renamed or removed only while
/// its name is still ours: another `get` of the same path (another node, or another spelling of
/// the path) replaces a leftover by that name, and then neither may rename or remove the other's.
struct OutputFile {
    let path: String
    let temporary: String
    let descriptor: Int32
    private let device: UInt64
    private let inode: UInt64
    /// Its writes, made by the `OutputWriter`: drained before the file is synced or closed.
    private let writes = OutputWriter.Writes()

    static func create(for path: String, mode: UInt32?) throws(GroupMeshError) -> OutputFile {
        let temporary = path + ".groupmesh-partial"
        var fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666)
        if fd < 0, errno == EEXIST {
            // Left by a crash (or planted): removed, never followed.
            unlink(temporary)
            fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666)
        }
        guard fd >= 0 else { throw GroupMeshError.fileWrite(errno, path, doing: "write") }
        var info = stat()
        let modeFailed = mode.map { fchmod(fd, mode_t($0 & 0o777)) != 0 } ?? false
        if modeFailed || fstat(fd, &info) != 0 {
            let code = errno
            close(fd)
            unlink(temporary)
            throw GroupMeshError.fileWrite(code, path, doing: "write")
        }
        return OutputFile(
            path: path, temporary: temporary, descriptor: fd,
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Whether the temporary name still names our file.
    private var ownsName: Bool {
        var info = stat()
        return lstat(temporary, &info) == 0 && UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// Writes `bytes` at each of `offsets`, in order after those handed over before (not yet
    /// done when this returns: `drain`).
    func write(_ bytes: [UInt8], at offsets: [Int64]) {
        OutputWriter.shared.write(bytes, at: offsets, to: descriptor, writes)
    }

    /// Whether a write has failed already (more may be under way).
    var hasFailed: Bool { writes.failedSoFar != 0 }

    /// Waits for every write handed over: 0, or the errno of the first that failed.
    func drain() -> Int32 { writes.drain() }

    /// Its writes done, synced, closed and renamed into place; on any failure removed, and the
    /// failure said. Not `replace`: linked into place, so a file that is there (made meanwhile
    /// too) is kept and the failure says so.
    func commit(replace: Bool = true) throws(GroupMeshError) {
        var failure = drain()
        if failure == 0, fsync(descriptor) != 0 { failure = errno }
        if close(descriptor) != 0, failure == 0 { failure = errno }
        guard failure == 0 else {
            if ownsName { unlink(temporary) }
            throw GroupMeshError.fileWrite(failure, path, doing: "write")
        }
        guard ownsName else {
            throw GroupMeshError.store(
                "another get wrote \(path) at the same time; nothing was written by this one, run it again")
        }
        if !replace {
            let linked = link(temporary, path) == 0
            let code = errno
            unlink(temporary)
            guard linked else {
                if code == EEXIST { throw GroupMeshError.outputExists(path) }
                throw GroupMeshError.fileWrite(code, path, doing: "write")
            }
        } else if rename(temporary, path) != 0 {
            let code = errno
            unlink(temporary)
            throw GroupMeshError.fileWrite(code, path, doing: "write")
        }
    }

    func discard() {
        _ = drain()
        if ownsName { unlink(temporary) }
        close(descriptor)
    }
}
