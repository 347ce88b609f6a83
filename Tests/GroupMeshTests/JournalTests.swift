import Foundation
import GroupMesh
import MeshStore
import MeshTestKit
import Testing

/// The Journal API, in process, on loopback.
@Suite("Journal", .serialized)
struct JournalTests {

    static func current(_ journal: Journal) async -> [GroupMesh.Attachment] {
        var iterator = await journal.attachments.makeAsyncIterator()
        return await iterator.next() ?? []
    }

    @Test("every member sees an attachment; another loads identical bytes; metadata; remove everywhere")
    func addLoadRemove() async throws {
        let sessions = try await MessengerTests.cluster(["ida", "jon", "kim"])
        defer { Task { await MessengerTests.tearDown(sessions) } }
        let journals = sessions.map(Journal.init)
        let bytes = Data((0..<700_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })
        let attachment = try await journals[0].add(bytes, metadata: Data(#"{"title":"seven hundred k"}"#.utf8))
        #expect(attachment.id.count == 32 && attachment.contentHash.count == 64)
        #expect(attachment.size == 700_000)
        for journal in journals {
            try await waitUntil("everyone lists it") { await Self.current(journal).map(\.id) == [attachment.id] }
        }
        #expect(try await journals[2].load(attachment) == bytes)
        #expect(try await journals[1].loadMetadata(of: attachment) == Data(#"{"title":"seven hundred k"}"#.utf8))

        // The same bytes added again are another attachment, with its own metadata, over the
        // same content (stored and sent once).
        let again = try await journals[1].add(bytes, metadata: Data(#"{"title":"again"}"#.utf8))
        #expect(again.id != attachment.id && again.contentHash == attachment.contentHash)
        for journal in journals {
            try await waitUntil("everyone lists both") {
                Set(await Self.current(journal).map(\.id)) == [attachment.id, again.id]
            }
        }
        #expect(try await journals[2].loadMetadata(of: attachment) == Data(#"{"title":"seven hundred k"}"#.utf8))
        #expect(try await journals[2].loadMetadata(of: again) == Data(#"{"title":"again"}"#.utf8))

        // Removing one leaves the other, whole and loadable.
        try await journals[2].remove(attachment)
        for journal in journals {
            try await waitUntil("only the second is left") { await Self.current(journal).map(\.id) == [again.id] }
        }
        #expect(try await journals[0].load(again) == bytes)
        #expect(try await again.load(Data.self) == bytes)
        try await journals[0].remove(again)
        for journal in journals {
            try await waitUntil("gone everywhere") { await Self.current(journal).isEmpty }
        }
        await #expect(throws: GroupMeshError.self) { _ = try await journals[0].load(attachment) }
    }

    @Test("an attachment shows who holds it; waitForHolders returns once enough others do", .timeLimit(.minutes(1)))
    func availabilityAndHolders() async throws {
        let sessions = try await MessengerTests.cluster(["uma", "vic", "wes"])
        defer { Task { await MessengerTests.tearDown(sessions) } }
        let journals = sessions.map(Journal.init)
        let attachment = try await journals[0].add(Data(repeating: 7, count: 600_000))
        let uploader = await sessions[0].localParticipant
        #expect(attachment.state == .available && attachment.holders == [uploader])
        let held = try await journals[0].waitForHolders(of: attachment, atLeast: 2)
        var everyone: Set<Participant> = []
        for session in sessions { everyone.insert(await session.localParticipant) }
        #expect(held.holders == everyone, "\(held.holders)")
        try await journals[1].remove(attachment)
        await #expect(throws: GroupMeshError.self) { try await journals[2].waitForHolders(of: attachment, atLeast: 5) }
    }

    struct Drawing: Codable, Equatable, Sendable { var title: String; var strokes: Int }
    struct Photo: Codable, Sendable { var camera: String }

    @Test("typed metadata: added as one Codable type, loaded as it elsewhere; as another type, a typed error")
    func typedMetadata() async throws {
        let sessions = try await MessengerTests.cluster(["ida", "ole"])
        defer { Task { await MessengerTests.tearDown(sessions) } }
        let journals = sessions.map(Journal.init)
        let drawing = Drawing(title: "cat", strokes: 12)
        let attachment = try await journals[0].add(Data("pixels".utf8), metadata: drawing)
        try await waitUntil("ole lists it") { await Self.current(journals[1]).count == 1 }
        #expect(try await journals[1].loadMetadata(Drawing.self, of: attachment) == drawing)
        await #expect(throws: GroupMeshError.metadataType(attachment: attachment.id, type: "Photo")) {
            _ = try await journals[1].loadMetadata(Photo.self, of: attachment)
        }
        // Raw bytes as before: the JSON as stored.
        #expect(
            String(decoding: try await journals[1].loadMetadata(of: attachment), as: UTF8.self)
                == #"{"strokes":12,"title":"cat"}"#)
    }

    /// An app's generic helper: `Data` reaches the journal as a type parameter, not as `Data`.
    static func addGeneric<Metadata: Encodable>(
        _ journal: Journal, metadata: Metadata
    ) async throws -> GroupMesh.Attachment {
        try await journal.add(Data("generic".utf8), metadata: metadata)
    }

    static func loadGeneric<Metadata: Decodable>(
        _ attachment: GroupMesh.Attachment, as type: Metadata.Type
    ) async throws -> Metadata {
        try await attachment.loadMetadata(of: type)
    }

    @Test("metadata added as Data comes back through loadMetadata(of: Data.self) as those bytes, in generic code too")
    func dataMetadata() async throws {
        let sessions = try await MessengerTests.cluster(["pia", "rex"])
        defer { Task { await MessengerTests.tearDown(sessions) } }
        let journals = sessions.map(Journal.init)
        let bytes = Data([0x00, 0xff, 0x7b, 0x22])  // not JSON, not UTF-8
        let plain = try await journals[0].add(Data("pixels".utf8), metadata: bytes)
        let generic = try await Self.addGeneric(journals[0], metadata: bytes)
        try await waitUntil("rex lists both") { await Self.current(journals[1]).count == 2 }
        let seen = await Self.current(journals[1])
        for attachment in [plain, generic] {
            let there = try #require(seen.first { $0.id == attachment.id })
            #expect(try await there.loadMetadata(of: Data.self) == bytes)
            #expect(try await Self.loadGeneric(there, as: Data.self) == bytes)
            #expect(try await journals[1].loadMetadata(Data.self, of: there) == bytes)
            #expect(try await there.loadMetadata() == bytes)
        }
        // Typed metadata still decodes as its type, and Data of it is its JSON.
        let typed = try await journals[0].add(Data("x".utf8), metadata: Drawing(title: "dog", strokes: 3))
        #expect(try await typed.loadMetadata(of: Drawing.self) == Drawing(title: "dog", strokes: 3))
        #expect(try await typed.loadMetadata(of: Data.self) == Data(#"{"strokes":3,"title":"dog"}"#.utf8))
    }

    @Test("a file is added streamed and loaded to a file; over the limit is refused before storing")
    func files() async throws {
        let sessions = try await MessengerTests.cluster(["lea", "max"])
        defer { Task { await MessengerTests.tearDown(sessions) } }
        let journals = sessions.map(Journal.init)
        let directory = NodeProcess.makeTemporaryDirectory("files")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let source = URL(fileURLWithPath: directory + "/source.bin")
        let bytes = Data((0..<1_300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: source)
        let attachment = try await journals[0].add(contentsOf: source)
        let target = URL(fileURLWithPath: directory + "/target.bin")
        try await waitUntil("max lists it") { await Self.current(journals[1]).count == 1 }
        try await journals[1].load(attachment, to: target)
        #expect(try Data(contentsOf: target) == bytes)

        // The node's limit is configurable; a file over it is refused and nothing is stored.
        var smallConfiguration = MeshSessionTests.configuration("small")
        smallConfiguration.maxAttachmentSize = 1000
        let configuration = smallConfiguration
        let small = try await MeshSession.join(configuration)
        let smallPath = configuration.dataDirectory.path
        defer {
            Task {
                await small.leave(); try? FileManager.default.removeItem(atPath: smallPath)
            }
        }
        await #expect(throws: GroupMeshError.attachmentTooLarge(size: 1_300_000, limit: 1000)) {
            _ = try await Journal(session: small).add(contentsOf: source)
        }
        let stored = ChunkStore.survey(configuration.dataDirectory.chunksPath)
        #expect(stored.isEmpty, "no chunk was stored: \(stored.keys)")
    }
}

@Suite("Journal memory", .serialized)
struct JournalMemoryTests {
    static func residentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return kilobytes * 1024
    }

    @Test("adding a 48 MiB file streams it: resident memory grows far less than the file")
    func addingALargeFileKeepsMemoryFlat() async throws {
        let directory = NodeProcess.makeTemporaryDirectory("memory")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/large.bin"
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var block = [UInt8](repeating: 0, count: 256 * 1024)
        for index in 0..<192 {  // 48 MiB, every chunk different
            for offset in stride(from: 0, to: block.count, by: 8) {
                block[offset] = UInt8(truncatingIfNeeded: index &+ offset / 8)
            }
            try handle.write(contentsOf: Data(block))
        }
        try handle.close()
        let session = try await MeshSession.join(MeshSessionTests.configuration("memory"))
        defer {
            Task {
                await session.leave();
                try? FileManager.default.removeItem(atPath: session.node.configuration.dataDirectory.path)
            }
        }
        let before = Self.residentBytes()
        let attachment = try await Journal(session: session).add(contentsOf: URL(fileURLWithPath: path))
        let growth = Self.residentBytes() - before
        #expect(attachment.size == 48 * 1024 * 1024)
        #expect(growth < 24 * 1024 * 1024, "resident memory grew by \(growth >> 20) MiB while adding 48 MiB")
    }
}
