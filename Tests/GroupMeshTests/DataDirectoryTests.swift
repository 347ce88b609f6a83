import Foundation
import GroupMesh
import MeshCore
import MeshCrypto
import Testing

@Suite struct DataDirectoryTests {
    /// A prepared data dir `node` in a temporary root (the caller removes the root).
    static func preparedDirectory() throws -> (directory: DataDirectory, root: String) {
        let root = NSTemporaryDirectory() + "groupmesh-dd-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let directory = DataDirectory(path: root + "/node")
        try directory.prepare()
        return (directory, root)
    }

    /// Takes `times` rotations (removing nobody) out of `epochs`; the secrets they opened, in order.
    static func rotate(_ epochs: inout KeyEpochs, times: Int) throws -> [SessionSecret] {
        let author = try NodeIdentity(seed: [UInt8](repeating: 1, count: 32))
        var secrets: [SessionSecret] = []
        for _ in 0..<times {
            let transition = try epochs.rotation(
                removing: [], to: SessionSecret.generate(), live: [author.nodeID],
                authority: Ed25519Authority(identity: author))
            epochs.commit(transition)
            secrets.append(transition.secret)
        }
        return secrets
    }

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
            directory.membersPath, directory.controlSocketPath, directory.chunksPath, directory.foundedPath,
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

    @Test("the name a node was given is kept for the next start; what no node could be named is not read as one")
    func nameIsKept() throws {
        let root = NSTemporaryDirectory() + "groupmesh-dd-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let directory = DataDirectory(path: root)
        try directory.prepare()
        #expect(directory.loadName() == nil)
        try directory.saveName("party🎉 zoë")
        #expect(directory.loadName() == "party🎉 zoë")
        for bad in ["", "evil\u{1B}[2Jname", String(repeating: "x", count: 65), "two\nlines"] {
            #expect(FileManager.default.createFile(atPath: directory.namePath, contents: Data((bad + "\n").utf8)))
            #expect(directory.loadName() == nil, "\(bad.debugDescription) was read as a name")
        }
    }

    @Test(
        "an ended dir names its ender as members.json remembers it (a name of its own choosing, cut short), else by id"
    )
    func enderIsNamedAsRemembered() throws {
        let (directory, root) = try Self.preparedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(directory.loadEnded() == nil)
        let ender = try NodeIdentity(seed: [UInt8](repeating: 7, count: 32)).nodeID.hex
        #expect(FileManager.default.createFile(atPath: directory.endedPath, contents: Data((ender + " 00\n").utf8)))
        #expect(directory.loadEnded() == String(ender.prefix(12)))

        let hostile = "eve\u{1B}[2J" + String(repeating: "x", count: 100)
        var remembered = RememberedMembers()
        remembered.former = [.init(id: ender, name: hostile, addresses: [])]
        let json = try JSONEncoder().encode(remembered)
        #expect(FileManager.default.createFile(atPath: directory.membersPath, contents: json))
        let said = try #require(directory.loadEnded())
        #expect(said == "\(hostile.prefix(64)) (\(ender.prefix(12)))")
        // The library's line names it as it is; the CLI escapes the whole line where it prints it.
        let line = GroupMeshError.noNodeRunning(path: directory.path).description
        #expect(line.contains("the session was ended by \(hostile.prefix(64)) (\(ender.prefix(12)))"), "\(line)")
    }

    @Test(
        "a dir that makes the session's secret is marked its founder, one that takes an invite is not, whatever it held"
    )
    func foundingIsMarkedApartFromMembers() throws {
        let root = NSTemporaryDirectory() + "groupmesh-dd-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let founder = DataDirectory(path: root + "/founder")
        let joiner = DataDirectory(path: root + "/joiner")
        try founder.prepare()
        try joiner.prepare()
        let epochs = try founder.loadOrCreateSession(invited: nil)
        #expect(founder.founded)
        // A mark left behind by a founding that crashed before its key was written.
        try FileManager.default.copyItem(atPath: founder.foundedPath, toPath: joiner.foundedPath)
        _ = try joiner.loadOrCreateSession(invited: epochs.current)
        #expect(!joiner.founded, "a joiner kept a founding mark it did not make")
        // A damaged members.json changes neither.
        #expect(FileManager.default.createFile(atPath: founder.membersPath, contents: Data("{".utf8)))
        #expect(!founder.loadRememberedMembers().founder)
        #expect(try founder.loadOrCreateSession(invited: nil).current == epochs.current)
        #expect(try joiner.loadOrCreateSession(invited: epochs.current).current == epochs.current)
        #expect(founder.founded && !joiner.founded)
        // The mark holds the nonce of the session's founding id; one written for an older dir has none.
        let nonce = try #require(founder.loadFoundingNonce())
        #expect(nonce.count == FoundingID.nonceByteCount)
        try founder.markFounded()
        #expect(founder.founded && founder.loadFoundingNonce() == nil)
        #expect(FileManager.default.createFile(atPath: founder.foundedPath, contents: Data("not hex\n".utf8)))
        #expect(founder.loadFoundingNonce() == nil)
    }

    @Test(
        "the epochs that lost a race are kept beside the chain (0600) and loaded back; none: no file; a damaged one is left out"
    )
    func rivalEpochsAreKept() throws {
        let (directory, root) = try Self.preparedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        var epochs = try directory.loadOrCreateSession(invited: nil)
        let origin = epochs.current
        // Two members remove a third at once, each in its own rotation; this node hears both.
        let (first, second, gone, local) = try (
            NodeIdentity(seed: [UInt8](repeating: 1, count: 32)), NodeIdentity(seed: [UInt8](repeating: 2, count: 32)),
            NodeIdentity(seed: [UInt8](repeating: 3, count: 32)), NodeIdentity(seed: [UInt8](repeating: 4, count: 32))
        )
        let members: Set<NodeID> = [first.nodeID, second.nodeID, gone.nodeID, local.nodeID]
        for author in [first, second] {
            let authority = Ed25519Authority(identity: author)
            let transition = try KeyEpochs(origin: origin).rotation(
                removing: [gone.nodeID], to: SessionSecret.generate(), live: members, authority: authority)
            _ = epochs.accept(
                transition.rotation, secret: transition.secret, from: author.nodeID, localID: local.nodeID,
                members: members, authority: authority)
        }
        #expect(epochs.earlierSecrets.count == 2, "one rotation did not lose")
        try directory.saveEpochs(epochs.files)
        var info = stat()
        #expect(stat(directory.rivalsPath, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let loaded = try directory.loadOrCreateSession(invited: nil)
        #expect(loaded.current == epochs.current)
        #expect(loaded.encodedRivals() == epochs.encodedRivals())
        #expect(directory.ownsFile(directory.rivalsPath))
        // Readable by others: left out of the start, with a line, and kept.
        #expect(FileManager.default.createFile(atPath: directory.rivalsPath, contents: Data(epochs.files.rivals)))
        #expect(try directory.loadOrCreateSession(invited: nil).encodedRivals().isEmpty)
        #expect(directory.removeDamagedRivals()?.contains("left out of this start") == true)
        #expect(FileManager.default.fileExists(atPath: directory.rivalsPath))
        // Damaged: the chain still loads, without what lost.
        try SecretFile.store(Array("GMRV".utf8), to: directory.rivalsPath)
        let damaged = try directory.loadOrCreateSession(invited: nil)
        #expect(damaged.current == epochs.current && damaged.encodedRivals().isEmpty)
        #expect(directory.removeDamagedRivals()?.contains("cannot be read") == true)
        #expect(!FileManager.default.fileExists(atPath: directory.rivalsPath))
        try directory.saveEpochs(epochs.files)
        #expect(directory.removeDamagedRivals() == nil, "a whole file is kept")
        // Nothing lost any more (a chain without rivals): the file goes.
        try directory.saveEpochs(KeyEpochs(origin: origin).files)
        #expect(!FileManager.default.fileExists(atPath: directory.rivalsPath))
    }

    @Test(
        "a chain past its bound is stored from the first epoch kept: it loads back, and an invite of a kept epoch is this session's, of a forgotten one too old"
    )
    func aLongChainIsKeptFromItsFirstEpoch() throws {
        let (directory, root) = try Self.preparedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        var epochs = try directory.loadOrCreateSession(invited: nil)
        let joined = epochs.current
        let secrets = try Self.rotate(&epochs, times: KeyEpochs.maxTransitions + 5)
        try directory.saveEpochs(epochs.files)
        let loaded = try directory.loadOrCreateSession(invited: nil)
        #expect(loaded.current == epochs.current && loaded.origin == epochs.origin)
        #expect(loaded.transitions == epochs.transitions)
        #expect(directory.holdsSession(epochs.origin) && directory.holdsSession(epochs.current))
        #expect(directory.holdsSession(joined), "the secret joined with is still the dir's own")
        #expect(!directory.holdsSession(SessionSecret.generate()))
        #expect(try directory.loadOrCreateSession(invited: epochs.origin).current == epochs.current)
        #expect(throws: GroupMeshError.sessionMismatch(path: directory.path)) {
            try directory.loadOrCreateSession(invited: SessionSecret.generate())
        }
        // An invite of a forgotten epoch is this session's, too old: said so, not "another session".
        #expect(!directory.holdsSession(secrets[1]) && directory.forgot(secrets[1]) && !directory.forgot(epochs.origin))
        #expect(throws: GroupMeshError.inviteTooOld(path: directory.path)) {
            try directory.loadOrCreateSession(invited: secrets[1])
        }
    }

    @Test(
        "a dir told its invite is out of date takes the next invite, and the one after, until a member lets it in; one that took part never"
    )
    func outOfDateInviteIsReplacedOnlyByADirThatTookNoPart() throws {
        let (directory, root) = try Self.preparedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let invites = (0..<4).map { _ in SessionSecret.generate() }
        _ = try directory.loadOrCreateSession(invited: invites[0])
        #expect(throws: GroupMeshError.self) { try directory.loadOrCreateSession(invited: invites[1]) }
        directory.markInviteOutOfDate()
        #expect(try directory.loadOrCreateSession(invited: invites[1]).origin == invites[1])
        // A start with it that failed (a port in use) may still take another.
        #expect(directory.hasInviteOutOfDateMark)
        #expect(try directory.loadOrCreateSession(invited: invites[2]).origin == invites[2])
        // Let in: the dir takes part from now on.
        directory.clearInviteOutOfDate()
        #expect(throws: GroupMeshError.self) { try directory.loadOrCreateSession(invited: invites[3]) }
        // Told again, but it met members already (`members.json`): no other session.
        directory.markInviteOutOfDate()
        let met =
            #"{"incarnation": 1, "members": [{"id": "\#(String(repeating: "ab", count: 16))", "name": "m", "addresses": []}]}"#
        try met.write(toFile: directory.membersPath, atomically: true, encoding: .utf8)
        #expect(!directory.tookPartInNothing)
        #expect(throws: GroupMeshError.self) { try directory.loadOrCreateSession(invited: invites[3]) }
        #expect(try directory.loadOrCreateSession(invited: nil).origin == invites[2])
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
