import MeshCrypto
import NIOCore
import Testing
@testable import MeshCore

@Suite struct DatagramHeaderTests {
    static let nonce = PacketNonce(raw: Array(UInt8(0x40)..<UInt8(0x58)))!

    static func randomHeader(kind: DatagramHeader.KeyKind, using rng: inout SplitMix64) -> DatagramHeader {
        DatagramHeader(
            keyKind: kind, sessionID: SessionID(value: rng.next()), sender: NodeID(high: rng.next(), low: rng.next()),
            bootID: rng.next(), packetNumber: rng.next(),
            helloNonce: kind == .hello ? PacketNonce(raw: rng.bytes(24)) : nil)
    }

    @Test func fixedLengthIs42() {
        #expect(DatagramHeader.fixedLength == 42)
        #expect(DatagramHeader.version == 1)
    }

    @Test(arguments: [DatagramHeader.KeyKind.pairwise, .hello])
    func roundTripsBothKeyKinds(kind: DatagramHeader.KeyKind) {
        var rng = SplitMix64(seed: testSeed(0x4ead) ^ UInt64(kind.rawValue))
        for _ in 0..<200 {
            let header = Self.randomHeader(kind: kind, using: &rng)
            let payload = rng.bytes(Int.random(in: 0...40, using: &rng))
            var encoded = ByteBuffer()
            header.encode(into: &encoded)
            #expect(encoded.readableBytes == header.encodedLength)
            #expect(header.encodedLength == DatagramHeader.fixedLength + (kind == .hello ? 24 : 0))
            encoded.writeBytes(payload)
            #expect(DatagramHeader.decode(&encoded) == .success(header))
            // The sealed payload is left readable, untouched.
            #expect(bytes(encoded) == payload)
        }
    }

    @Test func pairwiseLayoutIsBigEndianAndTheNonceIsThePacketNumber() {
        let header = DatagramHeader(
            keyKind: .pairwise, sessionID: SessionID(value: 0x1122_3344_5566_7788),
            sender: NodeID(high: 0x0102_0304_0506_0708, low: 0x090a_0b0c_0d0e_0f10),
            bootID: 0xa0a1_a2a3_a4a5_a6a7, packetNumber: 0xb0b1_b2b3_b4b5_b6b7)
        var encoded = ByteBuffer()
        header.encode(into: &encoded)
        #expect(
            bytes(encoded)
                == hex("01 00 1122334455667788 0102030405060708090a0b0c0d0e0f10 a0a1a2a3a4a5a6a7 b0b1b2b3b4b5b6b7"))
        #expect(header.nonce == .packetNumber(0xb0b1_b2b3_b4b5_b6b7))
    }

    @Test func helloLayoutCarriesItsNonce() {
        let header = DatagramHeader(
            keyKind: .hello, sessionID: SessionID(value: 1), sender: NodeID(high: 2, low: 3),
            bootID: 4, packetNumber: 5, helloNonce: Self.nonce)
        var encoded = ByteBuffer()
        header.encode(into: &encoded)
        #expect(
            bytes(encoded) == hex(
                "01 01 0000000000000001 00000000000000020000000000000003 0000000000000004 0000000000000005")
                + Self.nonce.raw)
        #expect(header.nonce == Self.nonce)
    }

    @Test(arguments: [DatagramHeader.KeyKind.pairwise, .hello])
    func everyTruncationIsReported(kind: DatagramHeader.KeyKind) {
        var rng = SplitMix64(seed: 7)
        let header = Self.randomHeader(kind: kind, using: &rng)
        var encoded = ByteBuffer()
        header.encode(into: &encoded)
        let full = bytes(encoded)
        for length in 0..<full.count {
            var cut = buffer(Array(full.prefix(length)))
            let expected: WireError =
                length < DatagramHeader.fixedLength
                ? .truncated(what: "datagram header") : .truncated(what: "hello nonce")
            #expect(DatagramHeader.decode(&cut) == .failure(expected), "length \(length)")
        }
    }

    @Test func versionIsCheckedFirst() {
        for version: UInt8 in [0, 2, 0x80, 0xff] {
            var lone = buffer([version])
            #expect(DatagramHeader.decode(&lone) == .failure(.unsupportedVersion(version)))
            var long = buffer([version] + [UInt8](repeating: 0, count: 100))
            #expect(DatagramHeader.decode(&long) == .failure(.unsupportedVersion(version)))
        }
    }

    @Test func unknownKeyKind() {
        for kind: UInt8 in [2, 3, 0x80, 0xff] {
            var input = buffer([1, kind] + [UInt8](repeating: 0, count: 64))
            #expect(DatagramHeader.decode(&input) == .failure(.unknownKeyKind(kind)))
        }
    }

    @Test func decodeStartsAtTheReaderIndex() {
        let header = DatagramHeader(
            keyKind: .pairwise, sessionID: SessionID(value: 9), sender: NodeID(high: 8, low: 7),
            bootID: 6, packetNumber: 5)
        var encoded = buffer([0xff, 0xff, 0xff])
        header.encode(into: &encoded)
        encoded.moveReaderIndex(forwardBy: 3)
        #expect(DatagramHeader.decode(&encoded) == .success(header))
    }
}
