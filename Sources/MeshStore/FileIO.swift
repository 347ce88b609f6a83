#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import NIOCore

/// Plain file writes with their errno kept (Foundation's `FileHandle` reports a full disk on Linux
/// as a generic Cocoa error, with the errno out of reach).
package enum FileIO {
    /// Writes all of `bytes` at `fd`, through short writes and interruptions: 0, or the errno of
    /// the write that failed.
    package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32 {
        guard let base = bytes.baseAddress else { return 0 }
        var written = 0
        while written < bytes.count {
            let n = write(fd, base + written, bytes.count - written)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return n == 0 ? EIO : errno }
            written += n
        }
        return 0
    }

    /// Writes all of `bytes` at `offset` of `fd` (the file position is left alone): 0, or the
    /// errno of the write that failed.
    package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Int32 {
        guard let base = bytes.baseAddress else { return 0 }
        var written = 0
        while written < bytes.count {
            let n = pwrite(fd, base + written, bytes.count - written, off_t(offset) + off_t(written))
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return n == 0 ? EIO : errno }
            written += n
        }
        return 0
    }

    /// Exactly `count` bytes at `offset` of `fd` (the file position is left alone), or nil if the
    /// file ends first or a read fails.
    package static func readAll(_ fd: Int32, count: Int, at offset: Int64) -> [UInt8]? {
        var complete = true
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = read(fd, into: UnsafeMutableRawBufferPointer(buffer), at: offset)
            complete = initialized == count
        }
        return complete ? bytes : nil
    }

    /// `readAll` into a buffer of its own.
    package static func readAll(
        _ fd: Int32, count: Int, at offset: Int64, allocator: ByteBufferAllocator
    ) -> ByteBuffer? {
        var buffer = allocator.buffer(capacity: count)
        let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { space in
            Self.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: space[..<count]), at: offset)
        }
        return read == count ? buffer : nil
    }

    /// Fills `space` from `offset` through short reads and interruptions (a shorter count at the
    /// end of the file or on an error).
    package static func read(_ fd: Int32, into space: UnsafeMutableRawBufferPointer, at offset: Int64) -> Int {
        var done = 0
        while done < space.count {
            guard let base = space.baseAddress else { break }
            let n = pread(fd, base + done, space.count - done, off_t(offset) + off_t(done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            done += n
        }
        return done
    }

    /// Whether the errno says the disk (or the user's quota) is full.
    package static func isOutOfSpace(_ code: Int32) -> Bool { code == ENOSPC || code == EDQUOT }

    package static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}
