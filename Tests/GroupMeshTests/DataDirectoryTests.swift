import Foundation
import GroupMesh
import Testing

@Suite struct DataDirectoryTests {
    @Test("the node's own files, and anything in its chunk store, are recognised through links and '..'; other files are not")
    func ownsFile() throws {
        let root = NSTemporaryDirectory() + "groupmesh-dd-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let directory = DataDirectory(path: root + "/node")
        try directory.prepare()
        try FileManager.default.createDirectory(atPath: directory.chunksPath + "/ab", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: directory.path)

        for own in [directory.journalPath, directory.identityPath, directory.sessionSecretPath, directory.epochsPath,
                    directory.membersPath, directory.controlSocketPath, directory.chunksPath,
                    directory.chunksPath + "/ab/abcdef", root + "/link/journal.log", directory.chunksPath + "/../session.key"] {
            #expect(directory.ownsFile(own), "\(own)")
        }
        for other in [directory.path + "/out.bin", root + "/journal.log", root + "/link/out.bin", "/tmp/x", "relative.bin",
                      root + "/missing-dir/journal.log"] {
            #expect(!directory.ownsFile(other), "\(other)")
        }
    }
}
