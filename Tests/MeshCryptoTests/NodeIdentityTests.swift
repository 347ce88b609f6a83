import Testing
@testable import MeshCrypto

@Suite struct NodeIdentityTests {
    static let seed = (0..<32).map { UInt8($0) }

    @Test func seedMustBe32Bytes() {
        for length in [0, 31, 33, 64] {
            #expect(throws: MeshCryptoError.invalidKeyLength(what: "identity seed", expected: 32, actual: length)) {
                try NodeIdentity(seed: [UInt8](repeating: 7, count: length))
            }
        }
    }

    @Test func sameSeedSameIdentity() throws {
        let a = try NodeIdentity(seed: Self.seed)
        let b = try NodeIdentity(seed: Self.seed)
        #expect(a.publicKey == b.publicKey)
        #expect(a.nodeID == b.nodeID)
        #expect(a.sign([1, 2, 3]) == b.sign([1, 2, 3]))  // Ed25519 is deterministic
        var otherSeed = Self.seed
        otherSeed[0] ^= 1
        let c = try NodeIdentity(seed: otherSeed)
        #expect(c.nodeID != a.nodeID)
        #expect(c.publicKey != a.publicKey)
    }

    @Test func nodeIDIsTheFirst16BytesOfSHA256OfThePublicKey() throws {
        let identity = try NodeIdentity(seed: Self.seed)
        let digest = SHA256Digest.hashing(identity.publicKey.bytes).bytes
        #expect(identity.nodeID.bytes == Array(digest.prefix(16)))
    }

    @Test func generatedIdentitiesDiffer() {
        let ids = Set((0..<16).map { _ in NodeIdentity.generate().nodeID })
        #expect(ids.count == 16)
    }

    @Test func signaturesVerifyOnlyForTheRightMessageKeyAndSignature() throws {
        let identity = try NodeIdentity(seed: Self.seed)
        let other = NodeIdentity.generate()
        let message = Array("membership record, incarnation 3".utf8)
        let signature = identity.sign(message)
        #expect(signature.count == NodeIdentity.signatureByteCount)
        #expect(identity.publicKey.isValidSignature(signature, for: message))
        // Wrong message.
        #expect(!identity.publicKey.isValidSignature(signature, for: message + [0]))
        #expect(!identity.publicKey.isValidSignature(signature, for: Array(message.dropLast())))
        #expect(!identity.publicKey.isValidSignature(signature, for: []))
        // Wrong key.
        #expect(!other.publicKey.isValidSignature(signature, for: message))
        // Another key's signature over the same message.
        #expect(!identity.publicKey.isValidSignature(other.sign(message), for: message))
        // Every flipped bit of the signature.
        for bit in 0..<(signature.count * 8) {
            var damaged = signature
            damaged[bit / 8] ^= 1 << (bit % 8)
            #expect(!identity.publicKey.isValidSignature(damaged, for: message), "bit \(bit)")
        }
        // Wrong lengths are refused, not read past.
        #expect(!identity.publicKey.isValidSignature([], for: message))
        #expect(!identity.publicKey.isValidSignature(Array(signature.dropLast()), for: message))
        #expect(!identity.publicKey.isValidSignature(signature + [0], for: message))
    }

    @Test func emptyMessagesCanBeSigned() throws {
        let identity = try NodeIdentity(seed: Self.seed)
        let signature = identity.sign([])
        #expect(identity.publicKey.isValidSignature(signature, for: []))
        #expect(!identity.publicKey.isValidSignature(signature, for: [0]))
    }

    @Test func publicSigningKeyMustBe32Bytes() throws {
        #expect(throws: MeshCryptoError.invalidKeyLength(what: "signing public key", expected: 32, actual: 31)) {
            try PublicSigningKey(bytes: [UInt8](repeating: 0, count: 31))
        }
        let identity = try NodeIdentity(seed: Self.seed)
        let copy = try PublicSigningKey(bytes: identity.publicKey.bytes)
        #expect(copy == identity.publicKey)
        #expect(copy.nodeID == identity.nodeID)
    }
}
