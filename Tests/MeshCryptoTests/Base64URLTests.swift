import Testing
@testable import MeshCrypto

@Suite struct Base64URLTests {
    static let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    @Test func rfc4648VectorsWithoutPadding() {
        let vectors = [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
    }

    @Test func usesTheURLSafeAlphabet() {
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xfb, 0xff])
        #expect(Base64URL.decode("+/8") == nil)
    }

    @Test func rejectsPaddingImpossibleLengthsAndNonCanonicalText() {
        #expect(Base64URL.decode("Zg==") == nil)
        #expect(Base64URL.decode("Z") == nil)
        #expect(Base64URL.decode("Zm9vY") == nil)
        #expect(Base64URL.decode("Zh") == nil)  // same byte as "Zg" with non-zero leftover bits
        #expect(Base64URL.decode("Zm9") == nil)  // "Zm8" with a leftover bit set
        #expect(Base64URL.decode("Zm 9v") == nil)
        #expect(Base64URL.decode("Zm\u{e9}9") == nil)
    }

    @Test func randomBytesRoundTrip() {
        let seed = testSeed(0xb64)
        var rng = SplitMix64(seed: seed)
        for length in 0..<200 {
            let bytes = rng.bytes(length)
            let text = Base64URL.encode(bytes)
            #expect(text.utf8.allSatisfy { Self.alphabet.contains($0) })
            #expect(text.utf8.count == (length * 4 + 2) / 3)
            #expect(Base64URL.decode(text) == bytes, "seed \(seed) length \(length)")
        }
    }
}
