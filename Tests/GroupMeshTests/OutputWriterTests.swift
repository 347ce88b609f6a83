import Foundation
@testable import GroupMesh
import NIOConcurrencyHelpers
import Testing

/// The thread that writes a `get`'s output beside the store's worker: order kept per file, the
/// first failure kept and said by `drain`, nothing written after it.
@Suite struct OutputWriterTests {
    /// A new empty file, opened with `flags` (read and write unless told): its path and descriptor.
    static func newFile(_ flags: Int32 = O_RDWR) throws -> (path: String, fd: Int32) {
        let path = NSTemporaryDirectory() + "groupmesh-output-writer-\(UUID().uuidString.prefix(8))"
        try #require(FileManager.default.createFile(atPath: path, contents: Data()))
        let fd = open(path, flags)
        try #require(fd >= 0)
        return (path, fd)
    }

    @Test(
        "writes land in the order handed over (the later one at an offset wins), at every offset given; drain waits for all of them"
    )
    func orderAndOffsets() throws {
        let (path, fd) = try Self.newFile()
        defer { close(fd); unlink(path) }
        // Room for two: the third and later writes wait for the first ones to be done.
        let writer = OutputWriter(capacity: 2 << 16)
        let writes = OutputWriter.Writes()
        for round in 0..<50 {
            writer.write([UInt8](repeating: UInt8(round), count: 4096), at: [0, 8192], to: fd, writes)
        }
        writer.write([UInt8](repeating: 0xEE, count: 4096), at: [4096], to: fd, writes)
        #expect(writes.drain() == 0)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(bytes.count == 12288)
        #expect(bytes[0..<4096].allSatisfy { $0 == 49 } && bytes[8192..<12288].allSatisfy { $0 == 49 })
        #expect(bytes[4096..<8192].allSatisfy { $0 == 0xEE })
    }

    @Test("drain waits for a write held back: it returns only once the write is done, and the file holds it")
    func drainWaitsForHeldWrites() throws {
        let (path, fd) = try Self.newFile()
        defer { close(fd); unlink(path) }
        let writer = OutputWriter(capacity: 4 << 16)
        let writes = OutputWriter.Writes()
        let release = writer.hold()
        // A suspended queue must never be freed (libdispatch stops the process): resumed on any exit.
        var released = false
        defer { if !released { release() } }
        let bytes = [UInt8](repeating: 0x42, count: 8192)
        writer.write(bytes, at: [0], to: fd, writes)
        #expect(!writes.isSettled, "a held write is still pending")
        // Drained on another thread while the write is held, which reads the file as soon as drain
        // returns: only a drain that waited finds the write in it.
        let outcome = NIOLockedValueBox<(code: Int32, content: [UInt8])?>(nil)
        let draining = DispatchSemaphore(value: 0), returned = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            draining.signal()
            let code = writes.drain()
            let content = (try? Data(contentsOf: URL(fileURLWithPath: path))).map { [UInt8]($0) } ?? []
            outcome.withLockedValue { $0 = (code, content) }
            returned.signal()
        }
        // Bounds against a hang, not measures of time.
        try #require(draining.wait(timeout: .now() + 60) == .success)
        release()
        released = true
        try #require(returned.wait(timeout: .now() + 60) == .success, "drain never returned")
        let seen = try #require(outcome.withLockedValue { $0 })
        #expect(seen.code == 0)
        #expect(seen.content == bytes, "drain returned before the held write was done")
    }

    @Test("a write that fails is said by drain (its errno), and kept; another file's writes go on")
    func failureKept() throws {
        // Read-only: every write fails (EBADF), as a full disk's would (ENOSPC).
        let (path, fd) = try Self.newFile(O_RDONLY)
        defer { close(fd); unlink(path) }
        let writer = OutputWriter(capacity: 4 << 16)
        let writes = OutputWriter.Writes()
        writer.write([1, 2, 3], at: [0], to: fd, writes)
        #expect(writes.drain() == EBADF)
        #expect(writes.failedSoFar == EBADF)
        // Another file's writes are not affected by it.
        let (other, good) = try Self.newFile()
        defer { close(good); unlink(other) }
        let fine = OutputWriter.Writes()
        writer.write([7, 7], at: [0], to: good, fine)
        #expect(fine.drain() == 0)
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: other))) == [7, 7])
    }

    #if os(Linux)
        // Linux refuses to sync /dev/null (EINVAL); other systems may not.
        @Test("a file is synced once the interval's bytes were written to it, and a sync that fails is said by drain")
        func syncEveryInterval() throws {
            // /dev/null takes every write and refuses every sync: what drain says shows whether a
            // sync was made.
            let fd = open("/dev/null", O_WRONLY)
            try #require(fd >= 0)
            defer { close(fd) }
            let writer = OutputWriter(capacity: 4 << 16, syncInterval: 8192)
            let early = OutputWriter.Writes()
            writer.write([UInt8](repeating: 1, count: 4096), at: [0], to: fd, early)
            #expect(early.drain() == 0, "synced before the interval's bytes were written")
            // One chunk at two offsets: its second copy reaches the interval.
            let due = OutputWriter.Writes()
            writer.write([UInt8](repeating: 1, count: 4096), at: [0, 4096], to: fd, due)
            #expect(due.drain() == EINVAL, "not synced after the interval's bytes")
        }
    #endif
}
