import Testing
@testable import MeshCrypto

@Suite struct NodeIDTests {
    @Test func bytesHexAndWordsAgree() throws {
        let bytes = (1...16).map { UInt8($0) }
        let id = NodeID(bytes: bytes)
        #expect(id.high == 0x0102_0304_0506_0708)
        #expect(id.low == 0x090a_0b0c_0d0e_0f10)
        #expect(id.bytes == bytes)
        #expect(id.hex == "0102030405060708090a0b0c0d0e0f10")
        #expect(id.description == id.hex)
        #expect(NodeID(hex: id.hex) == id)
        #expect(NodeID(hex: id.hex.uppercased()) == id)
        #expect(NodeID(high: id.high, low: id.low) == id)
    }

    @Test func hexMustBe32HexDigits() {
        #expect(NodeID(hex: "") == nil)
        #expect(NodeID(hex: String(repeating: "a", count: 31)) == nil)
        #expect(NodeID(hex: String(repeating: "a", count: 33)) == nil)
        #expect(NodeID(hex: String(repeating: "a", count: 30) + "zz") == nil)
        #expect(NodeID(hex: String(repeating: "0", count: 32)) == NodeID(high: 0, low: 0))
    }

    @Test func longerInputUsesTheFirst16Bytes() {
        let bytes = (1...20).map { UInt8($0) }
        #expect(NodeID(bytes: bytes) == NodeID(bytes: bytes.prefix(16)))
    }

    @Test func shorterInputIsZeroPaddedAtTheEnd() {
        // As documented: the given bytes come first, zeros fill the rest.
        #expect(NodeID(bytes: [0xaa]).bytes == [0xaa] + [UInt8](repeating: 0, count: 15))
        #expect(NodeID(bytes: [UInt8]()).bytes == [UInt8](repeating: 0, count: 16))
        let ten = (1...10).map { UInt8($0) }
        #expect(NodeID(bytes: ten).bytes == ten + [0, 0, 0, 0, 0, 0])
        let eight = (1...8).map { UInt8($0) }
        #expect(NodeID(bytes: eight) == NodeID(high: 0x0102_0304_0506_0708, low: 0))
    }

    @Test func orderIsTheOrderOfTheBytes() {
        var rng = SplitMix64(seed: testSeed(0x1d))
        let ids = (0..<200).map { _ in NodeID(bytes: rng.bytes(16)) }
        for (a, b) in zip(ids, ids.dropFirst()) {
            #expect((a < b) == a.bytes.lexicographicallyPrecedes(b.bytes))
        }
    }
}
