import Foundation
import GroupMesh
import Testing

@Suite struct DataDirectoryTests {
    @Test(
        "the node's own files, and anything in its chunk store, are recognised through links and '..'; other files are not"
    )
    func ownsFile() throws {
        let root = NSTemporaryDirectory() + "groupmesh-dd-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let directory = DataDirectory(path: root + "/node")
        try directory.prepare()
        try FileManager.default.createDirectory(atPath: directory.chunksPath + "/ab", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: directory.path)

        for own in [
            directory.journalPath, directory.identityPath, directory.sessionSecretPath, directory.epochsPath,
            directory.membersPath, directory.controlSocketPath, directory.chunksPath,
            directory.chunksPath + "/ab/abcdef", root + "/link/journal.log", directory.chunksPath + "/../session.key",
        ] {
            #expect(directory.ownsFile(own), "\(own)")
        }
        for other in [
            directory.path + "/out.bin", root + "/journal.log", root + "/link/out.bin", "/tmp/x", "relative.bin",
            root + "/missing-dir/journal.log",
        ] {
            #expect(!directory.ownsFile(other), "\(other)")
        }
    }

    @Test("a data dir that belongs to another user is refused, and left as it was")
    func othersDataDirectoryIsRefused() throws {
        guard geteuid() == 0 else {
            print("skipped: giving a directory to another user needs root")
            return
        }
        let root = NSTemporaryDirectory() + "groupmesh-dd-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        #expect(chmod(root, 0o755) == 0 && chown(root, 65534, 65534) == 0)
        do {
            try DataDirectory(path: root).prepare()
            Issue.record("root prepared a data dir of uid 65534")
        } catch {
            #expect(error.description.contains("belongs to"), "\(error)")
            #expect(error.description.contains("(uid 65534)"), "\(error)")
        }
        var info = stat()
        #expect(stat(root, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o755, "its mode was changed")
        #expect(
            (try? FileManager.default.contentsOfDirectory(atPath: root))?.isEmpty == true, "files were written in it")
        // Its owner may.
        #expect(chown(root, 0, 0) == 0)
        try DataDirectory(path: root).prepare()
    }
}
