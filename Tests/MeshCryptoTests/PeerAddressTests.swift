import Testing
@testable import MeshCrypto

@Suite struct PeerAddressTests {
    @Test func parsesIPv4() throws {
        let address = try PeerAddress(parsing: "192.0.2.7:7946")
        #expect(address.host == .ipv4(0xc000_0207))
        #expect(address.port == 7946)
        #expect(address.hostBytes == [192, 0, 2, 7])
        #expect(!address.isIPv6)
        #expect(address.description == "192.0.2.7:7946")
        #expect(address.hostString == "192.0.2.7")
    }

    @Test func parsesBracketedIPv6() throws {
        let address = try PeerAddress(parsing: "[2001:db8::7]:7946")
        #expect(address.host == .ipv6(high: 0x2001_0db8_0000_0000, low: 7))
        #expect(address.port == 7946)
        #expect(address.isIPv6)
        #expect(address.hostBytes == hex("20010db8000000000000000000000007"))
        #expect(address.description == "[2001:db8::7]:7946")
    }

    @Test(arguments: [
        "0.0.0.0:0", "127.0.0.1:1", "255.255.255.255:65535", "10.1.2.3:7946",
        "[::]:0", "[::1]:7946", "[fe80::1]:9", "[2001:db8:1:2:3:4:5:6]:65535", "[::ffff:192.0.2.1]:80",
    ])
    func descriptionRoundTrips(text: String) throws {
        let address = try PeerAddress(parsing: text)
        #expect(address.description == text)
        #expect(try PeerAddress(parsing: address.description) == address)
    }

    @Test func nonCanonicalIPv6IsPrintedCanonically() throws {
        let address = try PeerAddress(parsing: "[2001:0DB8:0000:0000:0000:0000:0000:0007]:80")
        #expect(address.description == "[2001:db8::7]:80")
    }

    @Test func randomAddressesRoundTripThroughTheirDescription() throws {
        var rng = SplitMix64(seed: testSeed(0xadd7))
        for _ in 0..<500 {
            let port = UInt16.random(in: 0...UInt16.max, using: &rng)
            let address =
                Bool.random(using: &rng)
                ? PeerAddress(ipv4: rng.bytes(4), port: port)
                : PeerAddress(ipv6: rng.bytes(16), port: port)
            #expect(try PeerAddress(parsing: address.description) == address, "\(address)")
        }
    }

    @Test(arguments: [
        "", "1.2.3.4", "1.2.3.4:", ":80", "1.2.3.4:70000", "1.2.3.4:65536", "1.2.3.4:-1",
        "1.2.3.4:80x", "1.2.3.4: 80", "localhost:80", "example.com:7946", "host:1",
        "1.2.3:80", "1.2.3.4.5:80", "256.0.0.1:80", "::1:80", "[::1]", "[::1]80", "[::1:80",
        "[]:80", "[::1]:", "2001:db8::7:7946", "[fe80::1%eth0]:80", " 1.2.3.4:80", "1.2.3.4:80 ",
        "1.2.3.4:٨٠", "[::1]:80:81", "[zz::1]:80",
        "1.2.3.4:+80", "1.2.3.4:-0", "[::1]:+1", "1.2.3.4:0x50",
    ])
    func badFormsThrow(text: String) {
        #expect(throws: MeshCryptoError.invalidAddress(text)) { try PeerAddress(parsing: text) }
    }

    @Test func splitDoesNotInterpretTheHost() {
        #expect(PeerAddress.split("example.com:80")! == ("example.com", 80))
        #expect(PeerAddress.split("[::1]:7")! == ("::1", 7))
        #expect(PeerAddress.split("example.com") == nil)
        #expect(PeerAddress.split("example.com:+80") == nil)  // a port is digits only
        #expect(PeerAddress.split("example.com:0080")! == ("example.com", 80))
    }

    @Test func loopbackAndUnspecified() throws {
        #expect(try PeerAddress(parsing: "127.0.0.1:1").isLoopback)
        #expect(try PeerAddress(parsing: "127.255.0.9:1").isLoopback)
        #expect(try PeerAddress(parsing: "[::1]:1").isLoopback)
        #expect(try !PeerAddress(parsing: "128.0.0.1:1").isLoopback)
        #expect(try !PeerAddress(parsing: "[::2]:1").isLoopback)
        #expect(try PeerAddress(parsing: "0.0.0.0:1").isUnspecified)
        #expect(try PeerAddress(parsing: "[::]:1").isUnspecified)
        #expect(try !PeerAddress(parsing: "0.0.0.1:1").isUnspecified)
    }

    @Test func orderPutsIPv4FirstThenBytesThenPort() throws {
        let sorted = try ["[::1]:1", "10.0.0.2:1", "10.0.0.1:2", "10.0.0.1:1", "[::]:5"].map {
            try PeerAddress(parsing: $0)
        }.sorted()
        #expect(sorted.map(\.description) == ["10.0.0.1:1", "10.0.0.1:2", "10.0.0.2:1", "[::]:5", "[::1]:1"])
    }
}
