import CMeshSystem
import Foundation
import MeshCrypto
@testable import MeshStore
import Testing

@Suite("UncachedWriter")
struct UncachedWriterTests {
    static func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ Int(seed)) }
    }

    /// Whether `path` lies on a file system known to take direct I/O (ext4, xfs, btrfs): there a
    /// writer that fell back to the page cache is a defect, not the file system's choice.
    static func takesDirectIO(_ path: String) -> Bool {
        [0xEF53, 0x5846_5342, 0x9123_683E].contains(cmesh_file_system_magic(path))
    }

    /// Writes `parts` (bytes at offsets) into a new file in `directory` and reads it back.
    static func written(_ parts: [(offset: Int, bytes: [UInt8])], by writer: UncachedWriter,
                        in directory: String, name: String) throws -> [UInt8] {
        let path = directory + "/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        for part in parts {
            let failure = part.bytes.withUnsafeBytes { writer.write(fd, $0, at: Int64(part.offset)) }
            #expect(failure == 0, "errno \(failure)")
        }
        close(fd)
        return try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    }

    @Test("an output written out of order, its short last block through the page cache, holds exactly its bytes")
    func outOfOrderWithShortEnd() throws {
        let directory = ChunkStoreTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = Self.bytes(8192, seed: 1), second = Self.bytes(8192, seed: 2), last = Self.bytes(5000, seed: 3)
        let parts = [(offset: 16384, bytes: last), (offset: 0, bytes: first), (offset: 8192, bytes: second)]
        let writer = UncachedWriter()
        let file = try Self.written(parts, by: writer, in: directory, name: "direct")
        #expect(file.count == 8192 * 2 + 5000)
        let whole = file == first + second + last
        #expect(whole, "the bytes differ")
        // Where the file system takes direct I/O (ext4, xfs, tmpfs since Linux 6.6), both whole
        // blocks went around the page cache.
        #expect(writer.refused || writer.uncachedWrites == 2, "refused \(writer.refused), uncached \(writer.uncachedWrites)")
        if Self.takesDirectIO(directory) { #expect(!writer.refused, "ext4, xfs and btrfs take direct I/O") }
        let cached = UncachedWriter(enabled: false)
        let same = try Self.written(parts, by: cached, in: directory, name: "cached") == file
        #expect(same, "through the page cache the file differs")
        #expect(cached.uncachedWrites == 0)
    }

    @Test("a write off the 4 KiB grid (at an offset or in its length) goes through the page cache, and nothing beyond it is cut")
    func offTheGrid() throws {
        let directory = ChunkStoreTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let head = Self.bytes(100, seed: 4), middle = Self.bytes(5000, seed: 5), tail = Self.bytes(4096, seed: 6)
        let writer = UncachedWriter()
        let file = try Self.written([(offset: 0, bytes: head), (offset: 100, bytes: middle), (offset: 5100, bytes: tail)],
                                    by: writer, in: directory, name: "odd")
        let whole = file == head + middle + tail
        #expect(whole, "the bytes differ")
        #expect(writer.uncachedWrites == 0)
        // A short block before a later one leaves that one whole (nothing is cut).
        let short = Self.bytes(5000, seed: 7), after = Self.bytes(4096, seed: 8)
        let kept = try Self.written([(offset: 8192, bytes: after), (offset: 0, bytes: short)],
                                    by: writer, in: directory, name: "gap")
        #expect(kept.count == 8192 + 4096)
        let both = Array(kept[0..<5000]) == short && Array(kept[8192...]) == after
        #expect(both, "the bytes differ")
    }
}
