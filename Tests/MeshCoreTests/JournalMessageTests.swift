import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// The journal's message codec: every case round-trips; outside bytes never trap it.
@Suite("Journal messages")
struct JournalMessageTests {
    /// The name of a message's case. Exhaustive, so a new case does not compile until the
    /// samples below are reviewed.
    static func caseName(_ message: JournalMessage) -> String {
        switch message {
        case .operations: "operations"
        case .have: "have"
        case .want: "want"
        case .holding: "holding"
        case .chunkRequest: "chunkRequest"
        case .chunk: "chunk"
        case .noChunk: "noChunk"
        case .chunks: "chunks"
        case .replicate: "replicate"
        case .end: "end"
        }
    }

    static let allCaseNames: Set<String> = [
        "operations", "have", "want", "holding", "chunkRequest", "chunk", "noChunk", "chunks", "replicate", "end",
    ]

    /// Examples of every case, edge cases included.
    static func samples(using rng: inout SplitMix64) -> [JournalMessage] {
        let alice = JournalFixtures.ed25519(0x11), bob = SimulationAuthority(index: 7)
        var state = JournalState()
        let add = state.makeAdd(
            JournalFixtures.attachment(1), size: 1 << 40, chunkCount: Int(UInt32.max),
            metadata: Array(#"{"name":"photo.jpg"}"#.utf8), authority: alice)
        state.apply(add, authority: alice)
        let bare = state.makeAdd(JournalFixtures.attachment(2), size: 0, chunkCount: 0, metadata: [], authority: bob)
        state.apply(bare, authority: bob)
        let remove = state.makeRemove(JournalFixtures.attachment(1), authority: bob)!
        let manyObserved = JournalOperation(
            kind: .remove, attachment: JournalFixtures.attachment(3), author: alice.signingKey, clock: .max,
            observedAdds: (0..<UInt64(JournalOperation.maxObservedAdds)).map { OperationID(high: $0, low: ~$0) }
        ).signed(by: alice)
        let hugeMetadata = state.makeAdd(
            JournalFixtures.attachment(4), size: 5, chunkCount: 1,
            metadata: rng.bytes(JournalOperation.maxMetadataBytes), authority: alice)
        let ids = (0..<5).map { _ in OperationID(high: rng.next(), low: rng.next()) }
        let digest = SHA256Digest(bytes: rng.bytes(32))!
        return [
            .operations([]), .operations([add]), .operations([remove]), .operations([add, bare, remove]),
            .operations([manyObserved, hugeMetadata]),
            .have([]), .have([add.id]),
            .have(ids + [OperationID(high: 0, low: 0), OperationID(high: .max, low: .max)]),
            .want([]), .want(ids),
            .holding([]), .holding([digest]), .holding((0..<100).map(JournalFixtures.attachment)),
            .chunkRequest(digest), .chunkRequest(JournalFixtures.attachment(0)),
            .chunk(digest, []), .chunk(digest, [0]), .chunk(JournalFixtures.attachment(9), rng.bytes(256 * 1024)),
            .noChunk(digest), .noChunk(JournalFixtures.attachment(5)),
            .chunks(digest, ChunkBitmap(count: 0)), .chunks(digest, ChunkBitmap.full(400)),
            .chunks(
                digest,
                {
                    var bitmap = ChunkBitmap(count: 65); bitmap.insert(0); bitmap.insert(64); return bitmap
                }()),
            .replicate([]), .replicate([digest, JournalFixtures.attachment(6)]),
            .end(SessionEnd(signingKey: alice.signingKey, session: SessionID(value: .max), signature: rng.bytes(64))),
        ]
    }

    @Test("every case round-trips, and re-encodes to the same bytes")
    func roundTrip() throws {
        var rng = SplitMix64(seed: 0x3e55)
        let samples = Self.samples(using: &rng)
        #expect(Set(samples.map(Self.caseName)) == Self.allCaseNames, "a sample of every case")
        for message in samples {
            let encoded = message.encoded
            let decoded = try JournalMessage(decoding: encoded)
            #expect(decoded == message, "\(Self.caseName(message))")
            #expect(decoded.encoded == encoded)
        }
    }

    @Test("cases are told apart: have and want, chunk request and no chunk, empty lists")
    func casesAreDistinct() throws {
        let ids = [OperationID(high: 1, low: 2)]
        let digest = JournalFixtures.attachment(1)
        let confusable: [JournalMessage] = [
            .have(ids), .want(ids), .chunkRequest(digest), .noChunk(digest),
            .operations([]), .have([]), .want([]), .holding([]), .chunk(digest, []),
        ]
        let encodings = confusable.map(\.encoded)
        #expect(Set(encodings).count == confusable.count)
        #expect(Set(encodings.map { $0.first! }).count == 7, "one kind byte per case")
        for (message, bytes) in zip(confusable, encodings) {
            #expect(try JournalMessage(decoding: bytes) == message)
        }
    }

    @Test("decode rejects unknown kinds, truncation, trailing bytes and lying counts")
    func rejectsMalformed() {
        #expect(throws: WireError.self) { try JournalMessage(decoding: []) }
        #expect(throws: WireError.self) { try JournalMessage(decoding: [0]) }
        #expect(throws: WireError.self) { try JournalMessage(decoding: [8]) }
        let have = JournalMessage.have([OperationID(high: 1, low: 2), OperationID(high: 3, low: 4)]).encoded
        #expect(throws: WireError.self) { try JournalMessage(decoding: Array(have.dropLast())) }
        #expect(throws: WireError.trailingBytes(1)) { try JournalMessage(decoding: have + [0]) }
        // A count of 2^32 - 1 ids with none behind it is refused before any allocation.
        #expect(throws: WireError.self) { try JournalMessage(decoding: [2, 0xff, 0xff, 0xff, 0xff]) }
        #expect(throws: WireError.self) { try JournalMessage(decoding: [1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]) }
        let request = JournalMessage.chunkRequest(JournalFixtures.attachment(1)).encoded
        #expect(throws: WireError.trailingBytes(1)) { try JournalMessage(decoding: request + [0]) }
        #expect(throws: WireError.self) { try JournalMessage(decoding: Array(request.dropLast())) }
        // An operation with bytes after its signature, inside its length prefix.
        var rng = SplitMix64(seed: 1)
        let operation = Self.samples(using: &rng).compactMap { message -> [UInt8]? in
            if case let .operations(operations) = message, operations.count == 1 { return message.encoded }
            return nil
        }[0]
        var padded = operation
        let length = Int(padded[5]) << 24 | Int(padded[6]) << 16 | Int(padded[7]) << 8 | Int(padded[8])
        let newLength = length + 1
        padded.replaceSubrange(
            5..<9,
            with: [
                UInt8(newLength >> 24 & 0xff), UInt8(newLength >> 16 & 0xff),
                UInt8(newLength >> 8 & 0xff), UInt8(newLength & 0xff),
            ])
        padded.append(0)
        #expect(throws: WireError.trailingBytes(1)) { try JournalMessage(decoding: padded) }
        // An unknown operation kind (1 and 2 are format 1's add and remove, 3 and 4 format 2's).
        for kind: UInt8 in [0, 5, 0xff] {
            var badKind = operation
            badKind[9] = kind
            #expect(throws: WireError.invalidField(what: "operation kind")) { try JournalMessage(decoding: badKind) }
        }
    }

    @Test("an operation cut short anywhere (its author included) is refused, never traps")
    func truncatedOperations() {
        var rng = SplitMix64(seed: 2)
        let operations = Self.samples(using: &rng).flatMap { message -> [JournalOperation] in
            if case let .operations(operations) = message { operations } else { [] }
        }
        for operation in operations.prefix(3) {
            var whole = ByteBuffer()
            operation.encode(into: &whole)
            let body = Array(whole.readableBytesView)
            for length in 0..<body.count {
                var cut = ByteBuffer(bytes: body.prefix(length))
                #expect(throws: WireError.self, "length \(length)") { try JournalOperation(decoding: &cut) }
                // The same inside a message whose length prefix agrees with the cut body.
                let message: [UInt8] =
                    [1, 0, 0, 0, 1] + withUnsafeBytes(of: UInt32(length).bigEndian, Array.init) + body.prefix(length)
                #expect(throws: WireError.self, "length \(length)") { try JournalMessage(decoding: message) }
            }
        }
        // Cut in the middle of the author's key, the case that once trapped.
        let author: [UInt8] = [1] + [UInt8](repeating: 0xaa, count: 32) + [UInt8](repeating: 0xbb, count: 7)
        #expect(throws: WireError.truncated(what: "operation author")) {
            try JournalMessage(decoding: [1, 0, 0, 0, 1, 0, 0, 0, UInt8(author.count)] + author)
        }
    }

    @Test("random bytes never trap the decoder; what decodes re-encodes to the same bytes")
    func randomBytesNeverTrap() {
        let seed = testSeed(0x10_52a7)
        var rng = SplitMix64(seed: seed)
        var decoded = 0
        for iteration in 0..<testIterations(20_000) {
            var input = DecoderPropertyTests.randomInput(using: &rng)
            // Bias towards real kind bytes and small counts, where the decoder has work to do.
            if !input.isEmpty { input[0] = UInt8.random(in: 0...8, using: &rng) }
            if input.count >= 5, Bool.random(using: &rng) {
                input.replaceSubrange(1..<5, with: [0, 0, 0, UInt8.random(in: 0...4, using: &rng)])
            }
            if let message = try? JournalMessage(decoding: input) {
                decoded += 1
                #expect(message.encoded == input, "seed \(seed) iteration \(iteration)")
            }
        }
        #expect(decoded > 0, "seed \(seed): some inputs (chunks, small lists) are valid")
    }

    @Test("mutated valid encodings never trap the decoder")
    func mutatedNeverTrap() {
        let seed = testSeed(0x3_0ba7)
        var rng = SplitMix64(seed: seed)
        // The 256 KiB chunk and the big operations would make every mutation slow: keep the small ones.
        let valid = Self.samples(using: &rng).map(\.encoded).filter { $0.count < 4096 }
        #expect(valid.count >= 15)
        var decoded = 0
        for iteration in 0..<testIterations(20_000) {
            let input = DecoderPropertyTests.mutate(valid[iteration % valid.count], using: &rng)
            if let message = try? JournalMessage(decoding: input) {
                decoded += 1
                #expect(message.encoded == input, "seed \(seed) iteration \(iteration)")
            }
        }
        #expect(decoded > 0, "seed \(seed)")
    }
}
