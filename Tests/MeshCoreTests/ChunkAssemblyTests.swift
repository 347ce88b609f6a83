import MeshCrypto
import NIOCore
import Testing
@testable import MeshCore

@Suite("Chunks in pieces")
struct ChunkAssemblyTests {
    static let holder = NodeID(high: 1, low: 1)
    static let other = NodeID(high: 2, low: 2)
    static let pieceSize = 1099

    static func chunk(_ length: Int, seed: UInt64) -> (bytes: [UInt8], digest: SHA256Digest) {
        var rng = SplitMix64(seed: seed)
        let bytes = rng.bytes(length)
        return (bytes, SHA256Digest.hashing(bytes))
    }

    static func pieces(_ bytes: [UInt8], _ digest: SHA256Digest, only: ChunkBitmap? = nil) -> [ChunkPiece] {
        ChunkAssembly.pieces(of: ByteBuffer(bytes: bytes), digest: digest, pieceSize: pieceSize, only: only)
    }

    static func at(_ milliseconds: Int) -> MeshInstant { MeshInstant(nanoseconds: UInt64(milliseconds) * 1_000_000) }

    @Test(
        "pieces in any order, with duplicates, rebuild the chunk exactly",
        arguments: [1, 1098, 1099, 1100, 262_144, 300_001])
    func anyOrderRebuilds(length: Int) {
        let seed = testSeed(0xc0ffee) ^ UInt64(length)
        var rng = SplitMix64(seed: seed)
        let (bytes, digest) = Self.chunk(length, seed: seed)
        let pieces = Self.pieces(bytes, digest)
        #expect(pieces.count == (length + Self.pieceSize - 1) / Self.pieceSize)
        #expect(pieces.dropLast().allSatisfy { $0.payload.readableBytes == Self.pieceSize })
        var assembly = ChunkAssembly(digest: digest, length: length, pieceSize: Self.pieceSize)
        for piece in (pieces + pieces.prefix(3)).shuffled(using: &rng) { assembly.add(piece) }
        #expect(assembly.isComplete, "seed \(seed)")
        #expect(assembly.contents == bytes, "seed \(seed)")
    }

    @Test("a piece of another shape or chunk is refused")
    func mismatchedPiecesAreRefused() {
        let (bytes, digest) = Self.chunk(5000, seed: 1)
        var assembly = ChunkAssembly(digest: digest, length: 5000, pieceSize: Self.pieceSize)
        let piece = Self.pieces(bytes, digest)[0]
        let added = assembly.add(piece), again = assembly.add(piece)
        #expect(added && !again, "a duplicate is refused")
        let foreign = assembly.add(Self.pieces(bytes, SHA256Digest.hashing([1]))[2])
        #expect(!foreign, "another chunk's piece")
        let longer = assembly.add(
            ChunkPiece(
                digest: digest, chunkLength: 5001, pieceSize: Self.pieceSize, index: 2,
                payload: ByteBuffer(bytes: [UInt8](repeating: 0, count: Self.pieceSize))))
        #expect(!longer, "another chunk length")
        #expect(assembly.missing.held == 4)
    }

    @Test("the assembler asks again only for the pieces that did not come, backing off while nothing comes")
    func reasksOnlyMissing() throws {
        let (bytes, digest) = Self.chunk(262_144, seed: 2)
        var assembler = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        let begun = assembler.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(0))
        let first = try #require(begun)
        #expect(first.missing == nil && first.pieceSize == Self.pieceSize)
        let pieces = Self.pieces(bytes, digest)
        let lost: Set<Int> = [0, 17, 100, pieces.count - 1]
        // The holder answers in 20 ms, so the silence before asking again is 40 ms.
        for piece in pieces where !lost.contains(piece.index) {
            let result = assembler.onPiece(piece, from: Self.holder, now: Self.at(20))
            #expect(result == .accepted)
        }
        let early = assembler.onTick(now: Self.at(55))
        #expect(early.isEmpty, "not quiet long enough")
        let again = assembler.onTick(now: Self.at(61))
        #expect(again.count == 1 && again[0].peer == Self.holder)
        let missing = try #require(again[0].want.missing)
        #expect(Set((0..<missing.count).filter(missing.contains)) == lost)
        // Nothing comes: the next ask waits twice as long.
        let backedOff = assembler.onTick(now: Self.at(135)), later = assembler.onTick(now: Self.at(142))
        #expect(backedOff.isEmpty && later.count == 1)
        #expect(assembler.reasks == 2)
        // Resending only what was asked completes the chunk.
        var result: ChunkAssembler.PieceResult = .accepted
        for piece in Self.pieces(bytes, digest, only: missing) {
            result = assembler.onPiece(piece, from: Self.other, now: Self.at(150))
        }
        #expect(
            result == .complete(bytes: bytes, contributors: [Self.holder, Self.other], stillSending: [Self.holder]),
            "asked again, the holder may have pieces queued twice")
        #expect(assembler.activeCount == 0 && assembler.nextDeadline == nil)
    }

    @Test("before a holder's first answer the assembler waits longer; then three times its answer time")
    func firstPieceWait() throws {
        let (bytes, digest) = Self.chunk(5000, seed: 4)
        var assembler = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        _ = assembler.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(0))
        let early = assembler.onTick(now: Self.at(200)), due = assembler.onTick(now: Self.at(251))
        #expect(early.isEmpty && due.count == 1 && due.first?.want.missing == nil)
        for piece in Self.pieces(bytes, digest) { _ = assembler.onPiece(piece, from: Self.holder, now: Self.at(260)) }
        // Answered 260 ms after the want: the next chunk from it is asked again after 780 ms.
        let next = SHA256Digest.hashing([42])
        _ = assembler.begin(next, length: 5000, from: Self.holder, now: Self.at(1000))
        let before = assembler.onTick(now: Self.at(1700)), after = assembler.onTick(now: Self.at(1781))
        #expect(before.isEmpty && after.count == 1)
    }

    @Test("a round trip is measured only from a holder with nothing of ours queued, and never from a want sent twice")
    func roundTripSamples() throws {
        var assembler = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        let chunks = (0..<6).map { Self.chunk(5000, seed: 40 + UInt64($0)) }
        func firstPiece(_ index: Int, from holder: NodeID, at milliseconds: Int) -> Duration? {
            _ = assembler.onPiece(
                Self.pieces(chunks[index].bytes, chunks[index].digest)[0], from: holder, now: Self.at(milliseconds))
            return assembler.takeRoundTripSample()
        }
        // The holder is idle for the first want; the second goes behind the first chunk's pieces.
        _ = assembler.begin(chunks[0].digest, length: 5000, from: Self.holder, now: Self.at(0))
        _ = assembler.begin(chunks[1].digest, length: 5000, from: Self.holder, now: Self.at(1))
        #expect(firstPiece(0, from: Self.holder, at: 10) == .milliseconds(10))
        #expect(firstPiece(1, from: Self.holder, at: 900) == nil, "queued behind our own pieces at its pace")
        #expect(assembler.takeRoundTripSample() == nil, "taken once")
        // Another holder, idle: its first piece is a round trip. The one after it, widened to the
        // busy holder, is not.
        _ = assembler.begin(chunks[2].digest, length: 5000, from: Self.other, now: Self.at(1000))
        _ = assembler.begin(chunks[3].digest, length: 5000, from: Self.other, now: Self.at(1000))
        #expect(firstPiece(2, from: Self.other, at: 1030) == .milliseconds(30))
        _ = assembler.begin(chunks[3].digest, length: 5000, from: Self.holder, now: Self.at(1040))
        #expect(firstPiece(3, from: Self.holder, at: 1050) == nil)
        // A chunk widened to an idle holder is timed from that holder's own want; should that
        // holder answer busy, the first holder's piece (it was not idle) is still no sample.
        let third = NodeID(high: 3, low: 3), fourth = NodeID(high: 4, low: 4)
        _ = assembler.begin(chunks[4].digest, length: 5000, from: Self.holder, now: Self.at(2000))
        _ = assembler.begin(chunks[4].digest, length: 5000, from: third, now: Self.at(2500))
        #expect(firstPiece(4, from: third, at: 2520) == .milliseconds(20))
        _ = assembler.begin(chunks[5].digest, length: 5000, from: Self.holder, now: Self.at(3000))
        _ = assembler.begin(chunks[5].digest, length: 5000, from: fourth, now: Self.at(3500))
        assembler.onAbsent(chunks[5].digest, from: fourth)
        #expect(firstPiece(5, from: Self.holder, at: 3600) == nil, "timed from the other holder's want")
        // A want asked again: which one the piece answers is unknown.
        let lone = Self.chunk(5000, seed: 50)
        var fresh = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        _ = fresh.begin(lone.digest, length: 5000, from: Self.holder, now: Self.at(0))
        #expect(fresh.onTick(now: Self.at(251)).count == 1)
        _ = fresh.onPiece(Self.pieces(lone.bytes, lone.digest)[0], from: Self.holder, now: Self.at(260))
        #expect(fresh.takeRoundTripSample() == nil)
    }

    @Test("unasked pieces are dropped; a second holder is asked only for what is missing; memory is bounded")
    func boundsAndSecondHolder() throws {
        let (bytes, digest) = Self.chunk(10_000, seed: 3)
        var assembler = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        let unasked = assembler.onPiece(Self.pieces(bytes, digest)[0], from: Self.holder, now: Self.at(0))
        #expect(unasked == .unsolicited)
        _ = assembler.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(0))
        _ = assembler.onPiece(Self.pieces(bytes, digest)[0], from: Self.holder, now: Self.at(1))
        let widened = assembler.begin(digest, length: bytes.count, from: Self.other, now: Self.at(2))
        let second = try #require(widened)
        #expect(second.missing?.held == 9 && second.missing?.contains(0) == false)
        // Absent: that holder is asked no more; with no holder left nothing is asked.
        assembler.onAbsent(digest, from: Self.other)
        assembler.removeHolder(Self.holder)
        let nobodyAsked = assembler.onTick(now: Self.at(1000))
        #expect(nobodyAsked.isEmpty)
        #expect(assembler.isDownloading(digest), "the pieces wait for the next holder")
        _ = assembler.onTick(now: Self.at(31_002))
        #expect(!assembler.isDownloading(digest), "abandoned after 30 s of silence")

        var small = ChunkAssembler.Settings(pieceSize: Self.pieceSize)
        small.maxDownloads = 2
        var bounded = ChunkAssembler(settings: small)
        let wants = (0..<3).map {
            bounded.begin(SHA256Digest.hashing([UInt8($0)]), length: 1000, from: Self.holder, now: .zero)
        }
        #expect(wants.map { $0 != nil } == [true, true, false])
    }

    @Test("a whole chunk names whoever may still have pieces of it queued: every holder asked, none for one asked once")
    func wholeChunksNameTheHoldersToCancel() throws {
        let (bytes, digest) = Self.chunk(20 * Self.pieceSize, seed: 5)
        let pieces = Self.pieces(bytes, digest)
        // End game: a second holder asked for what is missing; both send until told.
        var assembler = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        _ = assembler.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(0))
        for piece in pieces[0..<4] { _ = assembler.onPiece(piece, from: Self.holder, now: Self.at(20)) }
        _ = assembler.begin(digest, length: bytes.count, from: Self.other, now: Self.at(21))
        var result: ChunkAssembler.PieceResult = .accepted
        for piece in pieces[4...] { result = assembler.onPiece(piece, from: Self.other, now: Self.at(30)) }
        #expect(
            result
                == .complete(
                    bytes: bytes, contributors: [Self.holder, Self.other], stillSending: [Self.holder, Self.other]))

        // One holder asked once sent each piece once, the last one last: nobody to tell.
        var single = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        _ = single.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(0))
        var last: ChunkAssembler.PieceResult = .accepted
        for piece in pieces { last = single.onPiece(piece, from: Self.holder, now: Self.at(20)) }
        #expect(last == .complete(bytes: bytes, contributors: [Self.holder], stillSending: []))
        // Given up before it is whole: whoever was asked is still sending.
        _ = single.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(30))
        #expect(single.cancel(digest) == [Self.holder])
        #expect(single.cancel(digest) == [], "nothing open")

        // A holder that answered busy to a later want still hears the cancel: its first pieces
        // may still be queued. Pieces of a member never asked are placed, but are no progress.
        var busy = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        _ = busy.begin(digest, length: bytes.count, from: Self.holder, now: Self.at(0))
        _ = busy.onPiece(pieces[0], from: Self.other, now: Self.at(5))
        #expect(busy.lastAskedPiece(of: digest) == nil, "a stranger's piece kept the fetch alive")
        _ = busy.onPiece(pieces[1], from: Self.holder, now: Self.at(6))
        #expect(busy.lastAskedPiece(of: digest) == Self.at(6))
        busy.onAbsent(digest, from: Self.holder)
        #expect(busy.cancel(digest) == [Self.holder])
    }

    @Test("a piece claiming another chunk length than the manifest's is refused (no oversized buffers)")
    func claimedLengthMustMatch() {
        let (bytes, digest) = Self.chunk(5000, seed: 5)
        var assembler = ChunkAssembler(settings: .init(pieceSize: Self.pieceSize))
        _ = assembler.begin(digest, length: 5000, from: Self.holder, now: .zero)
        let huge = ChunkPiece(
            digest: digest, chunkLength: ChunkPiece.maxChunkLength, pieceSize: Self.pieceSize, index: 0,
            payload: ByteBuffer(bytes: [UInt8](repeating: 0, count: Self.pieceSize)))
        let refused = assembler.onPiece(huge, from: Self.holder, now: .zero)
        let accepted = assembler.onPiece(Self.pieces(bytes, digest)[0], from: Self.holder, now: .zero)
        #expect(refused == .duplicate && accepted == .accepted)
    }

    @Test("wire: a piece whose payload does not fit its index, or an oversized chunk, does not decode")
    func pieceDecodingIsStrict() {
        let digest = SHA256Digest.hashing([1])
        func decode(_ piece: ChunkPiece, trim: Int = 0, pad: Int = 0) -> Result<Frame, WireError> {
            var buffer = ByteBuffer()
            piece.encode(into: &buffer)
            buffer.moveWriterIndex(to: buffer.writerIndex - trim)
            buffer.writeRepeatingByte(0, count: pad)
            var framed = ByteBuffer()
            framed.writeInteger(FrameType.chunkPiece.rawValue)
            framed.writeInteger(UInt16(buffer.readableBytes))
            framed.writeBuffer(&buffer)
            return FrameCodec.decodeOne(&framed)
        }
        let good = ChunkPiece(
            digest: digest, chunkLength: 2000, pieceSize: 1000, index: 1,
            payload: ByteBuffer(bytes: [UInt8](repeating: 7, count: 1000)))
        #expect(decode(good) == .success(.chunkPiece(good)))
        #expect(decode(good, trim: 1) == .failure(.invalidField(what: "piece length")))
        #expect(decode(good, pad: 1) == .failure(.invalidField(what: "piece length")))
        var pastEnd = good
        pastEnd.index = 2
        #expect(decode(pastEnd) == .failure(.invalidField(what: "piece")))
        var huge = good
        huge.chunkLength = ChunkPiece.maxChunkLength + 1
        #expect(decode(huge) == .failure(.invalidField(what: "piece")))
    }
}

@Suite("Recently served chunks")
struct RecentChunksTests {
    static func chunk(_ byte: UInt8) -> (SHA256Digest, ByteBuffer) {
        (SHA256Digest.hashing([byte]), ByteBuffer(bytes: [UInt8](repeating: byte, count: 64)))
    }

    @Test("keeps the newest chunks up to its capacity; the oldest goes first; an update is not a second entry")
    func boundedOldestFirst() {
        var recent = RecentChunks(capacity: 2)
        let (a, aBytes) = Self.chunk(1), (b, bBytes) = Self.chunk(2), (c, cBytes) = Self.chunk(3)
        recent.insert(aBytes, for: a)
        recent.insert(bBytes, for: b)
        recent.insert(aBytes, for: a)
        #expect(recent[a] == aBytes && recent[b] == bBytes)
        recent.insert(cBytes, for: c)
        #expect(recent[a] == nil, "the oldest chunk stays past the capacity")
        #expect(recent[b] == bBytes && recent[c] == cBytes)
    }

    @Test("nothing is served from it after removeAll (an attachment was removed)")
    func removeAllForgets() {
        var recent = RecentChunks(capacity: 4)
        let (a, aBytes) = Self.chunk(1)
        recent.insert(aBytes, for: a)
        recent.removeAll()
        #expect(recent[a] == nil)
        recent.insert(aBytes, for: a)
        #expect(recent[a] == aBytes)
    }
}
