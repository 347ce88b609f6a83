import Testing
@testable import MeshCrypto

@Suite struct PairwiseKeysTests {
    static let secret = try! SessionSecret(bytes: [UInt8](repeating: 0x42, count: 32))

    static func opens(_ sealer: PacketSealer, _ opener: PacketSealer) -> Bool {
        let plaintext = Array("between two members".utf8)
        let sealed = sealer.seal(plaintext, associatedData: [9], nonce: .packetNumber(1))
        return opener.open(sealed, associatedData: [9], nonce: .packetNumber(1)) == plaintext
    }

    @Test func bothSidesDeriveMirroredKeys() throws {
        for _ in 0..<20 {  // both orders of the public keys get exercised
            let a = EphemeralKeyPair.generate()
            let b = EphemeralKeyPair.generate()
            let onA = try #require(PairwiseKeys.derive(session: Self.secret, local: a, peerPublicKey: b.publicKey))
            let onB = try #require(PairwiseKeys.derive(session: Self.secret, local: b, peerPublicKey: a.publicKey))
            #expect(Self.opens(onA.sending, onB.receiving))
            #expect(Self.opens(onB.sending, onA.receiving))
            // One key per direction: what A sends cannot be opened as if B had sent it.
            #expect(!Self.opens(onA.sending, onA.receiving))
            #expect(!Self.opens(onA.sending, onB.sending))
            #expect(!Self.opens(onB.sending, onA.sending))
        }
    }

    @Test func anotherSessionSecretGivesKeysThatDoNotOpen() throws {
        let other = try SessionSecret(bytes: [UInt8](repeating: 0x43, count: 32))
        let a = EphemeralKeyPair.generate()
        let b = EphemeralKeyPair.generate()
        let onA = try #require(PairwiseKeys.derive(session: Self.secret, local: a, peerPublicKey: b.publicKey))
        let onBOther = try #require(PairwiseKeys.derive(session: other, local: b, peerPublicKey: a.publicKey))
        #expect(!Self.opens(onA.sending, onBOther.receiving))
        #expect(!Self.opens(onBOther.sending, onA.receiving))
    }

    @Test func anotherBootGivesKeysThatDoNotOpen() throws {
        let a = EphemeralKeyPair.generate()
        let b1 = EphemeralKeyPair.generate()
        let b2 = EphemeralKeyPair.generate()
        let aToB1 = try #require(PairwiseKeys.derive(session: Self.secret, local: a, peerPublicKey: b1.publicKey))
        let b2FromA = try #require(PairwiseKeys.derive(session: Self.secret, local: b2, peerPublicKey: a.publicKey))
        #expect(!Self.opens(aToB1.sending, b2FromA.receiving))
    }

    @Test func malformedPeerKeysGiveNil() throws {
        let local = EphemeralKeyPair.generate()
        for length in [0, 1, 31, 33, 64] {
            #expect(
                PairwiseKeys.derive(
                    session: Self.secret, local: local,
                    peerPublicKey: [UInt8](repeating: 9, count: length)) == nil, "length \(length)")
        }
        // Low-order points make the shared secret all zeros; libsodium refuses them.
        let zero = [UInt8](repeating: 0, count: 32)
        let one = [1] + [UInt8](repeating: 0, count: 31)
        #expect(PairwiseKeys.derive(session: Self.secret, local: local, peerPublicKey: zero) == nil)
        #expect(PairwiseKeys.derive(session: Self.secret, local: local, peerPublicKey: one) == nil)
        // Our own key echoed back is refused too.
        #expect(PairwiseKeys.derive(session: Self.secret, local: local, peerPublicKey: local.publicKey) == nil)
    }

    @Test func seededKeyPairsAreDeterministic() throws {
        let seed = [UInt8](repeating: 3, count: 32)
        #expect(try EphemeralKeyPair(seed: seed).publicKey == EphemeralKeyPair(seed: seed).publicKey)
        #expect(try EphemeralKeyPair(seed: seed).publicKey.count == EphemeralKeyPair.byteCount)
        #expect(EphemeralKeyPair.generate().publicKey != EphemeralKeyPair.generate().publicKey)
        for length in [0, 31, 33] {
            #expect(throws: MeshCryptoError.invalidKeyLength(what: "kx seed", expected: 32, actual: length)) {
                try EphemeralKeyPair(seed: [UInt8](repeating: 3, count: length))
            }
        }
    }
}
