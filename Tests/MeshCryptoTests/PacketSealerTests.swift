import Testing
@testable import MeshCrypto

@Suite struct PacketSealerTests {
    static let key = (0..<32).map { UInt8($0 ^ 0x5a) }

    @Test func rejectsKeysOfTheWrongLength() {
        for length in [0, 16, 31, 33, 64] {
            #expect(throws: MeshCryptoError.invalidKeyLength(what: "packet key", expected: 32, actual: length)) {
                try PacketSealer(key: [UInt8](repeating: 1, count: length))
            }
        }
    }

    @Test func roundTripsEveryLengthUpToAFewBlocks() throws {
        let sealer = try PacketSealer(key: Self.key)
        var rng = SplitMix64(seed: testSeed(0x5ea1))
        for length in 0..<300 {
            let plaintext = rng.bytes(length)
            let ad = rng.bytes(length % 50)
            let nonce = PacketNonce.packetNumber(UInt64(length))
            let sealed = sealer.seal(plaintext, associatedData: ad, nonce: nonce)
            #expect(sealed.count == length + PacketSealer.tagByteCount)
            #expect(sealer.open(sealed, associatedData: ad, nonce: nonce) == plaintext)
        }
    }

    @Test func opensOnlyWithTheSameKeyNonceAndAssociatedData() throws {
        let sealer = try PacketSealer(key: Self.key)
        var otherKey = Self.key
        otherKey[31] ^= 1
        let other = try PacketSealer(key: otherKey)
        let plaintext = Array("hello, mesh".utf8)
        let ad = Array("header".utf8)
        let sealed = sealer.seal(plaintext, associatedData: ad, nonce: .packetNumber(7))
        #expect(sealer.open(sealed, associatedData: ad, nonce: .packetNumber(7)) == plaintext)
        #expect(other.open(sealed, associatedData: ad, nonce: .packetNumber(7)) == nil)
        #expect(sealer.open(sealed, associatedData: ad, nonce: .packetNumber(8)) == nil)
        #expect(sealer.open(sealed, associatedData: Array("Header".utf8), nonce: .packetNumber(7)) == nil)
        #expect(sealer.open(sealed, associatedData: [], nonce: .packetNumber(7)) == nil)
        #expect(sealer.open(sealed + [0], associatedData: ad, nonce: .packetNumber(7)) == nil)
        #expect(sealer.open(Array(sealed.dropLast()), associatedData: ad, nonce: .packetNumber(7)) == nil)
    }

    @Test func everyFlippedBitFailsToOpen() throws {
        let sealer = try PacketSealer(key: Self.key)
        let ad: [UInt8] = [1, 2, 3, 4]
        let sealed = sealer.seal(Array("tamper".utf8), associatedData: ad, nonce: .packetNumber(1))
        for bit in 0..<(sealed.count * 8) {
            var damaged = sealed
            damaged[bit / 8] ^= 1 << (bit % 8)
            #expect(sealer.open(damaged, associatedData: ad, nonce: .packetNumber(1)) == nil, "bit \(bit)")
        }
        for bit in 0..<(ad.count * 8) {
            var damaged = ad
            damaged[bit / 8] ^= 1 << (bit % 8)
            #expect(sealer.open(sealed, associatedData: damaged, nonce: .packetNumber(1)) == nil, "ad bit \(bit)")
        }
    }

    @Test func shorterThanATagNeverOpens() throws {
        let sealer = try PacketSealer(key: Self.key)
        for length in 0..<PacketSealer.tagByteCount {
            #expect(sealer.open([UInt8](repeating: 0, count: length), nonce: .packetNumber(0)) == nil)
        }
        // Raw form: too small an output buffer is refused rather than overrun.
        let sealed = sealer.seal([1, 2, 3, 4], nonce: .packetNumber(0))
        var output = [UInt8](repeating: 0, count: 3)
        let length = sealed.withUnsafeBytes { ct in
            output.withUnsafeMutableBytes { out in
                sealer.open(
                    ct, associatedData: UnsafeRawBufferPointer(start: nil, count: 0), nonce: .packetNumber(0), into: out
                )
            }
        }
        #expect(length == nil)
    }

    @Test func packetNumberNonceIsSixteenZerosThenBigEndianNumber() {
        #expect(PacketNonce.packetNumber(0).raw == [UInt8](repeating: 0, count: 24))
        #expect(
            PacketNonce.packetNumber(0x0102_0304_0506_0708).raw
                == [UInt8](repeating: 0, count: 16) + [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(
            PacketNonce.packetNumber(.max).raw == [UInt8](repeating: 0, count: 16) + [UInt8](repeating: 0xff, count: 8))
        #expect(PacketNonce(raw: PacketNonce.packetNumber(42).raw) == .packetNumber(42))
        #expect(PacketNonce.packetNumber(1) != .packetNumber(2))
    }

    @Test func rawNonceMustBe24Bytes() throws {
        #expect(PacketNonce(raw: [UInt8](repeating: 0, count: 23)) == nil)
        #expect(PacketNonce(raw: [UInt8](repeating: 0, count: 25)) == nil)
        #expect(PacketNonce(raw: [UInt8]()) == nil)
        let bytes = Array(UInt8(100)..<UInt8(124))
        #expect(try #require(PacketNonce(raw: bytes)).raw == bytes)
        #expect(try #require(PacketNonce(raw: bytes[...])).raw == bytes)
    }

    @Test func randomNoncesDiffer() {
        let nonces = (0..<64).map { _ in PacketNonce.random().raw }
        #expect(Set(nonces.map { Hex.encode($0) }).count == nonces.count)
        #expect(nonces.allSatisfy { $0.count == 24 })
    }
}
