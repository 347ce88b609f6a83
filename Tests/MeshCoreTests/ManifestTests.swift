import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The attachment manifest: canonical encoding, id, validation of what peers send.
@Suite("Manifest")
struct ManifestTests {
    static let headerLength = Array("groupmesh manifest v1".utf8).count + 8 + 4 + 4

    @Test(
        "encode then decode gives the same manifest",
        arguments: [
            (0, 4), (1, 4), (3, 4), (4, 4), (5, 4), (1000, 7), (4096, 1024), (4097, 1024), (70_000, 65_536),
        ])
    func roundTrip(size: Int, chunkSize: Int) throws {
        var rng = SplitMix64(seed: UInt64(size * 31 + chunkSize))
        let manifest = JournalFixtures.manifest(of: rng.bytes(size), chunkSize: chunkSize)
        #expect(manifest.chunks.count == Int(Manifest.chunkCount(size: UInt64(size), chunkSize: chunkSize)))
        let encoded = manifest.encoded
        #expect(encoded.count == Self.headerLength + 32 * manifest.chunks.count)
        let decoded = try Manifest(decoding: encoded)
        #expect(decoded == manifest)
        #expect(decoded.id == manifest.id)
        #expect(decoded.encoded == encoded)
    }

    @Test("the encoding is pinned: domain, big-endian size, chunk size and count, then the hashes")
    func encodingLayout() {
        let chunk = SHA256Digest.hashing([1, 2, 3])
        let manifest = Manifest(size: 3, chunkSize: 4, chunks: [chunk])
        let expected =
            Array("groupmesh manifest v1".utf8) + [0, 0, 0, 0, 0, 0, 0, 3] + [0, 0, 0, 4] + [0, 0, 0, 1]
            + chunk.bytes
        #expect(manifest.encoded == expected)
        #expect(manifest.id == SHA256Digest.hashing(expected))
    }

    @Test("the id depends on the chunks only: the same bytes are the same attachment, whatever the metadata")
    func idIgnoresMetadata() {
        var rng = SplitMix64(seed: 0x1d)
        let bytes = rng.bytes(10_000)
        let first = JournalFixtures.manifest(of: bytes, chunkSize: 1024)
        let second = JournalFixtures.manifest(of: bytes, chunkSize: 1024)
        #expect(first.id == second.id)

        // Two members add the same bytes with different metadata: one attachment.
        let alice = SimulationAuthority(index: 1), bob = SimulationAuthority(index: 2)
        var state = JournalState()
        let a = state.makeAdd(
            first.id, size: first.size, chunkCount: first.chunks.count,
            metadata: Array(#"{"name":"a.txt"}"#.utf8), authority: alice)
        let b = state.makeAdd(
            second.id, size: second.size, chunkCount: second.chunks.count,
            metadata: Array(#"{"name":"b.txt"}"#.utf8), authority: bob)
        #expect(state.apply(a, authority: alice) == true)
        #expect(state.apply(b, authority: bob) == true)
        #expect(state.presentContents == [first.id])

        // Any change to the content, or to how it is cut, is another attachment.
        var changed = bytes
        changed[5000] ^= 1
        #expect(JournalFixtures.manifest(of: changed, chunkSize: 1024).id != first.id)
        #expect(JournalFixtures.manifest(of: bytes, chunkSize: 2048).id != first.id)
        var swapped = first
        swapped.chunks.swapAt(0, 1)
        #expect(swapped.id != first.id, "chunk order is part of the id")
    }

    @Test("decode rejects a wrong domain")
    func rejectsWrongDomain() {
        let valid = JournalFixtures.manifest(of: [UInt8](repeating: 7, count: 100), chunkSize: 64).encoded
        var bad = valid
        bad[0] ^= 0x20
        #expect(throws: WireError.self) { try Manifest(decoding: bad) }
        var version = valid
        version[Array("groupmesh manifest v".utf8).count] = UInt8(ascii: "2")
        #expect(throws: WireError.invalidField(what: "manifest domain")) { try Manifest(decoding: version) }
        #expect(throws: WireError.self) { try Manifest(decoding: Array("not a manifest at all, really".utf8)) }
    }

    @Test("decode rejects a chunk count that does not match size and chunk size")
    func rejectsCountMismatch() {
        let hash = SHA256Digest.hashing([0])
        // 10 bytes in 4-byte chunks is 3 chunks.
        for count in [0, 1, 2, 4] {
            let bytes = Manifest(size: 10, chunkSize: 4, chunks: Array(repeating: hash, count: count)).encoded
            #expect(throws: WireError.invalidField(what: "manifest chunk count"), "count \(count)") {
                try Manifest(decoding: bytes)
            }
        }
        #expect(throws: Never.self) {
            try Manifest(decoding: Manifest(size: 10, chunkSize: 4, chunks: [hash, hash, hash]).encoded)
        }
        // Size 0 has no chunks.
        let emptyWithChunk = Manifest(size: 0, chunkSize: 4, chunks: [hash]).encoded
        #expect(throws: WireError.invalidField(what: "manifest chunk count")) { try Manifest(decoding: emptyWithChunk) }
    }

    @Test("decode rejects truncated input at every length, and trailing bytes")
    func rejectsTruncatedAndTrailing() {
        let valid = JournalFixtures.manifest(of: [UInt8](repeating: 9, count: 300), chunkSize: 100).encoded
        for length in 0..<valid.count {
            #expect(throws: WireError.self, "length \(length)") { try Manifest(decoding: Array(valid.prefix(length))) }
        }
        // Cut inside the chunk hashes: reported as truncated, not as a negative trailing count.
        #expect(throws: WireError.truncated(what: "chunk hashes")) { try Manifest(decoding: Array(valid.dropLast(1))) }
        #expect(throws: WireError.trailingBytes(1)) { try Manifest(decoding: valid + [0]) }
        #expect(throws: WireError.trailingBytes(32)) {
            try Manifest(decoding: valid + [UInt8](repeating: 0, count: 32))
        }
    }

    @Test("decode rejects chunk size 0 and over the maximum; the maximum itself is fine")
    func rejectsChunkSize() throws {
        let hash = SHA256Digest.hashing([1])
        #expect(throws: WireError.invalidField(what: "manifest chunk size")) {
            try Manifest(decoding: Manifest(size: 0, chunkSize: 0, chunks: []).encoded)
        }
        #expect(throws: WireError.invalidField(what: "manifest chunk size")) {
            try Manifest(decoding: Manifest(size: 5, chunkSize: 0, chunks: [hash]).encoded)
        }
        let over = Manifest.maxChunkSize + 1
        #expect(throws: WireError.invalidField(what: "manifest chunk size")) {
            try Manifest(decoding: Manifest(size: UInt64(over), chunkSize: over, chunks: [hash]).encoded)
        }
        let max = Manifest(
            size: UInt64(Manifest.maxChunkSize) + 1, chunkSize: Manifest.maxChunkSize, chunks: [hash, hash])
        #expect(try Manifest(decoding: max.encoded) == max)
    }

    @Test("a size near 2^64 is refused, never overflows")
    func hugeSizeDoesNotTrap() {
        let hash = SHA256Digest.hashing([2])
        for size in [UInt64.max, UInt64.max - 1, UInt64.max - UInt64(Manifest.maxChunkSize) + 2] {
            for chunkSize in [1, 2, 4096, Manifest.maxChunkSize] {
                let bytes = Manifest(size: size, chunkSize: chunkSize, chunks: [hash]).encoded
                #expect(throws: WireError.self, "size \(size) chunk size \(chunkSize)") {
                    try Manifest(decoding: bytes)
                }
            }
        }
        // The count is still right at the top of the range.
        #expect(Manifest.chunkCount(size: .max, chunkSize: 1) == .max)
        #expect(Manifest.chunkCount(size: .max, chunkSize: 2) == UInt64.max / 2 + 1)
        #expect(
            Manifest.chunkCount(size: .max, chunkSize: Manifest.maxChunkSize) == UInt64.max
                / UInt64(Manifest.maxChunkSize) + 1)
    }

    @Test("chunk lengths: full chunks, then the last partial one; they add up to the size")
    func chunkLengths() {
        let partial = Manifest(size: 10, chunkSize: 4, chunks: Array(repeating: SHA256Digest.hashing([]), count: 3))
        #expect((0..<3).map(partial.length(ofChunk:)) == [4, 4, 2])
        let exact = Manifest(size: 8, chunkSize: 4, chunks: Array(repeating: SHA256Digest.hashing([]), count: 2))
        #expect((0..<2).map(exact.length(ofChunk:)) == [4, 4])
        let single = Manifest(size: 1, chunkSize: Manifest.defaultChunkSize, chunks: [SHA256Digest.hashing([0])])
        #expect(single.length(ofChunk: 0) == 1)

        var rng = SplitMix64(seed: 0xc4)
        for _ in 0..<50 {
            let size = Int.random(in: 1...5000, using: &rng), chunkSize = Int.random(in: 1...700, using: &rng)
            let bytes = rng.bytes(size)
            let manifest = JournalFixtures.manifest(of: bytes, chunkSize: chunkSize)
            let lengths = manifest.chunks.indices.map(manifest.length(ofChunk:))
            #expect(lengths.reduce(0, +) == size, "size \(size) chunk size \(chunkSize)")
            #expect(lengths.dropLast().allSatisfy { $0 == chunkSize })
            #expect(lengths.last! >= 1 && lengths.last! <= chunkSize)
            // Each length is what the chunk hash was computed over.
            let last = manifest.chunks.count - 1
            let tail = Array(bytes[(last * chunkSize)...])
            #expect(tail.count == manifest.length(ofChunk: last))
            #expect(SHA256Digest.hashing(tail) == manifest.chunks[last])
        }
    }

    @Test("an empty attachment has no chunks, round-trips, and has a stable id")
    func emptyAttachment() throws {
        let empty = JournalFixtures.manifest(of: [], chunkSize: Manifest.defaultChunkSize)
        #expect(empty.size == 0)
        #expect(empty.chunks.isEmpty)
        #expect(Manifest.chunkCount(size: 0, chunkSize: 1) == 0)
        #expect(empty.encoded.count == Self.headerLength)
        #expect(try Manifest(decoding: empty.encoded) == empty)
        #expect(empty.id == Manifest(size: 0, chunkSize: Manifest.defaultChunkSize, chunks: []).id)
        // Still one id per chunk size: an empty attachment cut differently is another manifest.
        #expect(empty.id != Manifest(size: 0, chunkSize: 1024, chunks: []).id)
    }

    @Test("random and mutated bytes never trap the decoder; what decodes re-encodes to the same bytes")
    func decodeNeverTraps() {
        let seed = testSeed(0x3a_11fe)
        var rng = SplitMix64(seed: seed)
        let valid = (0..<8).map { n in
            JournalFixtures.manifest(
                of: rng.bytes(Int.random(in: 0...300, using: &rng)), chunkSize: [7, 64, 100, 4096][n % 4]
            ).encoded
        }
        var decoded = 0
        for iteration in 0..<testIterations(20_000) {
            let input: [UInt8]
            if iteration % 3 == 0 {
                input = DecoderPropertyTests.randomInput(using: &rng)
            } else {
                input = DecoderPropertyTests.mutate(valid[iteration % valid.count], using: &rng)
            }
            if let manifest = try? Manifest(decoding: input) {
                decoded += 1
                #expect(manifest.encoded == input, "seed \(seed) iteration \(iteration)")
            }
        }
        #expect(decoded > 0, "some mutations (e.g. of a hash byte) stay valid; seed \(seed)")
    }
}
