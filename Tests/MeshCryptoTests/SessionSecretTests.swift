import Testing
@testable import MeshCrypto

@Suite struct SessionSecretTests {
    @Test func mustBe32Bytes() {
        for length in [0, 16, 31, 33] {
            #expect(throws: MeshCryptoError.invalidKeyLength(what: "session secret", expected: 32, actual: length)) {
                try SessionSecret(bytes: [UInt8](repeating: 0, count: length))
            }
        }
    }

    @Test func generatedSecretsDiffer() {
        let secrets = (0..<16).map { _ in SessionSecret.generate() }
        #expect(Set(secrets.map { Hex.encode($0.bytes) }).count == 16)
        #expect(secrets.allSatisfy { $0.bytes.count == SessionSecret.byteCount })
    }

    @Test func purposeKeysAreDistinctAndStable() throws {
        let secret = try SessionSecret(bytes: [UInt8](repeating: 9, count: 32))
        let keys = KeyPurpose.allCases.map { secret.key(for: $0) }
        #expect(Set(keys.map { Hex.encode($0) }).count == KeyPurpose.allCases.count)
        #expect(keys.allSatisfy { $0.count == 32 })
        #expect(keys == KeyPurpose.allCases.map { secret.key(for: $0) })
        #expect(secret.key(for: .hello, length: 16).count == 16)
        #expect(secret.key(for: .hello, length: 64).count == 64)
        // None of them is the secret itself.
        #expect(!keys.contains(secret.bytes))
    }

    @Test func sessionIDNamesTheSession() throws {
        let a = try SessionSecret(bytes: [UInt8](repeating: 1, count: 32))
        let b = try SessionSecret(bytes: [UInt8](repeating: 2, count: 32))
        #expect(a.sessionID == a.sessionID)
        #expect(a.sessionID != b.sessionID)
        #expect(a.sessionID == SessionID(bytes: a.key(for: .sessionID, length: 16).prefix(8)))
    }

    @Test func sessionIDDescriptionIs16HexDigits() {
        #expect(SessionID(value: 0).description == "0000000000000000")
        #expect(SessionID(value: 1).description == "0000000000000001")
        #expect(SessionID(value: .max).description == "ffffffffffffffff")
        #expect(SessionID(bytes: [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]).value == 0xdead_beef_0000_0001)
        #expect(SessionID(bytes: [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 0xff]).value == 0xdead_beef_0000_0001)
    }

    @Test func errorsReadAsSentences() {
        #expect(
            MeshCryptoError.invalidKeyLength(what: "session secret", expected: 32, actual: 3).description
                == "session secret must be 32 bytes, got 3")
        #expect(MeshCryptoError.invalidAddress("x").description.contains("HOST:PORT"))
    }

    @Test func secureRandomGivesTheCountAskedFor() {
        #expect(SecureRandom.bytes(0).isEmpty)
        #expect(SecureRandom.bytes(-1).isEmpty)
        #expect(SecureRandom.bytes(33).count == 33)
        #expect(SecureRandom.uint64() != SecureRandom.uint64() || SecureRandom.uint64() != SecureRandom.uint64())
        var rng = SodiumRandomNumberGenerator()
        #expect(Set((0..<8).map { _ in rng.next() }).count > 1)
    }
}
