#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CMeshSystem

/// Writes that bypass the page cache (O_DIRECT) where the file system allows it, for a `get`'s
/// output: it is synced before its rename anyway, and copying 100 MiB into fresh page cache cost
/// the writing thread more than the device took to write it (a loopback `get` from 3 holders,
/// writer thread direct against cached: faster in 5 of 5 interleaved pairs, 12-98%). The store's
/// chunk files stay cached: a node serves them right after it stored them, and read back from
/// the device a lone holder served 82 MiB/s instead of 166-189. A file system that refuses direct
/// I/O (tmpfs on older kernels, some FUSE ones), or a write off the 4 KiB grid (the short last
/// chunk of a file), goes through the page cache. Not thread-safe: one writer per serial
/// owner (its buffer is reused), and one per file (a refusal is the file's: its file system's).
public final class UncachedWriter {
    /// The grid direct writes keep to (memory, offset and length): every device's logical block
    /// divides it.
    public static let alignment = 4096
    /// Larger writes go through the page cache rather than grow the buffer further (a chunk is
    /// 256 KiB; a manifest from a member may claim up to 4 MiB).
    public static let bufferLimit = 4 << 20

    private var buffer: UnsafeMutableRawPointer?
    private var capacity = 0
    /// The file system refused direct I/O once: every later write goes through the page cache.
    public private(set) var refused: Bool
    /// Writes that went around the page cache, for tests.
    public private(set) var uncachedWrites = 0

    /// `enabled: false` writes everything through the page cache.
    public init(enabled: Bool = true) {
        refused = !enabled
    }

    deinit { free(buffer) }

    /// Writes all of `bytes` at `offset` of `fd`: 0, or the errno of the write that failed.
    public func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Int32 {
        let grid = Self.alignment
        guard !refused, let source = bytes.baseAddress, offset % Int64(grid) == 0,
              bytes.count % grid == 0, let target = reserve(bytes.count) else {
            return FileIO.writeAll(fd, bytes, at: offset)
        }
        target.copyMemory(from: source, byteCount: bytes.count)
        guard cmesh_set_direct(fd, 1) == 0 else {
            refused = true
            return FileIO.writeAll(fd, bytes, at: offset)
        }
        var written: Int
        repeat { written = pwrite(fd, target, bytes.count, off_t(offset)) } while written < 0 && errno == EINTR
        let failure = written < 0 ? errno : 0
        guard cmesh_set_direct(fd, 0) == 0 else {
            // Left direct, the file's later unaligned writes would fail: said now instead.
            let code = errno
            refused = true
            return failure != 0 ? failure : code
        }
        if failure == EINVAL {
            // The device wants a coarser grid than ours: the page cache from now on.
            refused = true
            return FileIO.writeAll(fd, bytes, at: offset)
        }
        guard failure == 0 else { return failure }
        if written < bytes.count {
            // A short write (the disk filling up): the rest through the page cache, which says why.
            let rest = UnsafeRawBufferPointer(rebasing: bytes[written...])
            let failure = FileIO.writeAll(fd, rest, at: offset + Int64(written))
            guard failure == 0 else { return failure }
        } else {
            uncachedWrites += 1
        }
        return 0
    }

    /// The aligned buffer, at least `count` bytes; nil past the limit or when memory is short.
    private func reserve(_ count: Int) -> UnsafeMutableRawPointer? {
        guard count > 0, count <= Self.bufferLimit else { return nil }
        if count <= capacity { return buffer }
        var fresh: UnsafeMutableRawPointer?
        guard posix_memalign(&fresh, Self.alignment, count) == 0, let fresh else { return nil }
        free(buffer)
        buffer = fresh
        capacity = count
        return fresh
    }
}
