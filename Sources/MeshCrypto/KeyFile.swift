#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Secret key files: written whole to a temporary file created 0600, fsynced, renamed into
/// place; refused on read when group or others may read them.
enum KeyFile {
    static func load(_ path: String, expectedCount: Int, what: String) throws(MeshCryptoError) -> [UInt8] {
        let bytes = try read(path, upTo: expectedCount)
        guard bytes.count == expectedCount else {
            let held = bytes.count > expectedCount ? "more than \(expectedCount)" : "\(bytes.count)"
            throw .keyFile(path: path, reason: "\(what) file holds \(held) bytes, expected \(expectedCount)")
        }
        return bytes
    }

    /// Reads a secret file of at most `limit` bytes.
    static func load(_ path: String, limit: Int, what: String) throws(MeshCryptoError) -> [UInt8] {
        let bytes = try read(path, upTo: limit)
        guard bytes.count <= limit else {
            throw .keyFile(path: path, reason: "\(what) file is larger than \(limit) bytes")
        }
        return bytes
    }

    /// The file's first `expectedCount + 1` bytes at most (one more than allowed tells a long file).
    private static func read(_ path: String, upTo expectedCount: Int) throws(MeshCryptoError) -> [UInt8] {
        // The mode is checked on the file opened, not on the path before opening it (a file
        // swapped in between would be read unchecked); a symbolic link is not followed.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw .keyFile(path: path, reason: errnoText()) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .keyFile(path: path, reason: errnoText()) }
        let mode = UInt32(info.st_mode) & 0o777
        guard mode & 0o077 == 0 else { throw .keyFilePermissions(path: path, mode: mode) }
        var buffer = [UInt8](repeating: 0, count: expectedCount + 1)
        var total = 0
        while total < buffer.count {
            // safe: non-empty
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw .keyFile(path: path, reason: errnoText()) }
            if n == 0 { break }
            total += n
        }
        return Array(buffer.prefix(total))
    }

    static func store(_ bytes: [UInt8], to path: String) throws(MeshCryptoError) {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .keyFile(path: path, reason: errnoText()) }
        var written = 0
        while written < bytes.count {
            // safe: non-empty
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason = errnoText()
                close(fd); unlink(temporary)
                throw .keyFile(path: path, reason: reason)
            }
            written += n
        }
        guard fsync(fd) == 0 else {
            let reason = errnoText()
            close(fd); unlink(temporary)
            throw .keyFile(path: path, reason: reason)
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let reason = errnoText()
            unlink(temporary)
            throw .keyFile(path: path, reason: reason)
        }
        // The rename itself is durable only once the directory is.
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let directoryFD = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// Secret files of any length up to a limit (the key epochs), with `KeyFile`'s rules: written
/// whole, 0600, fsynced and renamed; refused when others may read them.
package enum SecretFile {
    package static func load(_ path: String, limit: Int, what: String) throws(MeshCryptoError) -> [UInt8] {
        try KeyFile.load(path, limit: limit, what: what)
    }

    package static func store(_ bytes: [UInt8], to path: String) throws(MeshCryptoError) {
        try KeyFile.store(bytes, to: path)
    }
}
