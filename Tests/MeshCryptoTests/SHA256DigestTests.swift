import Testing
@testable import MeshCrypto

@Suite struct SHA256DigestTests {
    static let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

    @Test func bytesHexAndWordsAgree() throws {
        let digest = try #require(SHA256Digest(hex: Self.abc))
        #expect(digest.hex == Self.abc)
        #expect(digest.description == Self.abc)
        #expect(digest.bytes == hex(Self.abc))
        #expect(digest.w0 == 0xba78_16bf_8f01_cfea)
        #expect(digest.w3 == 0xb410_ff61_f200_15ad)
        #expect(SHA256Digest(bytes: digest.bytes) == digest)
        #expect(SHA256Digest(hex: Self.abc.uppercased()) == digest)
        #expect(SHA256Digest.hashing(Array("abc".utf8)) == digest)
    }

    @Test func rejectsWrongLengths() {
        #expect(SHA256Digest(bytes: [UInt8](repeating: 0, count: 31)) == nil)
        #expect(SHA256Digest(bytes: [UInt8](repeating: 0, count: 33)) == nil)
        #expect(SHA256Digest(hex: String(Self.abc.dropLast())) == nil)
        #expect(SHA256Digest(hex: Self.abc + "00") == nil)
        #expect(SHA256Digest(hex: String(Self.abc.dropLast()) + "g") == nil)
    }

    @Test func rawBufferAndArrayHashingAgree() {
        let bytes = Array("the quick brown fox".utf8)
        let viaBuffer = bytes.withUnsafeBytes { SHA256Digest.hashing($0) }
        #expect(viaBuffer == SHA256Digest.hashing(bytes))
    }

    @Test func hasherMatchesOneShotHashingForAnySplit() {
        var rng = SplitMix64(seed: testSeed(0x5a256))
        let data = rng.bytes(1000)
        let expected = SHA256Digest.hashing(data)
        for split in [0, 1, 63, 64, 65, 500, 999, 1000] {
            var hasher = SHA256Hasher()
            hasher.update(Array(data[..<split]))
            data[split...].withUnsafeBytes { hasher.update($0) }
            #expect(hasher.finalize() == expected, "split \(split)")
        }
        #expect(SHA256Hasher().finalize() == SHA256Digest.hashing([]))
    }

    @Test func orderIsTheOrderOfTheBytes() {
        var rng = SplitMix64(seed: testSeed(0x0d))
        let digests = (0..<300).map { _ in SHA256Digest(bytes: rng.bytes(32))! }
        for (a, b) in zip(digests, digests.dropFirst()) {
            #expect((a < b) == a.bytes.lexicographicallyPrecedes(b.bytes))
        }
        let low = SHA256Digest(bytes: [UInt8](repeating: 0, count: 31) + [1])!
        let high = SHA256Digest(bytes: [1] + [UInt8](repeating: 0, count: 31))!
        #expect(low < high)
    }
}
