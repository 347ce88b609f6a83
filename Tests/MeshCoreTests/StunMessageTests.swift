import MeshCrypto
import Testing
@testable import MeshCore

/// The STUN codec against RFC 5769's test vectors, and round trips.
@Suite struct StunMessageTests {
    static func hex(_ text: String) -> [UInt8] {
        Hex.decode(text.filter { !$0.isWhitespace }) ?? []
    }

    /// RFC 5769 §2.1: a request with SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME,
    /// MESSAGE-INTEGRITY (short-term password) and FINGERPRINT.
    static let sampleRequest = hex(
        """
        000100582112a442b7e7a701bc34d686fa87dfae802200105354554e2074657374
        20636c69656e74002400046e0001ff80290008932ff9b151263b36000600096576
        746a3a68367659202020000800149aeaa70cbfd8cb56781ef2b5b2d3f249c1b571
        a280280004e57a3bcf
        """)

    /// RFC 5769 §2.2: a success response with XOR-MAPPED-ADDRESS 192.0.2.1:32853.
    static let sampleIPv4Response = hex(
        """
        0101003c2112a442b7e7a701bc34d686fa87dfae8022000b7465737420766563746f7220
        002000080001a147e112a643000800142b91f599fd9e90c38c7489f92af9ba53f06be7d7
        80280004c07d4c96
        """)

    /// RFC 5769 §2.3: the same with XOR-MAPPED-ADDRESS [2001:db8:1234:5678:11:2233:4455:6677]:32853.
    static let sampleIPv6Response = hex(
        """
        010100482112a442b7e7a701bc34d686fa87dfae8022000b7465737420766563746f7220
        002000140002a1470113a9faa5d3f179bc25f4b5bed2b9d900080014a382954e4be67bf1
        1784c97c8292c275bfe3ed4180280004c8fb0b4c
        """)

    /// RFC 5769 §2.4: a request with long-term credentials (USERNAME, NONCE, REALM, MESSAGE-INTEGRITY).
    static let sampleLongTermRequest = hex(
        """
        000100602112a44278ad3433c6ad72c029da412e00060012e3839ee38388e383aae3
        8383e382afe382b90000001500 1c662f2f3439396b393534643 64f4c33346f4c39
        4653547679363473410014000b6578616d706c652e6f726700000800 14f6702465
        6dd64a3e02b8e0712e85c9a28ca89666
        """)

    @Test func sampleRequestDecodesAndVerifies() throws {
        let received = try StunMessage.decode(Self.sampleRequest)
        #expect(received.message.method == .binding && received.message.messageClass == .request)
        #expect(received.message.transactionID.bytes == Self.hex("b7e7a701bc34d686fa87dfae"))
        #expect(received.message.attributes.contains(.software("STUN test client")))
        #expect(received.message.attributes.contains(.username("evtj:h6vY")))
        // Short-term credentials: the key is the password itself.
        #expect(received.hasValidIntegrity(key: Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)))
        #expect(!received.hasValidIntegrity(key: Array("VOkJxbRl1RmTxUk/WvJxBT".utf8)))
        #expect(received.fingerprintIsValid)
        // PRIORITY and ICE-CONTROLLED are unknown here: one comprehension-required, one optional.
        #expect(received.unknownRequired == [0x0024])
    }

    @Test func sampleIPv4ResponseDecodesAndEncodesByteForByte() throws {
        let received = try StunMessage.decode(Self.sampleIPv4Response)
        let message = received.message
        #expect(message.method == .binding && message.messageClass == .success)
        #expect(message.xorMappedAddress == (try PeerAddress(parsing: "192.0.2.1:32853")))
        let key = Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)
        #expect(received.hasValidIntegrity(key: key) && received.fingerprintIsValid)
        let rebuilt = StunMessage(
            method: .binding, messageClass: .success, transactionID: message.transactionID,
            attributes: [.software("test vector"), .xorMappedAddress(try PeerAddress(parsing: "192.0.2.1:32853"))])
        #expect(rebuilt.encoded(integrityKey: key, fingerprint: true, padding: 0x20) == Self.sampleIPv4Response)
    }

    @Test func sampleIPv6ResponseDecodes() throws {
        let received = try StunMessage.decode(Self.sampleIPv6Response)
        #expect(
            received.message.xorMappedAddress
                == (try PeerAddress(parsing: "[2001:db8:1234:5678:11:2233:4455:6677]:32853")))
        #expect(received.hasValidIntegrity(key: Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)) && received.fingerprintIsValid)
        let rebuilt = StunMessage(
            method: .binding, messageClass: .success, transactionID: received.message.transactionID,
            attributes: [.software("test vector"), .xorMappedAddress(received.message.xorMappedAddress!)])
        #expect(
            rebuilt.encoded(integrityKey: Array("VOkJxbRl1RmTxUk/WvJxBt".utf8), fingerprint: true, padding: 0x20)
                == Self.sampleIPv6Response)
    }

    @Test func longTermRequestDecodesVerifiesAndEncodesByteForByte() throws {
        let received = try StunMessage.decode(Self.sampleLongTermRequest)
        let username = "\u{30DE}\u{30C8}\u{30EA}\u{30C3}\u{30AF}\u{30B9}"
        #expect(received.message.attributes.contains(.username(username)))
        #expect(received.message.nonce == "f//499k954d6OL34oL9FSTvy64sA")
        #expect(received.message.realm == "example.org")
        // The password "The\u{00AD}M\u{00AA}tr\u{2168}" after SASLprep.
        let key = StunIntegrity.longTermKey(username: username, realm: "example.org", password: "TheMatrIX")
        #expect(received.hasValidIntegrity(key: key))
        #expect(
            !received.hasValidIntegrity(
                key: StunIntegrity.longTermKey(username: username, realm: "example.org", password: "TheMatrix")))
        let rebuilt = StunMessage(
            method: .binding, messageClass: .request, transactionID: received.message.transactionID,
            attributes: [.username(username), .nonce("f//499k954d6OL34oL9FSTvy64sA"), .realm("example.org")])
        #expect(rebuilt.encoded(integrityKey: key) == Self.sampleLongTermRequest)
    }

    @Test func everyAttributeRoundTrips() throws {
        var random = SplitMix64(seed: 5769)
        let id = StunMessage.TransactionID(random: &random)
        let attributes: [StunAttribute] = [
            .mappedAddress(try PeerAddress(parsing: "198.51.100.7:4000")),
            .xorMappedAddress(try PeerAddress(parsing: "[2001:db8::1]:1")),
            .xorPeerAddress(try PeerAddress(parsing: "10.0.0.1:65535")),
            .xorRelayedAddress(try PeerAddress(parsing: "198.51.100.10:49152")),
            .errorCode(code: 438, reason: "Stale Nonce"), .realm("lab"), .nonce("abc"), .username("mesh"),
            .lifetime(600), .data([1, 2, 3, 4, 5]), .channelNumber(0x4001), .requestedTransport(17),
            .software("groupmesh"),
        ]
        let message = StunMessage(method: .allocate, messageClass: .error, transactionID: id, attributes: attributes)
        let key = StunIntegrity.longTermKey(username: "mesh", realm: "lab", password: "secret")
        let received = try StunMessage.decode(message.encoded(integrityKey: key, fingerprint: true))
        #expect(Array(received.message.attributes.prefix(attributes.count)) == attributes)
        #expect(received.message.method == .allocate && received.message.messageClass == .error)
        #expect(received.hasValidIntegrity(key: key) && received.fingerprintIsValid)
        #expect(received.message.errorCode?.code == 438)
    }

    @Test func everyMethodAndClassRoundTrips() throws {
        var random = SplitMix64(seed: 1)
        for method in [StunMessage.Method.binding, .allocate, .refresh, .send, .data, .createPermission, .channelBind] {
            for messageClass in [StunMessage.Class.request, .indication, .success, .error] {
                let message = StunMessage(
                    method: method, messageClass: messageClass, transactionID: .init(random: &random))
                let decoded = try StunMessage.decode(message.encoded()).message
                #expect(decoded == message)
            }
        }
        // RFC 8489's examples: a Binding success is 0x0101, an Allocate error 0x0113.
        #expect(StunMessage.messageType(.binding, .success) == 0x0101)
        #expect(StunMessage.messageType(.allocate, .error) == 0x0113)
        #expect(StunMessage.messageType(.data, .indication) == 0x0017)
    }

    @Test func aTamperedMessageFailsItsChecks() throws {
        var bytes = Self.sampleIPv4Response
        bytes[27] ^= 1  // inside SOFTWARE
        let received = try StunMessage.decode(bytes)
        #expect(!received.hasValidIntegrity(key: Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)))
        #expect(!received.fingerprintIsValid)
    }

    @Test func channelDataRoundTripsAndIsBounded() throws {
        let framed = ChannelData(channel: 0x4000, payload: [1, 2, 3])
        #expect(framed.encoded() == [0x40, 0x00, 0x00, 0x03, 1, 2, 3])
        #expect(try ChannelData.decode(framed.encoded()) == framed)
        #expect(try ChannelData.decode(framed.encoded() + [0]) == framed)  // padding
        #expect(throws: WireError.self) { try ChannelData.decode([0x40, 0x00, 0x00, 0x05, 1]) }
        #expect(throws: WireError.self) { try ChannelData.decode([0x50, 0x00, 0x00, 0x00]) }
        #expect(throws: WireError.self) { try ChannelData.decode([0x40, 0x00, 0x00, 0x00, 1, 2, 3, 4]) }
        #expect(ChannelData.looksLikeChannelData(0x40) && ChannelData.looksLikeChannelData(0x7F))
        // A GroupMesh datagram starts with its version, 1: never taken for ChannelData.
        #expect(!ChannelData.looksLikeChannelData(0x01))
    }

    @Test func aGroupMeshDatagramIsNotTakenForStun() {
        var datagram = [UInt8](repeating: 0, count: 64)
        datagram[0] = 1
        datagram[1] = 1
        #expect(!StunMessage.looksLikeStun(datagram))
        #expect(StunMessage.looksLikeStun(Self.sampleIPv4Response))
    }
}
