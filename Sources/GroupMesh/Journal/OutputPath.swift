import Foundation

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
}
