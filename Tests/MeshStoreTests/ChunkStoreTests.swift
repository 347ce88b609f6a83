import CMeshSystem
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

    /// Overwrites a stored chunk's bytes on disk behind the store's back.
    static func damage(_ store: ChunkStore, _ digest: SHA256Digest, with bytes: [UInt8]) throws {
        let location = try #require(store.bytesLocation(digest))
        let handle = try #require(FileHandle(forWritingAtPath: location.file))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(location.offset))
        try handle.write(contentsOf: bytes)
    }

    static func canPunchHoles(_ directory: String) -> Bool {
        let probe = directory + "/probe"
        defer { unlink(probe) }
        let fd = open(probe, O_RDWR | O_CREAT, 0o600)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        _ = [UInt8](repeating: 1, count: 8192).withUnsafeBytes { write(fd, $0.baseAddress, 8192) }
        return cmesh_punch_hole(fd, 0, 4096) == 0
    }

    static func packFiles(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".pack") }
            .sorted()
    }

    static func size(_ file: String) -> (bytes: Int64, blocks: Int64) {
        var info = stat()
        return stat(file, &info) == 0 ? (Int64(info.st_size), Int64(info.st_blocks)) : (-1, -1)
    }

    @Test("write, flush, read back verified; chunks go into one pack file, not a file each")
    func roundTrip() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory + "/chunks")
        let bytes = Self.chunk(1)
        let digest = try store.write(bytes)
        #expect(digest == SHA256Digest.hashing(bytes))
        #expect(store.contains(digest))
        #expect(try store.read(digest) == bytes, "unsynced chunks are readable before the flush")
        try store.flush()
        let other = try store.write(Self.chunk(2, size: 300))
        try store.flush()
        #expect(try store.read(digest) == bytes)
        #expect(store.storedDigests() == [digest, other].sorted())
        #expect(store.storedSize(other) == 300)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory + "/chunks").sorted()
        #expect(files == ["0000000000000001.pack", "format-version"])
        #expect(try String(contentsOfFile: directory + "/chunks/format-version", encoding: .utf8) == "chunks-v2\n")
        // A new store on the same directory sees both, and a look from outside finds them too.
        let reopened = try ChunkStore(path: directory + "/chunks")
        #expect(try reopened.read(digest) == bytes)
        #expect(try reopened.read(other) == Self.chunk(2, size: 300))
        let survey = ChunkStore.survey(directory + "/chunks")
        #expect(Set(survey.keys) == [digest, other])
        #expect(survey[other]?.bytes() == Self.chunk(2, size: 300))
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
        try Self.damage(store, bad, with: [Self.chunk(5)[100] ^ 0x01])
        #expect(throws: MeshStoreError.corrupt(bad)) { try store.read(bad) }
        #expect(!store.contains(bad))
        #expect(try store.read(good) == Self.chunk(4))

        // verifyAll finds corruption among many.
        let third = try store.write(Self.chunk(6))
        try store.flush()
        try Self.damage(store, third, with: [1, 2, 3])
        #expect(store.verifyAll() == [third])
        #expect(store.storedDigests() == [good])
    }

    @Test(
        "a chunk this process wrote is read back unhashed only when asked to trust recent writes; one found on disk always is hashed"
    )
    func recentWritesAreTrustedOnlyWhenAsked() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        store.recentWriteCapacity = 2
        let digests = try (7...9).map { try store.write(Self.chunk(UInt8($0))) }
        try store.flush()
        // Corrupt all three on disk behind the store's back.
        for digest in digests { try Self.damage(store, digest, with: [UInt8](repeating: 0xAB, count: 4096)) }
        // The oldest write fell out of the two remembered: hashed, found corrupt.
        #expect(throws: MeshStoreError.corrupt(digests[0])) { try store.read(digests[0], trustingRecentWrites: true) }
        // The latest two are trusted only when asked.
        #expect(try store.read(digests[2], trustingRecentWrites: true) == [UInt8](repeating: 0xAB, count: 4096))
        #expect(throws: MeshStoreError.corrupt(digests[1])) { try store.read(digests[1]) }
        // A new store (a restart) trusts nothing it did not write itself.
        let reopened = try ChunkStore(path: directory)
        #expect(throws: MeshStoreError.corrupt(digests[2])) {
            try reopened.read(digests[2], trustingRecentWrites: true)
        }
    }

    @Test(
        "after a crash before the flush: chunks whose bytes arrived are kept, a damaged one is dropped, a torn tail is cut"
    )
    func crashBeforeFlush() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var written: [SHA256Digest] = []
        var damaged: SHA256Digest?
        do {
            let store = try ChunkStore(path: directory)
            store.batchLimit = 1000
            for seed in 10..<20 { written.append(try store.write(Self.chunk(UInt8(seed)))) }
            // The process "dies" here, nothing synced; one write lost bytes (a power loss mid-write).
            try Self.damage(store, written[3], with: [0, 0, 0, 0])
            damaged = written[3]
        }
        let pack = directory + "/" + (try #require(Self.packFiles(directory).first))
        // And the last record is torn: its header is there, half its bytes are not.
        let full = Self.size(pack).bytes
        #expect(truncate(pack, off_t(full - 2048)) == 0)

        let reopened = try ChunkStore(path: directory)
        let kept = written.filter { $0 != damaged && $0 != written.last }
        #expect(reopened.storedDigests() == kept.sorted())
        #expect(reopened.verifyAll().isEmpty, "every chunk listed verifies")
        #expect(Self.size(pack).bytes == full - 4096 - 40, "the torn record was cut off")
        // The pack takes new chunks where the cut was; all is there after another start.
        let more = try reopened.write(Self.chunk(21))
        try reopened.flush()
        let again = try ChunkStore(path: directory)
        #expect(again.storedDigests() == (kept + [more]).sorted())
        #expect(again.verifyAll().isEmpty)
    }

    @Test(
        "a removed chunk's space is freed: its blocks at the next flush where holes can be punched, its pack when nothing in it lives"
    )
    func removalFreesSpace() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        store.packLimit = 3 * (64 * 1024 + 40) + 16
        let digests = try (50..<57).map { try store.write(Self.chunk(UInt8($0), size: 64 * 1024)) }
        try store.flush()
        let packs = Self.packFiles(directory)
        #expect(packs.count == 3, "three chunks a pack: \(packs)")
        // The blocks of a removed chunk go at once where the file system can.
        let middle = directory + "/" + packs[1]
        let before = Self.size(middle)
        try store.remove(digests[4])
        // Freed once the dead mark is synced (the next flush), never before.
        #expect(Self.size(middle).blocks == before.blocks)
        try store.flush()
        if Self.canPunchHoles(directory) {
            #expect(Self.size(middle).blocks < before.blocks, "\(before) then \(Self.size(middle))")
        } else {
            print("ChunkStore: this file system cannot punch holes; a removed chunk's blocks stay until its pack goes")
        }
        #expect(Self.size(middle).bytes == before.bytes)
        #expect(try store.read(digests[5]) == Self.chunk(55, size: 64 * 1024), "its neighbour is whole")
        // A pack whose chunks are all removed is deleted.
        for digest in digests[0..<3] { try store.remove(digest) }
        #expect(Self.packFiles(directory) == Array(packs[1...]))
        #expect(store.storedDigests() == [digests[3], digests[5], digests[6]].sorted())
        try store.remove(digests[6])
        // So is the one being written, once its last chunk goes; the next chunk starts another.
        #expect(Self.packFiles(directory) == [packs[1]])
        let later = try store.write(Self.chunk(58))
        try store.flush()
        #expect(Self.packFiles(directory) == [packs[1], "0000000000000004.pack"])
        let reopened = try ChunkStore(path: directory)
        #expect(reopened.storedDigests() == [digests[3], digests[5], later].sorted())
        #expect(reopened.verifyAll().isEmpty)
        #expect(throws: MeshStoreError.notFound(digests[6])) { try reopened.read(digests[6]) }
    }

    @Test(
        "a chunk stored twice (removed, stored again, then a power loss undid the removal over zeroed bytes): the copy that verifies is kept"
    )
    func duplicateAfterPowerLoss() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let chunk = Self.chunk(70, size: 8192)
        var digest = SHA256Digest.hashing(chunk), first: (file: String, offset: Int64, length: Int)?
        do {
            let store = try ChunkStore(path: directory)
            store.packLimit = 2 * (8192 + 40) + 16
            digest = try store.write(chunk)
            try store.write(Self.chunk(71, size: 8192))
            try store.flush()
            first = store.bytesLocation(digest)
            try store.remove(digest)
            try store.write(chunk)
            try store.flush()
            #expect(Self.packFiles(directory).count == 2)
        }
        // The removal's dead mark was lost, its hole punched: a live record over zeros, inside
        // the durable part of the first pack (so not hashed when the store opens).
        let location = try #require(first)
        let handle = try #require(FileHandle(forWritingAtPath: location.file))
        try handle.seek(toOffset: UInt64(location.offset - 40))
        try handle.write(contentsOf: [0x43, 0x48, 0x4E, 0x4B])
        try handle.seek(toOffset: UInt64(location.offset))
        try handle.write(contentsOf: [UInt8](repeating: 0, count: location.length))
        try handle.close()
        let reopened = try ChunkStore(path: directory)
        #expect(try reopened.read(digest) == chunk)
        #expect(reopened.verifyAll().isEmpty)
        #expect(try ChunkStore(path: directory).read(digest) == chunk)
    }

    @Test(
        "damage where a pack was durable keeps what can be read, cuts nothing, and new chunks go to a new pack; odd pack names are left alone"
    )
    func damageInTheDurablePart() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var digests: [SHA256Digest] = []
        var damaged: (file: String, offset: Int64, length: Int)?
        do {
            let store = try ChunkStore(path: directory)
            digests = try (80..<85).map { try store.write(Self.chunk(UInt8($0))) }
            try store.flush()
            damaged = store.bytesLocation(digests[2])
        }
        let location = try #require(damaged)
        let pack = location.file, size = Self.size(pack).bytes
        let handle = try #require(FileHandle(forWritingAtPath: pack))
        try handle.seek(toOffset: UInt64(location.offset - 40))
        try handle.write(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF])
        try handle.close()
        for name in ["000000000000000A.pack", "ffffffffffffffff.pack", "+00000000000000a.pack"] {
            FileManager.default.createFile(atPath: directory + "/" + name, contents: Data([1, 2, 3]))
        }
        let reopened = try ChunkStore(path: directory)
        #expect(reopened.storedDigests() == Array(digests[0..<2]).sorted())
        #expect(
            reopened.damage == [
                "\(pack): damaged at byte \(location.offset - 40) of \(size) synced; the chunks after it are left unread"
            ])
        #expect(Self.size(pack).bytes == size, "nothing cut where the pack was durable")
        let fresh = try reopened.write(Self.chunk(86))
        try reopened.flush()
        #expect(Self.size(pack).bytes == size, "nor written to")
        #expect(try ChunkStore(path: directory).storedDigests() == (Array(digests[0..<2]) + [fresh]).sorted())
        #expect(Self.packFiles(directory).count == 5)
        // Its readable chunks removed, the damaged pack still stays: what follows the damage was never read.
        let last = try ChunkStore(path: directory)
        for digest in digests[0..<2] { try last.remove(digest) }
        try last.flush()
        #expect(FileManager.default.fileExists(atPath: pack))
        #expect(try ChunkStore(path: directory).damage.count == 1)
    }

    @Test(
        "a pack damaged where it was durable, with nothing readable before the damage, is kept and reported at every open"
    )
    func damagedPackWithNothingReadableIsKept() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try {
            let store = try ChunkStore(path: directory)
            let digests = try (97..<99).map { try store.write(Self.chunk(UInt8($0))) }
            try store.flush()
            return store.bytesLocation(digests[0])
        }()
        let location = try #require(first)
        let size = Self.size(location.file).bytes
        let handle = try #require(FileHandle(forWritingAtPath: location.file))
        try handle.seek(toOffset: UInt64(location.offset - 40))
        try handle.write(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF])
        try handle.close()
        for _ in 0..<2 {
            let reopened = try ChunkStore(path: directory)
            #expect(reopened.storedDigests().isEmpty)
            #expect(
                reopened.damage.count == 1
                    && reopened.damage[0].hasPrefix(location.file + ": damaged at byte \(location.offset - 40)"),
                "\(reopened.damage)")
            #expect(Self.size(location.file).bytes == size, "the pack is neither removed nor cut")
        }
    }

    @Test("a pack whose header cannot be read is reported and left as it is; the other packs are read")
    func unreadablePackHeader() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let kept = try {
            let store = try ChunkStore(path: directory)
            let digest = try store.write(Self.chunk(95))
            try store.flush()
            return digest
        }()
        #expect(try ChunkStore(path: directory).damage.isEmpty)
        let stranger = directory + "/0000000000000007.pack"
        let bytes = Data((0..<64).map { UInt8($0) })
        FileManager.default.createFile(atPath: stranger, contents: bytes)
        let reopened = try ChunkStore(path: directory)
        #expect(reopened.storedDigests() == [kept])
        #expect(
            reopened.damage == [
                "\(stranger): not a pack this version reads (its header is damaged or newer); left unread"
            ])
        let fresh = try reopened.write(Self.chunk(96))
        try reopened.flush()
        #expect(FileManager.default.contents(atPath: stranger) == bytes, "neither written to nor removed")
        #expect(try ChunkStore(path: directory).storedDigests() == [kept, fresh].sorted())
    }

    @Test(
        "a sync that fails drops the chunks written since the last good one (a later sync would say they were written), and new chunks go to a new pack"
    )
    func failedSyncIsNotBelievedLater() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try ChunkStore(path: directory)
        store.batchLimit = 1000
        let durable = try store.write(Self.chunk(90))
        try store.flush()
        let unsynced = try (91..<94).map { try store.write(Self.chunk(UInt8($0))) }
        store.syncData = { _ in
            errno = EIO
            return -1
        }
        #expect(throws: MeshStoreError.io(path: directory + "/0000000000000001.pack", reason: FileIO.describe(EIO))) {
            try store.flush()
        }
        store.syncData = { fdatasync($0) }
        #expect(store.storedDigests() == [durable], "only what the good sync covered")
        for digest in unsynced { #expect(!store.contains(digest)) }
        let again = try store.write(Self.chunk(91))
        try store.flush()
        #expect(Self.packFiles(directory) == ["0000000000000001.pack", "0000000000000002.pack"])
        let reopened = try ChunkStore(path: directory)
        #expect(reopened.storedDigests() == [durable, again].sorted())
        #expect(reopened.verifyAll().isEmpty)
    }

    @Test(
        "a store of the earlier format (a file per chunk) is read, removed from and upgraded; new chunks go to a pack")
    func looseChunksOfTheEarlierFormat() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let old = [Self.chunk(60), Self.chunk(61)]
        for bytes in old {
            let hex = SHA256Digest.hashing(bytes).hex
            try FileManager.default.createDirectory(
                atPath: directory + "/" + hex.prefix(2), withIntermediateDirectories: true)
            try Data(bytes).write(to: URL(fileURLWithPath: directory + "/" + hex.prefix(2) + "/" + hex))
        }
        try "chunks-v1\n".write(toFile: directory + "/format-version", atomically: true, encoding: .utf8)
        let store = try ChunkStore(path: directory)
        let first = SHA256Digest.hashing(old[0]), second = SHA256Digest.hashing(old[1])
        #expect(try store.read(first) == old[0])
        #expect(store.storedSize(second) == 4096)
        #expect(try String(contentsOfFile: directory + "/format-version", encoding: .utf8) == "chunks-v2\n")
        try store.remove(second)
        #expect(!FileManager.default.fileExists(atPath: directory + "/" + second.hex.prefix(2) + "/" + second.hex))
        let fresh = try store.write(Self.chunk(62))
        try store.flush()
        #expect(Self.packFiles(directory).count == 1)
        #expect(try ChunkStore(path: directory).storedDigests() == [first, fresh].sorted())
        #expect(Set(ChunkStore.survey(directory).keys) == [first, fresh])
    }

    @Test(
        "packs damaged at random (any bytes after a sound header) open without harm: every chunk wholly before the damage is kept and reads back, nothing else is made up",
        arguments: 0..<40)
    func damagedPacksOpen(seed: UInt64) throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        func next() -> UInt64 {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            return state
        }
        var records: [(digest: SHA256Digest, bytes: [UInt8], start: UInt64, end: UInt64)] = []
        do {
            let store = try ChunkStore(path: directory)
            store.batchLimit = Int(next() % 6) + 1
            for index in 0..<Int(next() % 8) + 1 {
                let bytes = Self.chunk(UInt8(index), size: Int(next() % 9000) + 1)
                let digest = try store.write(bytes)
                let location = try #require(store.bytesLocation(digest))
                records.append(
                    (digest, bytes, UInt64(location.offset) - 40, UInt64(location.offset) + UInt64(location.length)))
            }
        }
        let pack = directory + "/" + (try #require(Self.packFiles(directory).first))
        let handle = try #require(FileHandle(forUpdatingAtPath: pack))
        let size = UInt64(Self.size(pack).bytes)
        var firstDamage = UInt64.max
        for _ in 0..<Int(next() % 6) + 1 {
            // Bytes overwritten anywhere past the pack's header, or appended past its end.
            let offset = 16 + next() % (size + 64 - 16)
            try handle.seek(toOffset: offset)
            try handle.write(contentsOf: (0..<Int(next() % 80) + 1).map { _ in UInt8(truncatingIfNeeded: next()) })
            firstDamage = min(firstDamage, offset)
        }
        if next() % 3 == 0 {
            let cut = 16 + next() % size
            try handle.truncate(atOffset: cut)
            firstDamage = min(firstDamage, cut)
        }
        try handle.close()
        let reopened = try ChunkStore(path: directory)
        let listed = Set(reopened.storedDigests())
        for record in records where record.end <= firstDamage {
            #expect(listed.contains(record.digest), "seed \(seed): a chunk before the damage was lost")
            #expect(try reopened.read(record.digest) == record.bytes, "seed \(seed)")
        }
        // Nothing is listed that was not stored; what the damage reached is found when read.
        #expect(listed.isSubset(of: Set(records.map(\.digest))), "seed \(seed)")
        let intact = Set(records.filter { $0.end <= firstDamage }.map(\.digest))
        #expect(Set(reopened.verifyAll()).isDisjoint(with: intact), "seed \(seed)")
        // Still a store that takes and returns chunks.
        let fresh = try reopened.write(Self.chunk(99, size: 5000))
        try reopened.flush()
        #expect(try ChunkStore(path: directory).read(fresh) == Self.chunk(99, size: 5000), "seed \(seed)")
    }

    @Test(
        "a store of many packs, with chunks stored again in later packs, opens whole (more packs than descriptors kept open)"
    )
    func manyPacksWithCopies() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var chunks: [SHA256Digest: [UInt8]] = [:]
        var revived: [(file: String, offset: Int64)] = []
        do {
            let store = try ChunkStore(path: directory)
            store.packLimit = 2 * (1000 + 40) + 16
            for seed in 0..<60 {
                let bytes = Self.chunk(UInt8(seed), size: 1000)
                chunks[try store.write(bytes)] = bytes
            }
            try store.flush()
            // Every fourth chunk removed and stored again (in a later pack); its first record is
            // then made live again behind the store's back, over bytes the removal zeroed.
            for (index, digest) in chunks.keys.sorted().enumerated() where index % 4 == 0 {
                let location = try #require(store.bytesLocation(digest))
                try store.remove(digest)
                try store.write(try #require(chunks[digest]))
                revived.append((location.file, location.offset - 40))
            }
            try store.flush()
            #expect(Self.packFiles(directory).count > 20)
        }
        // (A pack whose chunks were both removed is gone, and with it that record.)
        for record in revived where FileManager.default.fileExists(atPath: record.file) {
            let handle = try #require(FileHandle(forWritingAtPath: record.file))
            try handle.seek(toOffset: UInt64(record.offset))
            try handle.write(contentsOf: [0x43, 0x48, 0x4E, 0x4B])
            try handle.close()
        }
        let reopened = try ChunkStore(path: directory)
        #expect(reopened.storedDigests() == chunks.keys.sorted())
        #expect(reopened.verifyAll().isEmpty)
        let again = try ChunkStore(path: directory)
        for (digest, bytes) in chunks { #expect(try again.read(digest) == bytes) }
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

    @Test(
        "a full disk is a clear error and leaves the store consistent",
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
