import Testing
@testable import MeshCrypto

/// Vectors computed independently of this code base: published test vectors, or Python's
/// hashlib / `cryptography` package (commands quoted beside each vector).
@Suite struct KnownAnswerTests {
    // MARK: XChaCha20-Poly1305-IETF, draft-irtf-cfrg-xchacha-03 Appendix A.3.1

    static let draftKey = hex("808182838485868788898a8b8c8d8e8f 909192939495969798999a9b9c9d9e9f")
    static let draftNonce = hex("404142434445464748494a4b4c4d4e4f5051525354555657")
    static let draftAAD = hex("50515253c0c1c2c3c4c5c6c7")
    static let draftPlaintext = Array(
        "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it."
            .utf8)
    static let draftCiphertext = hex(
        """
        bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb
        731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b452
        2f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff9
        21f9664c97637da9768812f615c68b13b52e
        """)
    static let draftTag = hex("c0875924c1c7987947deafd8780acf49")

    @Test func xchacha20Poly1305SealMatchesDraftVector() throws {
        let sealer = try PacketSealer(key: Self.draftKey)
        let nonce = try #require(PacketNonce(raw: Self.draftNonce))
        #expect(nonce.raw == Self.draftNonce)
        let sealed = sealer.seal(Self.draftPlaintext, associatedData: Self.draftAAD, nonce: nonce)
        #expect(Self.draftPlaintext.count == 114)
        #expect(Hex.encode(sealed) == Hex.encode(Self.draftCiphertext + Self.draftTag))
    }

    @Test func xchacha20Poly1305OpenMatchesDraftVector() throws {
        let sealer = try PacketSealer(key: Self.draftKey)
        let nonce = try #require(PacketNonce(raw: Self.draftNonce))
        let opened = sealer.open(Self.draftCiphertext + Self.draftTag, associatedData: Self.draftAAD, nonce: nonce)
        #expect(opened == Self.draftPlaintext)
        // The vector fails with any other associated data, nonce, or a flipped tag bit.
        #expect(sealer.open(Self.draftCiphertext + Self.draftTag, associatedData: [], nonce: nonce) == nil)
        #expect(
            sealer.open(
                Self.draftCiphertext + Self.draftTag, associatedData: Self.draftAAD,
                nonce: .packetNumber(0x5051525354555657)) == nil)
        var badTag = Self.draftTag
        badTag[15] ^= 0x80
        #expect(sealer.open(Self.draftCiphertext + badTag, associatedData: Self.draftAAD, nonce: nonce) == nil)
    }

    @Test func xchacha20Poly1305RawPointerAPIMatchesDraftVectorInPlace() throws {
        let sealer = try PacketSealer(key: Self.draftKey)
        let nonce = try #require(PacketNonce(raw: Self.draftNonce))
        var buffer = Self.draftPlaintext + [UInt8](repeating: 0, count: PacketSealer.tagByteCount)
        let count = Self.draftPlaintext.count
        let sealedLength = Self.draftAAD.withUnsafeBytes { ad in
            buffer.withUnsafeMutableBytes { whole in
                sealer.seal(
                    UnsafeRawBufferPointer(rebasing: whole[..<count]), associatedData: ad, nonce: nonce, into: whole)
            }
        }
        #expect(sealedLength == count + PacketSealer.tagByteCount)
        #expect(buffer == Self.draftCiphertext + Self.draftTag)
        let openedLength = Self.draftAAD.withUnsafeBytes { ad in
            buffer.withUnsafeMutableBytes { whole in
                sealer.open(UnsafeRawBufferPointer(whole), associatedData: ad, nonce: nonce, into: whole)
            }
        }
        #expect(openedLength == count)
        #expect(Array(buffer.prefix(count)) == Self.draftPlaintext)
    }

    // MARK: KDF — libsodium crypto_kdf_derive_from_key = keyed BLAKE2b
    //
    // python3 -c "import hashlib,struct; print(hashlib.blake2b(b'', digest_size=N, key=bytes(range(32)),
    //     salt=struct.pack('<Q', ID)+b'\0'*8, person=b'GMesh-v1'+b'\0'*8).hexdigest())"

    static let kdfMaster = Array(UInt8(0)...UInt8(31))

    static let kdfVectors: [(id: UInt64, length: Int, expected: String)] = [
        (1, 32, "e41ab6b42a7adb97e42cdafcf19fb8a20513820d0c4c51a55697556a3655f0b1"),
        (2, 32, "3ef87744afa0aed53eefa85ca37d928cee27bc859a61cecb396b6e8d3bda5b34"),
        (3, 32, "86cb1290b9f67013bb8b6523525194abb949a40b7b11911fb11f20ecb1936eb2"),
        (1, 16, "6bfbaec76d5314e2d7b51c91497b2f76"),
        (2, 16, "c43da4924660fc8794f3616f3515e867"),
        (3, 16, "e4f32442df1b68d0cced91cc10e7f383"),
        (
            1, 64,
            "280149926c1e50f6a3867115796dd607ec520eda0c203080dc463f5491e168b5"
                + "755f0e930fef6adb266e0386d0175cb6a868eff5c62a3bd976c3206a469a696a"
        ),
        (
            2, 64,
            "775581f1f03ba690715aac7d90ce60dc9a945b11060de59a51752372c4a414e1"
                + "fec90c2c64cd53065f876642d78e8deaa5b1dca6c6793a72f2c5939248d9eecd"
        ),
        (
            3, 64,
            "7d90e5366f672b6440a2b611b929097b2d15b860f3306f8984a15ca734433897"
                + "075ff0d0a26d5c79581faa1369f1c296fbf7ac27ce15cc87c50aad1ae64945dd"
        ),
        // The subkey id is little-endian in the salt: a big-endian slip changes this one.
        (0xfedc_ba98_7654_3210, 32, "7ed733138f22c12d4b8812affa3403c0d859005ff1e38217164c12d87dcf036d"),
    ]

    @Test func keyDerivationMatchesKeyedBlake2b() {
        for vector in Self.kdfVectors {
            let derived = KeyDerivation.derive(
                from: Self.kdfMaster, subkeyID: vector.id, context: "GMesh-v1",
                length: vector.length)
            #expect(Hex.encode(derived) == vector.expected, "subkey \(vector.id), \(vector.length) bytes")
        }
    }

    @Test func keyDerivationPadsAShortContextWithZeros() {
        // person = b'GM' + 14 zero bytes, salt = pack('<Q', 7) + 8 zero bytes
        let derived = KeyDerivation.derive(from: Self.kdfMaster, subkeyID: 7, context: "GM", length: 32)
        #expect(Hex.encode(derived) == "33235214763314b3888fb3f54dd0b03ce2442e1fb932acf5d03c9228989ffe32")
    }

    @Test func sessionSecretPurposeKeysMatchKeyedBlake2b() throws {
        let secret = try SessionSecret(bytes: Self.kdfMaster)
        #expect(Hex.encode(secret.key(for: .sessionID)) == Self.kdfVectors[0].expected)
        #expect(Hex.encode(secret.key(for: .hello)) == Self.kdfVectors[1].expected)
        #expect(Hex.encode(secret.key(for: .pairwiseBinding)) == Self.kdfVectors[2].expected)
        #expect(Hex.encode(secret.key(for: .pairwiseBinding, length: 64)) == Self.kdfVectors[8].expected)
        // The session id is the first 8 bytes of the 16-byte session-id purpose key.
        #expect(secret.sessionID.value == 0x6bfb_aec7_6d53_14e2)
        #expect(secret.sessionID.description == "6bfbaec76d5314e2")
    }

    @Test func keyPurposeSubkeyIDsAreFixed() {
        // Part of the wire format: changing one changes every key.
        #expect(KeyPurpose.sessionID.rawValue == 1)
        #expect(KeyPurpose.hello.rawValue == 2)
        #expect(KeyPurpose.pairwiseBinding.rawValue == 3)
        #expect(KeyPurpose.epochHandover.rawValue == 4)
        #expect(KeyPurpose.lanDiscovery.rawValue == 5)
        #expect(KeyPurpose.allCases.count == 5)
        #expect(KeyPurpose.context.count == 8)
        #expect(KeyPurpose.context.map { UInt8(bitPattern: $0) } == Array("GMesh-v1".utf8))
    }

    // MARK: SHA-256 (FIPS 180-2 examples)

    @Test func sha256FIPSVectors() {
        #expect(
            SHA256Digest.hashing(Array("abc".utf8)).hex
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            SHA256Digest.hashing([]).hex
                == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            SHA256Digest.hashing(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)).hex
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    @Test func sha256HasherOfAMillionAsInUnevenPieces() {
        var hasher = SHA256Hasher()
        var remaining = 1_000_000
        var piece = 1
        while remaining > 0 {
            let count = min(piece, remaining)
            hasher.update([UInt8](repeating: UInt8(ascii: "a"), count: count))
            remaining -= count
            piece = piece * 3 + 1
        }
        #expect(hasher.finalize().hex == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    // MARK: Ed25519 (RFC 8032 §7.1, tests 1 and 2)

    static let rfc8032: [(seed: String, publicKey: String, message: String, signature: String, nodeID: String)] = [
        (
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            "",
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
                + "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
            // python3: hashlib.sha256(bytes.fromhex(publicKey)).hexdigest()[:32]
            "21fe31dfa154a261626bf854046fd227"
        ),
        (
            "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
            "72",
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
                + "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
            "39f713d0a644253f04529421b9f51b9b"
        ),
    ]

    @Test func ed25519MatchesRFC8032() throws {
        for vector in Self.rfc8032 {
            let identity = try NodeIdentity(seed: hex(vector.seed))
            #expect(Hex.encode(identity.publicKey.bytes) == vector.publicKey)
            let signature = identity.sign(hex(vector.message))
            #expect(Hex.encode(signature) == vector.signature)
            #expect(identity.publicKey.isValidSignature(signature, for: hex(vector.message)))
            #expect(identity.nodeID.hex == vector.nodeID)
            #expect(identity.publicKey.nodeID == identity.nodeID)
        }
    }

    // MARK: crypto_kx + session binding, recomputed in Python
    //
    // sk = blake2b(seed, digest_size=32); pk = X25519(sk); the smaller public key is the client;
    // client rx||tx = blake2b(X25519(sk_c, pk_s) || pk_c || pk_s, digest_size=64);
    // each traffic key = blake2b(kx key, digest_size=32, key=KDF(S, 3)).

    static let seedA = [UInt8](repeating: 0xa0, count: 32)
    static let seedB = [UInt8](repeating: 0xb0, count: 32)
    static let publicA = "d62052fb0bdeb1cb5e1ae5a6b299856b19a6b51f2af7e10ffc053d84a2630909"
    static let publicB = "c08d794e2b647bb5feda48d4bc1cdd5ba51a8cb97abeffc4ceb7039b98da1f79"
    /// B has the smaller public key, so B is crypto_kx's client.
    static let clientSendingKey = "6ac6c1caacbb6e14a2edc8d50befd44f788161e0956fcf234dfb3c20ccc708a7"
    static let clientReceivingKey = "5420aa430d1cd890de26c4c6bea3e3eab9da0cd9b0c9b5bc2152ae19bd30ea10"

    @Test func ephemeralKeyPairFromSeedMatchesX25519() throws {
        #expect(Hex.encode(try EphemeralKeyPair(seed: Self.seedA).publicKey) == Self.publicA)
        #expect(Hex.encode(try EphemeralKeyPair(seed: Self.seedB).publicKey) == Self.publicB)
    }

    @Test func pairwiseKeysMatchIndependentDerivation() throws {
        let secret = try SessionSecret(bytes: Self.kdfMaster)
        let a = try EphemeralKeyPair(seed: Self.seedA)
        let b = try EphemeralKeyPair(seed: Self.seedB)
        let onA = try #require(PairwiseKeys.derive(session: secret, local: a, peerPublicKey: b.publicKey))
        let onB = try #require(PairwiseKeys.derive(session: secret, local: b, peerPublicKey: a.publicKey))
        let clientSending = try PacketSealer(key: hex(Self.clientSendingKey))
        let clientReceiving = try PacketSealer(key: hex(Self.clientReceivingKey))
        // Sealers are equal when they seal the same input to the same bytes.
        let probe = Array("probe".utf8)
        func sameKey(_ x: PacketSealer, _ y: PacketSealer) -> Bool {
            x.seal(probe, nonce: .packetNumber(9)) == y.seal(probe, nonce: .packetNumber(9))
        }
        #expect(sameKey(onB.sending, clientSending))
        #expect(sameKey(onB.receiving, clientReceiving))
        #expect(sameKey(onA.sending, clientReceiving))
        #expect(sameKey(onA.receiving, clientSending))
    }
}
