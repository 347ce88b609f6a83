import Foundation
import MeshStore

/// Where `get` (and `Journal.load(_:to:)`) may write: a regular file, replaced whole, or a path
/// where nothing is yet. A symbolic link, a device, a pipe, a socket or a directory is refused:
/// renaming over it replaced `/dev/full` with a regular file when run as root, and a link in a
/// shared directory would have the node write where its owner chose.
enum OutputPath {
    /// Not `replacing`: a regular file at `path` is kept, and refused here.
    static func check(_ path: String, replacing: Bool = true) throws(GroupMeshError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            // Nothing there (created), unless the directory it would go in is missing: said now,
            // not after the fetch.
            let parent = (path as NSString).deletingLastPathComponent
            var directory = stat()
            if errno == ENOENT || errno == ENOTDIR,
                stat(parent.isEmpty ? "." : parent, &directory) != 0
                    || directory.st_mode & S_IFMT != S_IFDIR
            {
                throw .attachment(
                    "cannot write \(path): the directory \(parent) does not exist; create it first, or give another path"
                )
            }
            return
        }
        let kind: String
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            guard replacing else { throw .outputExists(path) }
            return
        case S_IFLNK:
            kind = "a symbolic link (get neither writes through links nor replaces them; give the file it points to)"
        case S_IFDIR: kind = "a directory (give the path of a file to write)"
        case S_IFCHR, S_IFBLK: kind = "a device, not a regular file"
        case S_IFIFO: kind = "a named pipe, not a regular file"
        case S_IFSOCK: kind = "a socket, not a regular file"
        default: kind = "not a regular file"
        }
        throw .outputNotRegularFile(path, kind)
    }

    /// Before a fetch, what would fail only at its end: the node (as the user it runs as) may
    /// create a file in `path`'s directory, and the disks have room for the file (`size`) and
    /// for the chunks still to fetch into the data dir (`fetching`, into `storeDirectory`), both
    /// on one disk when they share it.
    static func checkRoom(
        for path: String, size: UInt64, fetching: UInt64, storeDirectory: String
    ) throws(GroupMeshError) {
        let parent = (path as NSString).deletingLastPathComponent
        let directory = parent.isEmpty ? "." : parent
        guard access(directory, W_OK | X_OK) == 0 else {
            throw .attachment(
                "cannot write \(path): \(FileIO.describe(errno)) in \(directory) for the user the node runs as; "
                    + "nothing was fetched")
        }
        var output = stat(), store = stat()
        guard stat(directory, &output) == 0, stat(storeDirectory, &store) == 0,
            let outputFree = freeBytes(directory), let storeFree = freeBytes(storeDirectory)
        else { return }
        func refuse(_ needed: UInt64, _ free: UInt64, _ what: String) -> GroupMeshError {
            .attachment(
                "not enough space for \(what): \(ByteCount.text(needed)) needed, \(ByteCount.text(free)) free; "
                    + "nothing was fetched")
        }
        if output.st_dev == store.st_dev {
            guard size + fetching <= outputFree else {
                throw refuse(size + fetching, outputFree, "\(path) and the chunks the data dir still has to fetch")
            }
        } else {
            guard size <= outputFree else { throw refuse(size, outputFree, path) }
            guard fetching <= storeFree else {
                throw refuse(fetching, storeFree, "the chunks the data dir \(storeDirectory) still has to fetch")
            }
        }
    }

    /// What an unprivileged writer may still use on the disk holding `path`.
    static func freeBytes(_ path: String) -> UInt64? {
        var disk = statvfs()
        guard statvfs(path, &disk) == 0 else { return nil }
        return UInt64(disk.f_bavail) * UInt64(disk.f_frsize)
    }
}
