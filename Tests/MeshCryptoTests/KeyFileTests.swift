#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Testing
@testable import MeshCrypto

@Suite struct KeyFileTests {
    @Test func sessionSecretIsWrittenWithMode0600AndLoadsBack() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("session.key")
        let secret = SessionSecret.generate()
        try secret.write(to: path)
        #expect(permissionBits(path) == 0o600)
        #expect(try SessionSecret.load(from: path) == secret)
        // Nothing else is left in the directory (no temporary file).
        #expect(dir.names() == ["session.key"])
    }

    @Test func identityIsWrittenWithMode0600AndLoadsBack() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("identity.key")
        let identity = NodeIdentity.generate()
        try identity.write(to: path)
        #expect(permissionBits(path) == 0o600)
        let loaded = try NodeIdentity.load(from: path)
        #expect(loaded.nodeID == identity.nodeID)
        #expect(loaded.publicKey == identity.publicKey)
        #expect(loaded.sign([1]) == identity.sign([1]))
        #expect(dir.names() == ["identity.key"])
    }

    @Test func overwritingAWorldReadableFileLeavesMode0600() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("session.key")
        try writeRaw([UInt8](repeating: 1, count: 32), to: path, mode: 0o644)
        #expect(permissionBits(path) == 0o644)
        let secret = SessionSecret.generate()
        try secret.write(to: path)
        #expect(permissionBits(path) == 0o600)
        #expect(try SessionSecret.load(from: path) == secret)
    }

    @Test func aLeftoverTemporaryFileDoesNotBlockWriting() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("session.key")
        try writeRaw([1, 2, 3], to: path + ".tmp", mode: 0o644)
        let secret = SessionSecret.generate()
        try secret.write(to: path)
        #expect(try SessionSecret.load(from: path) == secret)
        #expect(dir.names() == ["session.key"])
    }

    @Test(arguments: [0o644, 0o640, 0o604, 0o660, 0o606, 0o777, 0o601, 0o610])
    func filesOthersCanAccessAreRefused(mode: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("session.key")
        try writeRaw([UInt8](repeating: 1, count: 32), to: path, mode: mode_t(mode))
        #expect(throws: MeshCryptoError.keyFilePermissions(path: path, mode: UInt32(mode))) {
            try SessionSecret.load(from: path)
        }
        #expect(throws: MeshCryptoError.keyFilePermissions(path: path, mode: UInt32(mode))) {
            try NodeIdentity.load(from: path)
        }
    }

    @Test(arguments: [0o600, 0o400])
    func ownerOnlyModesAreAccepted(mode: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("session.key")
        try writeRaw([UInt8](repeating: 1, count: 32), to: path, mode: mode_t(mode))
        #expect(try SessionSecret.load(from: path).bytes == [UInt8](repeating: 1, count: 32))
    }

    @Test(arguments: [0, 1, 31, 33, 64, 4096])
    func wrongLengthIsRefused(length: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("key")
        try writeRaw([UInt8](repeating: 1, count: length), to: path, mode: 0o600)
        let secretError = #expect(throws: MeshCryptoError.self) { try SessionSecret.load(from: path) }
        guard case let .keyFile(errorPath, reason)? = secretError else {
            Issue.record("expected .keyFile, got \(String(describing: secretError))")
            return
        }
        #expect(errorPath == path)
        #expect(reason.contains("expected 32"))
        let identityError = #expect(throws: MeshCryptoError.self) { try NodeIdentity.load(from: path) }
        guard case .keyFile? = identityError else {
            Issue.record("expected .keyFile, got \(String(describing: identityError))")
            return
        }
    }

    @Test func missingFileIsAKeyFileError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let error = #expect(throws: MeshCryptoError.self) { try SessionSecret.load(from: dir.file("absent")) }
        guard case .keyFile? = error else {
            Issue.record("expected .keyFile, got \(String(describing: error))")
            return
        }
    }

    @Test func writingIntoAMissingDirectoryIsAKeyFileError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let error = #expect(throws: MeshCryptoError.self) {
            try SessionSecret.generate().write(to: dir.file("no/such/dir/key"))
        }
        guard case .keyFile? = error else {
            Issue.record("expected .keyFile, got \(String(describing: error))")
            return
        }
    }

    @Test func permissionErrorTellsHowToFixIt() {
        let error = MeshCryptoError.keyFilePermissions(path: "/x/session.key", mode: 0o644)
        #expect(error.description.contains("644"))
        #expect(error.description.contains("chmod 600 /x/session.key"))
    }
}
