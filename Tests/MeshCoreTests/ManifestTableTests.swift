import MeshCrypto
import Testing

@testable import MeshCore

@Suite("Manifest table")
struct ManifestTableTests {
    static func digest(_ value: UInt64) -> SHA256Digest { SHA256Digest(words: value, 0, 0, 0) }

    @Test("every chunk is located on insert; a removal moves a shared chunk to the manifest that still has it")
    func locationsFollowInsertsAndRemovals() {
        let (a, b, c, shared) = (Self.digest(1), Self.digest(2), Self.digest(3), Self.digest(9))
        let first = Manifest(size: 3 << 18, chunkSize: 1 << 18, chunks: [a, shared, b])
        let second = Manifest(size: 2 << 18, chunkSize: 1 << 18, chunks: [shared, c])
        var table = ManifestTable([first, second])
        #expect(table.byID.count == 2)
        #expect(table.location(of: b) == ChunkRef(attachment: first.id, index: 2))
        #expect(table.location(of: c) == ChunkRef(attachment: second.id, index: 1))
        #expect(table.location(of: shared) != nil)
        table.remove(first.id)
        #expect(table[first.id] == nil && table.location(of: a) == nil && table.location(of: b) == nil)
        #expect(table.location(of: shared) == ChunkRef(attachment: second.id, index: 0), "still held by the second")
        table.remove(second.id)
        #expect(table.locations.isEmpty)
        table.insert(first)
        table.insert(first)
        #expect(table.byID.count == 1 && table.locations.count == 3)
    }
}
