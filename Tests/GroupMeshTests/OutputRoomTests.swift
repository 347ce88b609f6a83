import Foundation
@testable import GroupMesh
import Testing

/// Before a `get` fetches anything, the output's disk must have room for the file and for the
/// chunks still to fetch: a failure found after 100 MiB of fetching is a failure said too late.
@Suite struct OutputRoomTests {
    static func scratch() throws -> String {
        let path = NSTemporaryDirectory() + "groupmesh-room-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path + "/chunks", withIntermediateDirectories: true)
        return path
    }

    @Test("room for the file and the chunks passes; more than the disk holds is refused before anything is fetched")
    func roomIsCheckedFirst() throws {
        let path = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let free = try #require(OutputPath.freeBytes(path))
        try OutputPath.checkRoom(
            for: path + "/out.bin", size: 1 << 20, fetching: 1 << 20, storeDirectory: path + "/chunks")
        // Each fits alone, not both: the output and the data dir share this disk.
        #expect {
            try OutputPath.checkRoom(
                for: path + "/out.bin", size: free / 2 + (1 << 30), fetching: free / 2 + (1 << 30),
                storeDirectory: path + "/chunks")
        } throws: { error in
            "\(error)".contains("not enough space for \(path)/out.bin and the chunks")
                && "\(error)".contains("nothing was fetched")
        }
        #expect(throws: GroupMeshError.self) {
            try OutputPath.checkRoom(
                for: path + "/out.bin", size: free + (1 << 30), fetching: 0, storeDirectory: path + "/chunks")
        }
    }

    @Test("a directory the node may not write in is refused before anything is fetched")
    func unwritableDirectory() throws {
        let path = try Self.scratch()
        defer {
            chmod(path + "/ro", 0o755)
            try? FileManager.default.removeItem(atPath: path)
        }
        try FileManager.default.createDirectory(atPath: path + "/ro", withIntermediateDirectories: false)
        chmod(path + "/ro", 0o555)
        // Root may write anywhere: what holds for it is that it is not refused.
        let refused =
            (try? OutputPath.checkRoom(
                for: path + "/ro/out.bin", size: 1, fetching: 0, storeDirectory: path + "/chunks")) == nil
        #expect(refused == (geteuid() != 0), "refused: \(refused) as uid \(geteuid())")
    }
}
