import Testing
@testable import MeshCrypto

@Suite struct InviteTokenTests {
    static let secret = try! SessionSecret(bytes: (0..<32).map { UInt8($0 * 7 & 0xff) })

    /// Builds a token text from a hand-made body, appending a correct checksum, so that each
    /// parsing step past the checksum can be reached on purpose.
    static func token(body: [UInt8]) -> String {
        InviteToken.prefix + Base64URL.encode(body + SHA256Digest.hashing(body).bytes.prefix(4))
    }

    static func body(version: UInt8 = 1, count: UInt8, addresses: [[UInt8]]) -> [UInt8] {
        [version] + secret.bytes + [count] + addresses.flatMap { $0 }
    }

    static let v4: [UInt8] = [4, 192, 0, 2, 7, 0x1f, 0x0a]  // 192.0.2.7:7946
    static let v6: [UInt8] = [6] + hex("20010db8000000000000000000000007") + [0x1f, 0x0a]

    static func expectError(
        _ expected: InviteTokenError, _ text: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(throws: MeshCryptoError.invite(expected), sourceLocation: sourceLocation) {
            try InviteToken(parsing: text)
        }
    }

    // MARK: round trips

    @Test("the line `run` prints, label and all, parses as the token it shows")
    func theLinePrintedByRunParses() throws {
        let token = InviteToken(secret: Self.secret, addresses: [PeerAddress(ipv4: [192, 0, 2, 7], port: 7946)])
        #expect(try InviteToken(parsing: "invite: \(token.text)\n") == token)
        #expect(try InviteToken(parsing: "  invite:\(token.text)") == token)
        Self.expectError(.empty, "invite:  ")
        Self.expectError(.notAnInvite, "invitation: \(token.text)")
    }

    @Test func roundTripsIPv4() throws {
        let address = try PeerAddress(parsing: "192.0.2.7:7946")
        let invite = InviteToken(secret: Self.secret, addresses: [address])
        let parsed = try InviteToken(parsing: invite.text)
        #expect(parsed == invite)
        #expect(parsed.secret == Self.secret)
        #expect(parsed.addresses == [address])
        // The hand-built form is byte-for-byte the same text.
        #expect(invite.text == Self.token(body: Self.body(count: 1, addresses: [Self.v4])))
    }

    @Test func roundTripsIPv6() throws {
        let address = try PeerAddress(parsing: "[2001:db8::7]:7946")
        let invite = InviteToken(secret: Self.secret, addresses: [address])
        #expect(try InviteToken(parsing: invite.text) == invite)
        #expect(invite.text == Self.token(body: Self.body(count: 1, addresses: [Self.v6])))
    }

    @Test func roundTripsSeveralAddressesInOrder() throws {
        let addresses = try ["10.0.0.1:1", "[::1]:65535", "127.0.0.1:7946", "[fe80::1:2:3:4]:9", "255.255.255.255:80"]
            .map { try PeerAddress(parsing: $0) }
        let invite = InviteToken(secret: Self.secret, addresses: addresses)
        let parsed = try InviteToken(parsing: invite.text)
        #expect(parsed.addresses == addresses)
        #expect(parsed.secret == Self.secret)
    }

    @Test func roundTripsTheMaximumAndStaysUnderTheLengthLimit() throws {
        let addresses = (0..<InviteToken.maxAddresses).map { index in
            PeerAddress(ipv6: [UInt8](repeating: 0xff, count: 15) + [UInt8(index)], port: 65535)
        }
        let invite = InviteToken(secret: Self.secret, addresses: addresses)
        #expect(invite.text.utf8.count <= InviteToken.maxTextLength)
        #expect(try InviteToken(parsing: invite.text) == invite)
    }

    @Test func initKeepsAtMostMaxAddresses() {
        let addresses = (0..<40).map { PeerAddress(ipv4: [10, 0, 0, UInt8($0)], port: 7946) }
        let invite = InviteToken(secret: Self.secret, addresses: addresses)
        #expect(invite.addresses == Array(addresses.prefix(InviteToken.maxAddresses)))
    }

    @Test func randomInvitesRoundTrip() throws {
        let seed = testSeed(0x1417_0001)
        var rng = SplitMix64(seed: seed)
        for _ in 0..<300 {
            let secret = try SessionSecret(bytes: rng.bytes(32))
            let addresses = (0..<Int.random(in: 1...InviteToken.maxAddresses, using: &rng)).map { _ in
                Bool.random(using: &rng)
                    ? PeerAddress(ipv4: rng.bytes(4), port: UInt16.random(in: 1...UInt16.max, using: &rng))
                    : PeerAddress(ipv6: rng.bytes(16), port: UInt16.random(in: 1...UInt16.max, using: &rng))
            }
            let invite = InviteToken(secret: secret, addresses: addresses)
            let text = invite.text
            #expect(text.hasPrefix("gm1"))
            #expect(text.utf8.allSatisfy { Base64URLTests.alphabet.contains($0) || $0 == UInt8(ascii: "g") })
            #expect(try InviteToken(parsing: text) == invite, "seed \(seed)")
        }
    }

    @Test func surroundingWhitespaceIsTrimmed() throws {
        let invite = InviteToken(secret: Self.secret, addresses: [PeerAddress(ipv4: [127, 0, 0, 1], port: 7946)])
        #expect(try InviteToken(parsing: "  \t\n" + invite.text + "\r\n ") == invite)
        #expect(try InviteToken(parsing: "\u{00a0}" + invite.text + "\u{2003}") == invite)
        // Trimming happens before the length check: a pasted token with a lot of padding still works.
        #expect(try InviteToken(parsing: String(repeating: " ", count: 1000) + invite.text + "\n") == invite)
        // Whitespace inside is not trimmed.
        var text = invite.text
        text.insert(" ", at: text.index(text.startIndex, offsetBy: 10))
        Self.expectError(.badEncoding, text)
    }

    // MARK: rejections, one per reason

    @Test func rejectsEmpty() {
        Self.expectError(.empty, "")
        Self.expectError(.empty, " \n\t ")
    }

    @Test func rejectsTooLong() {
        Self.expectError(.tooLong, "gm1" + String(repeating: "A", count: 600))
        Self.expectError(.tooLong, String(repeating: "x", count: InviteToken.maxTextLength + 1))
        // At exactly the limit the length check passes and a later check speaks.
        Self.expectError(.notAnInvite, String(repeating: "x", count: InviteToken.maxTextLength))
    }

    @Test func rejectsWrongPrefix() {
        let good = InviteToken(secret: Self.secret, addresses: [PeerAddress(ipv4: [1, 2, 3, 4], port: 5)]).text
        let rest = String(good.dropFirst(3))
        for prefix in ["gm2", "GM1", "gm", "", "xgm1", "gn1"] {
            Self.expectError(.notAnInvite, prefix + rest)
        }
        Self.expectError(.notAnInvite, "hello")
        Self.expectError(.notAnInvite, "192.0.2.7:7946")
    }

    @Test func rejectsCharactersOutsideBase64URL() {
        let good = InviteToken(secret: Self.secret, addresses: [PeerAddress(ipv4: [1, 2, 3, 4], port: 5)]).text
        for bad in ["+", "/", "=", ".", "é", "\0", "*"] {
            var text = good
            text.insert(contentsOf: bad, at: text.index(text.startIndex, offsetBy: 7))
            Self.expectError(.badEncoding, text)
        }
        Self.expectError(.badEncoding, good + "==")  // padding is not base64url-without-padding
        Self.expectError(.badLength, "gm1A")  // a length no byte string encodes to
        Self.expectError(.badLength, "gm1AB")  // non-zero leftover bits
    }

    @Test("a token cut short or with a character added is never said to hold characters outside base64url")
    func cutTokensSayTheirLength() {
        let good = InviteToken(secret: Self.secret, addresses: [PeerAddress(ipv4: [1, 2, 3, 4], port: 5)]).text
        var texts = (4..<good.count).map { String(good.prefix($0)) }
        texts += ["A", "x", "-", "_", "AB"].map { good + $0 }
        for text in texts {
            do {
                _ = try InviteToken(parsing: text)
                Issue.record("\(text) was taken")
            } catch {
                #expect(
                    [.invite(.badLength), .invite(.truncated), .invite(.checksumMismatch)].contains(error),
                    "\(text.count) characters: \(error)")
            }
        }
    }

    @Test func rejectsTruncated() {
        Self.expectError(.truncated, "gm1")
        // 37 bytes: one short of the smallest possible payload.
        Self.expectError(.truncated, InviteToken.prefix + Base64URL.encode([UInt8](repeating: 1, count: 37)))
        // A correct checksum over a body whose address is cut short, at every length.
        for cut in 1..<Self.v4.count {
            Self.expectError(.truncated, Self.token(body: Self.body(count: 1, addresses: [Array(Self.v4.prefix(cut))])))
        }
        for cut in 1..<Self.v6.count {
            Self.expectError(.truncated, Self.token(body: Self.body(count: 1, addresses: [Array(Self.v6.prefix(cut))])))
        }
        // The count promises two addresses, only one follows.
        Self.expectError(.truncated, Self.token(body: Self.body(count: 2, addresses: [Self.v4])))
    }

    @Test func rejectsTextCutShortOrDamaged() {
        let good = InviteToken(secret: Self.secret, addresses: [PeerAddress(ipv4: [1, 2, 3, 4], port: 5)]).text
        // Dropping characters from the end: whatever the reason, never a token.
        for drop in 1..<(good.count - 3) {
            #expect(throws: MeshCryptoError.self) { try InviteToken(parsing: String(good.dropLast(drop))) }
        }
    }

    @Test func rejectsFlippedChecksum() {
        let body = Self.body(count: 1, addresses: [Self.v4])
        let check = Array(SHA256Digest.hashing(body).bytes.prefix(4))
        for bit in 0..<32 {
            var damaged = check
            damaged[bit / 8] ^= 1 << (bit % 8)
            Self.expectError(.checksumMismatch, InviteToken.prefix + Base64URL.encode(body + damaged))
        }
        // A flipped bit in the secret is caught by the same checksum.
        var wrongSecret = body
        wrongSecret[5] ^= 0x10
        Self.expectError(.checksumMismatch, InviteToken.prefix + Base64URL.encode(wrongSecret + check))
    }

    @Test func rejectsUnknownVersion() {
        for version: UInt8 in [0, 2, 0x7f, 0xff] {
            Self.expectError(
                .unsupportedVersion, Self.token(body: Self.body(version: version, count: 1, addresses: [Self.v4])))
        }
    }

    @Test func rejectsZeroAddresses() {
        Self.expectError(.noAddresses, Self.token(body: Self.body(count: 0, addresses: [])))
        // What init(secret:addresses: []) writes is therefore not a usable invite.
        Self.expectError(.noAddresses, InviteToken(secret: Self.secret, addresses: []).text)
    }

    @Test func rejectsTooManyAddresses() {
        let seventeen = [[UInt8]](repeating: Self.v4, count: 17)
        Self.expectError(.tooManyAddresses, Self.token(body: Self.body(count: 17, addresses: seventeen)))
        Self.expectError(.tooManyAddresses, Self.token(body: Self.body(count: 255, addresses: [Self.v4])))
        // Sixteen is fine.
        #expect(throws: Never.self) {
            try InviteToken(parsing: Self.token(body: Self.body(count: 16, addresses: Array(seventeen.prefix(16)))))
        }
    }

    @Test func rejectsBadFamily() {
        for family: UInt8 in [0, 1, 5, 16, 46, 0xff] {
            var address = Self.v4
            address[0] = family
            Self.expectError(.badAddress, Self.token(body: Self.body(count: 1, addresses: [address])))
        }
        // A bad second address is caught too.
        Self.expectError(
            .badAddress, Self.token(body: Self.body(count: 2, addresses: [Self.v4, [9] + Self.v4.dropFirst()])))
    }

    @Test func rejectsPortZero() {
        var address = Self.v4
        address[5] = 0
        address[6] = 0
        Self.expectError(.badAddress, Self.token(body: Self.body(count: 1, addresses: [address])))
    }

    @Test func rejectsTrailingBytes() {
        Self.expectError(.trailingBytes, Self.token(body: Self.body(count: 1, addresses: [Self.v4, [0]])))
        Self.expectError(.trailingBytes, Self.token(body: Self.body(count: 1, addresses: [Self.v4, Self.v6])))
    }

    @Test func everyErrorReadsAsABadInvite() {
        let all: [InviteTokenError] = [
            .empty, .tooLong, .notAnInvite, .badEncoding, .badLength, .truncated, .checksumMismatch,
            .unsupportedVersion, .noAddresses, .tooManyAddresses, .badAddress, .trailingBytes,
        ]
        var seen = Set<String>()
        for error in all {
            #expect(error.description.hasPrefix("bad invite: "))
            #expect(MeshCryptoError.invite(error).description == error.description)
            seen.insert(error.description)
        }
        #expect(seen.count == all.count)
    }
}
