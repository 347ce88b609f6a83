import Foundation
import MeshCrypto
@testable import MeshStore
import Testing

@Suite("ChunkStore")
struct ChunkStoreTests {
    static func temporaryDirectory() -> String {
        let path = NSTemporaryDirectory() + "groupmesh-store-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func chunk(_ seed: UInt8, size: Int = 4096) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed) &* 7) ^ seed }
    }

    @Test("write, flush, read back verified; the file is named by its SHA-256")
    func roundTrip() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory + "/chunks")
        let bytes = Self.chunk(1)
        let digest = try store.write(bytes)
        #expect(digest == SHA256Digest.hashing(bytes))
        #expect(store.contains(digest))
        #expect(try store.read(digest) == bytes, "pending chunks are readable before the flush")
        try store.flush()
        #expect(FileManager.default.fileExists(atPath: store.finalPath(digest)))
        #expect(store.finalPath(digest).hasSuffix("/" + String(digest.hex.prefix(2)) + "/" + digest.hex))
        #expect(try store.read(digest) == bytes)
        #expect(store.storedDigests() == [digest])
        // A new store on the same directory sees it.
        #expect(try ChunkStore(path: directory + "/chunks").read(digest) == bytes)
    }

    @Test("identical chunks are stored once; a wrong expected hash is refused before anything is written")
    func dedupAndExpectedHash() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        let bytes = Self.chunk(2)
        let first = try store.write(bytes)
        let second = try store.write(bytes)
        try store.flush()
        #expect(first == second)
        #expect(store.storedDigests().count == 1)
        let other = SHA256Digest.hashing(Self.chunk(3))
        #expect(throws: MeshStoreError.hashMismatch(expected: other, actual: first)) {
            try store.write(bytes, expected: other)
        }
        #expect(throws: MeshStoreError.notFound(other)) { try store.read(other) }
        // `insert` says which writes added the chunk: a failed ingest takes back only those.
        #expect(try store.insert(bytes).inserted == false)
        #expect(try store.insert(Self.chunk(4)).inserted == true)
        #expect(try store.insert(Self.chunk(4)).inserted == false, "pending, not yet flushed, still counts")
    }

    @Test("a chunk corrupted on disk is detected, discarded and never served")
    func corruptionDetected() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        let good = try store.write(Self.chunk(4))
        let bad = try store.write(Self.chunk(5))
        try store.flush()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: store.finalPath(bad)))
        bytes[100] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: store.finalPath(bad)))
        #expect(throws: MeshStoreError.corrupt(bad)) { try store.read(bad) }
        #expect(!store.contains(bad))
        #expect(try store.read(good) == Self.chunk(4))

        // verifyAll finds corruption among many.
        let third = try store.write(Self.chunk(6))
        try store.flush()
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: store.finalPath(third)))
        #expect(store.verifyAll() == [third])
        #expect(store.storedDigests() == [good])
    }

    @Test("a chunk this process wrote is read back unhashed only when asked to trust recent writes; one found on disk always is hashed")
    func recentWritesAreTrustedOnlyWhenAsked() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        store.recentWriteCapacity = 2
        let digests = try (7...9).map { try store.write(Self.chunk(UInt8($0))) }
        try store.flush()
        // Corrupt all three on disk behind the store's back.
        for digest in digests {
            try Data(repeating: 0xAB, count: 4096).write(to: URL(fileURLWithPath: store.finalPath(digest)))
        }
        // The oldest write fell out of the two remembered: hashed, found corrupt.
        #expect(throws: MeshStoreError.corrupt(digests[0])) { try store.read(digests[0], trustingRecentWrites: true) }
        // The latest two are trusted only when asked.
        #expect(try store.read(digests[2], trustingRecentWrites: true) == [UInt8](repeating: 0xAB, count: 4096))
        #expect(throws: MeshStoreError.corrupt(digests[1])) { try store.read(digests[1]) }
        // A new store (a restart) trusts nothing it did not write itself.
        let reopened = try ChunkStore(path: directory)
        #expect(throws: MeshStoreError.corrupt(digests[2])) { try reopened.read(digests[2], trustingRecentWrites: true) }
    }

    @Test("after a crash before the rename: complete leftovers are recovered, partial ones removed")
    func crashBeforeRename() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var written: [SHA256Digest] = []
        do {
            let store = try ChunkStore(path: directory)
            store.batchLimit = 1000
            for seed in 10..<20 { written.append(try store.write(Self.chunk(UInt8(seed)))) }
            // The process "dies" here: nothing was flushed or renamed.
        }
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".tmp") }.sorted()
        #expect(leftovers.count == 10)
        // One write was torn (a power loss mid-write): its bytes no longer match its name.
        let torn = directory + "/" + leftovers[0]
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: torn))
        let tornDigest = SHA256Digest(hex: leftovers[0].prefix(64))!

        let reopened = try ChunkStore(path: directory)
        #expect(reopened.storedDigests() == written.filter { $0 != tornDigest }.sorted())
        #expect(!reopened.contains(tornDigest))
        #expect(reopened.verifyAll().isEmpty, "every chunk under a valid name verifies")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).allSatisfy { !$0.hasSuffix(".tmp") })
    }

    @Test("a batch is flushed by itself at the batch limit")
    func batchLimit() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        store.batchLimit = 4
        for seed in 30..<34 { try store.write(Self.chunk(UInt8(seed))) }
        #expect(store.storedDigests().count == 4)
    }

    @Test("remove deletes a chunk; an unknown format version is refused")
    func removeAndFormat() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        let digest = try store.write(Self.chunk(40))
        try store.flush()
        try store.remove(digest)
        #expect(!store.contains(digest))
        try "chunks-v9\n".write(toFile: directory + "/format-version", atomically: true, encoding: .utf8)
        #expect(throws: MeshStoreError.formatVersion(path: directory, found: "chunks-v9")) {
            _ = try ChunkStore(path: directory)
        }
    }

    @Test("a full disk is a clear error and leaves the store consistent",
          .enabled(if: getuid() == 0, "needs root to mount a small tmpfs"))
    func diskFull() throws {
        let mountPoint = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: mountPoint) }
        let mount = Process()
        mount.executableURL = URL(fileURLWithPath: "/bin/mount")
        mount.arguments = ["-t", "tmpfs", "-o", "size=256k", "tmpfs", mountPoint]
        try mount.run()
        mount.waitUntilExit()
        try #require(mount.terminationStatus == 0, "mount tmpfs failed")
        defer {
            let umount = Process()
            umount.executableURL = URL(fileURLWithPath: "/bin/umount")
            umount.arguments = [mountPoint]
            try? umount.run()
            umount.waitUntilExit()
        }
        let store = try ChunkStore(path: mountPoint + "/chunks")
        var stored: [SHA256Digest] = []
        var failure: MeshStoreError?
        for seed in 0..<200 {
            do {
                stored.append(try store.write(Self.chunk(UInt8(seed), size: 16 * 1024)))
            } catch {
                failure = error
                break
            }
        }
        guard case .diskFull = failure else {
            Issue.record("expected diskFull, got \(String(describing: failure))")
            return
        }
        #expect(failure?.description.contains("no space left") == true)
        // Everything written before the failure is still readable and verifies.
        try? store.flush()
        for digest in stored { #expect(try store.read(digest).count == 16 * 1024) }
        #expect(store.verifyAll().isEmpty)
    }
}
