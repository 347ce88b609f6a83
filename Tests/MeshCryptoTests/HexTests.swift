import Testing
@testable import MeshCrypto

@Suite struct HexTests {
    @Test func encodesLowercase() {
        #expect(Hex.encode([0x00, 0x0f, 0xab, 0xff]) == "000fabff")
        #expect(Hex.encode([UInt8]()) == "")
        #expect(Hex.encode(Array(0...255)).count == 512)
    }

    @Test func decodesEitherCase() {
        #expect(Hex.decode("000fabff") == [0x00, 0x0f, 0xab, 0xff])
        #expect(Hex.decode("000FABFF") == [0x00, 0x0f, 0xab, 0xff])
        #expect(Hex.decode("") == [])
    }

    @Test func rejectsOddLengthAndNonHex() {
        #expect(Hex.decode("0") == nil)
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("0g") == nil)
        #expect(Hex.decode("0x00") == nil)
        #expect(Hex.decode(" 00") == nil)
        #expect(Hex.decode("é0") == nil)  // two UTF-8 bytes, neither hex
    }

    @Test func roundTripsEveryByte() {
        let all = Array(UInt8(0)...UInt8(255))
        #expect(Hex.decode(Hex.encode(all)) == all)
        #expect(Hex.decode(Hex.encode(all).uppercased()) == all)
    }
}
