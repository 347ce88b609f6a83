#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import MeshCore
import MeshCrypto
import NIOCore

/// The files a node owns (Docs/ARCHITECTURE.md §Data dir). The directory is created 0700, the
/// key files 0600, and a `flock` on `node.lock` tells a live node from a leftover file: the
/// kernel drops the lock when its holder dies, however it dies.
public struct DataDirectory: Sendable {
    public static let formatVersion = "1"

    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    public var sessionSecretPath: String { path + "/session.key" }
    public var identityPath: String { path + "/identity.key" }
    public var formatVersionPath: String { path + "/format-version" }
    public var lockPath: String { path + "/node.lock" }
    public var controlSocketPath: String { path + "/control.sock" }
    public var chunksPath: String { path + "/chunks" }
    public var membersPath: String { path + "/members.json" }
    /// A `members.json` that could not be read, kept as it was found.
    public var damagedMembersPath: String { path + "/members.json.damaged" }
    /// The key epochs after the first (secrets inside, 0600).
    public var epochsPath: String { path + "/epochs.key" }
    /// Epochs that lost to a competing rotation, with their secrets (0600); absent when none.
    public var rivalsPath: String { path + "/rivals.key" }
    public var journalPath: String { path + "/journal.log" }
    /// Present once the session was ended: who ended it (`SessionEnd`, hex, then the name).
    public var endedPath: String { path + "/ended" }
    /// Present once the app left the session (`MeshSession.leave`): `SessionOffers` does not
    /// bring it back at the app's next start. A node started on the dir still rejoins.
    public var leftPath: String { path + "/left" }
    /// Present once this node was removed from the session: who removed it (`loadRemoved`).
    public var removedPath: String { path + "/removed" }
    /// The name given at the last start that gave one (`loadName`).
    public var namePath: String { path + "/name" }
    /// `run`'s settings, when kept here (`groupmesh run` reads it; the node never writes it).
    public var configurationPath: String { path + "/config.json" }
    /// Attachments whose manifest was found damaged at a start and is not stored again yet (hex
    /// ids, one a line): until then no start deletes chunks as unused.
    public var damagedManifestsPath: String { path + "/damaged-manifests" }
    /// Present when this dir made the session's secret: its node founded the session, and asks
    /// nobody for an introduction. Apart from `members.json`, which a damaged file resets.
    public var foundedPath: String { path + "/founded" }
    /// Present once a member answered this dir's join that its invite is out of date, while it
    /// had taken part in nothing: the next invite may replace its session (`loadOrCreateSession`).
    public var inviteOutOfDatePath: String { path + "/invite-out-of-date" }

    /// Whether writing `file` would overwrite one of the node's own files (or anything in its
    /// chunk store): `get --output` must not destroy the node it asks. Symbolic links and `..`
    /// are resolved through the file's directory.
    public func ownsFile(_ file: String) -> Bool {
        guard let home = Self.resolved(path) else { return false }
        let (directory, name) = Self.split(file)
        guard let parent = Self.resolved(directory) else { return false }
        if parent == home + "/chunks" || parent.hasPrefix(home + "/chunks/") { return true }
        guard parent == home else { return false }
        return ownFiles.map { Self.split($0).name }.contains(name)
    }

    /// The node's own files at the top of the dir (its keys among them).
    private var ownFiles: [String] {
        [
            sessionSecretPath, identityPath, formatVersionPath, lockPath, controlSocketPath, chunksPath,
            membersPath, epochsPath, journalPath, endedPath, leftPath, configurationPath, damagedManifestsPath,
            foundedPath, damagedMembersPath, removedPath, namePath, rivalsPath, inviteOutOfDatePath,
        ]
    }

    /// Whether the file open as `fd` is one of the node's own files at the top of the dir, by
    /// device and inode: whatever path reached it (a hard link, a link swapped in after a check).
    package func isOwnFile(descriptor fd: Int32) -> Bool {
        var opened = stat()
        guard fstat(fd, &opened) == 0 else { return false }
        return ownFiles.contains { file in
            var own = stat()
            return lstat(file, &own) == 0 && own.st_dev == opened.st_dev && own.st_ino == opened.st_ino
        }
    }

    private static func split(_ file: String) -> (directory: String, name: String) {
        guard let slash = file.lastIndex(of: "/") else { return (".", file) }
        let directory = String(file[..<slash])
        return (directory.isEmpty ? "/" : directory, String(file[file.index(after: slash)...]))
    }

    /// `path` with every link and `..` resolved; nil when it does not exist.
    static func resolved(_ path: String) -> String? {
        guard let real = realpath(path, nil) else { return nil }
        defer { free(real) }
        return String(cString: real)
    }

    /// Creates the directory (0700) if needed and checks or writes its format version.
    public func prepare() throws(GroupMeshError) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw .dataDirectory(path: path, reason: Self.errnoText())
        }
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw .dataDirectory(path: path, reason: "not a directory")
        }
        // A node run by another user (root, say) would leave files its owner cannot read or
        // remove, and would take over a session that is not its user's.
        guard info.st_uid == geteuid() else {
            throw .dataDirectory(
                path: path,
                reason: "it belongs to \(Self.userName(info.st_uid)), not to \(Self.userName(geteuid())) "
                    + "who runs this node; run the node as its owner, or give a --data-dir of your own")
        }
        // The dir holds secrets: a dir made beforehand (by a script, by mktemp) is closed to others too.
        if info.st_mode & 0o077 != 0, chmod(path, 0o700) != 0 {
            throw .dataDirectory(path: path, reason: "cannot make it private (chmod 700): \(Self.errnoText())")
        }
        if let existing = try readSmallFile(formatVersionPath) {
            let found = existing.trimmingCharacters()
            guard found == Self.formatVersion else { throw .dataDirectoryFormat(path: path, found: found) }
        } else {
            try writeSmallFile(formatVersionPath, Self.formatVersion + "\n")
        }
    }

    /// Takes the exclusive lock for a live node; the returned lock must be kept for the node's life.
    public func lock() throws(GroupMeshError) -> DataDirectoryLock {
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .dataDirectory(path: path, reason: Self.errnoText()) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = try? readSmallFile(lockPath)?.trimmingCharacters()
            close(fd)
            throw .dataDirectoryLocked(path: path, holder: holder?.isEmpty == false ? holder : nil)
        }
        let pid = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = pid.withCString { pwrite(fd, $0, strlen($0), 0) }
        return DataDirectoryLock(fd: fd)
    }

    /// Loads the session's key epochs (the secret joined with, then the rotations since), or
    /// stores `invited` when the dir has none, or founds a session with a new secret when there
    /// is no invite either. An invite for another session than the stored one (none of its
    /// epochs) is refused: one data dir, one session.
    package func loadOrCreateSession(invited: SessionSecret?) throws(GroupMeshError) -> KeyEpochs {
        if access(sessionSecretPath, F_OK) == 0 {
            let stored: SessionSecret
            do { stored = try SessionSecret.load(from: sessionSecretPath) } catch { throw .keyFile(error.description) }
            let epochs = try loadEpochs(origin: stored)
            if let invited, invited != stored, !epochs.holds(invited) {
                if epochs.forgot(invited.sessionID) { throw .inviteTooOld(path: path) }
                // A dir whose invite was out of date, and that took part in nothing, takes the next one.
                // The mark stays until a member lets the node in (`clearInviteOutOfDate`): a start
                // that fails here may take yet another invite.
                guard refusedAsOutOfDate else { throw .sessionMismatch(path: path) }
                do { try invited.write(to: sessionSecretPath) } catch { throw .keyFile(error.description) }
                return KeyEpochs(origin: invited)
            }
            return epochs
        }
        guard let invited else { return try foundSession(SessionSecret.generate()) }
        // A mark left by a founding that crashed before its key was written is not ours.
        guard unlink(foundedPath) == 0 || errno == ENOENT else {
            throw .dataDirectory(path: path, reason: "\(foundedPath): \(Self.errnoText())")
        }
        do { try invited.write(to: sessionSecretPath) } catch { throw .keyFile(error.description) }
        return KeyEpochs(origin: invited)
    }

    /// Makes `secret`, new, the session of this dir, which has none: founded here. The mark goes
    /// first, with the nonce the session's founding id is made from, so that a key on disk never
    /// lacks it.
    package func foundSession(_ secret: SessionSecret) throws(GroupMeshError) -> KeyEpochs {
        try markFounded(nonce: SecureRandom.bytes(FoundingID.nonceByteCount))
        do { try secret.write(to: sessionSecretPath) } catch { throw .keyFile(error.description) }
        return KeyEpochs(origin: secret)
    }

    /// Whether this dir holds a session it never took part in: a member answered its join that the
    /// invite was out of date (`markInviteOutOfDate`), and it met no member, took no key epoch,
    /// wrote nothing in the journal, and did not found it.
    var refusedAsOutOfDate: Bool { hasInviteOutOfDateMark && tookPartInNothing }

    /// Whether the dir met no member (that it remembers), took no key epoch, wrote nothing in the
    /// journal, and did not found its session.
    package var tookPartInNothing: Bool {
        guard !founded, access(epochsPath, F_OK) != 0 else { return false }
        var info = stat()
        if stat(journalPath, &info) == 0, info.st_size > 0 { return false }
        let remembered = loadRememberedMembers()
        return remembered.members.isEmpty && remembered.former.isEmpty
    }

    package var hasInviteOutOfDateMark: Bool { access(inviteOutOfDatePath, F_OK) == 0 }

    /// A member answered the join of a node that took part in nothing yet: its invite is out of date.
    package func markInviteOutOfDate() { try? writeSmallFile(inviteOutOfDatePath, "") }

    /// A member let the node in: whatever was said of its invite no longer holds.
    package func clearInviteOutOfDate() { unlink(inviteOutOfDatePath) }

    /// Takes back the session a start that failed made here (its key, and the mark if it founded
    /// it): nothing else of it was written yet.
    package func forgetUnstartedSession() {
        unlink(sessionSecretPath)
        unlink(foundedPath)
    }

    /// Whether this dir founded its session (`foundedPath`).
    package var founded: Bool { access(foundedPath, F_OK) == 0 }

    /// Marks the dir as the session's founder: when it makes the secret (with the nonce of its
    /// founding id, in hex), or when `members.json` of a dir made before the mark existed says so
    /// (no nonce: that session has no founding id).
    package func markFounded(nonce: [UInt8] = []) throws(GroupMeshError) {
        try writeSmallFile(foundedPath, nonce.isEmpty ? "" : Hex.encode(nonce) + "\n")
    }

    /// The nonce `markFounded` wrote; nil for a mark without one (or one that does not read).
    package func loadFoundingNonce() -> [UInt8]? {
        guard let text = try? readSmallFile(foundedPath, limit: 256),
            let nonce = Hex.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)),
            nonce.count == FoundingID.nonceByteCount
        else { return nil }
        return nonce
    }

    /// Whether this dir's session is the one `secret` belongs to (its first key, or a later epoch's).
    package func holdsSession(_ secret: SessionSecret) -> Bool {
        guard let stored = try? SessionSecret.load(from: sessionSecretPath) else { return false }
        if stored == secret { return true }
        return (try? loadEpochs(origin: stored))?.holds(secret) ?? false
    }

    /// Whether `secret` is of an epoch of this dir's session that its chain forgot (an invite too
    /// old to join with).
    package func forgot(_ secret: SessionSecret) -> Bool {
        guard let stored = try? SessionSecret.load(from: sessionSecretPath), stored != secret,
            let epochs = try? loadEpochs(origin: stored)
        else { return false }
        return !epochs.holds(secret) && epochs.forgot(secret.sessionID)
    }

    /// Whether the dir holds a session (its secret), ended or not.
    package var hasSession: Bool { access(sessionSecretPath, F_OK) == 0 }

    /// Whether something other than a directory is at the path (`prepare` then refuses it).
    var isOtherThanDirectory: Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) != S_IFDIR
    }

    private func loadEpochs(origin: SessionSecret) throws(GroupMeshError) -> KeyEpochs {
        guard access(epochsPath, F_OK) == 0 else { return KeyEpochs(origin: origin) }
        do {
            let bytes = try SecretFile.load(epochsPath, limit: KeyEpochs.maxFileBytes, what: "key epochs")
            var epochs = try KeyEpochs.decode(bytes, origin: origin)
            // The epochs that lost are what members hold too: a rivals file that does not load is
            // left out (the members hand them again), never a reason not to start.
            if access(rivalsPath, F_OK) == 0,
                let rivals = try? SecretFile.load(rivalsPath, limit: KeyEpochs.maxFileBytes, what: "rival epochs")
            {
                try? epochs.restoreRivals(rivals)
            }
            return epochs
        } catch let error as MeshCryptoError {
            throw .keyFile(error.description)
        } catch {
            throw .dataDirectory(
                path: path, reason: "\(epochsPath) is damaged (\(error)); restore it or rejoin with a new invite")
        }
    }

    package var wasLeft: Bool { access(leftPath, F_OK) == 0 }

    package func markLeft() { try? writeSmallFile(leftPath, "") }

    package func forgetLeft() { unlink(leftPath) }

    /// Who ended this data dir's session, when it was ended: its name as `members.json`
    /// remembers it (a member's own choice, escaped where it is shown) and the start of its id.
    package func loadEnded() -> String? {
        guard access(endedPath, F_OK) == 0 else { return nil }
        let text = (try? readSmallFile(endedPath))?.trimmingCharacters() ?? ""
        let id = text.split(separator: " ").first.map(String.init) ?? ""
        let author = String(id.prefix(12))
        guard author.count == 12, author.allSatisfy(\.isHexDigit) else { return "a member" }
        // Said to whoever ended it as such: an id of its own would read as somebody else's.
        let own = (try? NodeIdentity.load(from: identityPath))?.nodeID.hex.prefix(12)
        if own.map({ String($0) == author }) == true { return "this node" }
        let remembered = loadRememberedMembers()
        let name = (remembered.members + remembered.former).first { $0.id == id }?.name ?? ""
        return name.isEmpty ? author : "\(name.prefix(64)) (\(author))"
    }

    /// The signed end this dir's session was ended with, when its file holds one whole.
    package func loadEndedStatement() -> SessionEnd? {
        guard let text = (try? readSmallFile(endedPath))?.trimmingCharacters(),
            let hex = text.split(separator: " ").dropFirst().first,
            let bytes = Hex.decode(hex)
        else { return nil }
        var buffer = ByteBuffer(bytes: bytes)
        guard let statement = try? SessionEnd(decoding: &buffer), buffer.readableBytes == 0 else { return nil }
        return statement
    }

    /// The name the node was last started with (`--name`): a start without one keeps it. Nil
    /// when there is none, or what is there is no name a node could have been given.
    package func loadName() -> String? {
        guard let text = try? readSmallFile(namePath, limit: 256) else { return nil }
        let name = text.hasSuffix("\n") ? String(text.dropLast()) : text
        return NodeConfiguration.nameProblem(name) == nil ? name : nil
    }

    package func saveName(_ name: String) throws(GroupMeshError) {
        try writeSmallFile(namePath, name + "\n")
    }

    /// Who removed this node from the session (as the node named it), once a key epoch left it
    /// out: a start then refuses at once, rather than join and be told again.
    package func loadRemoved() -> String? {
        guard access(removedPath, F_OK) == 0 else { return nil }
        let text = (try? readSmallFile(removedPath))?.split(separator: "\n").first.map(String.init) ?? ""
        return text.isEmpty ? "a member" : String(text.prefix(80))
    }

    func saveRemoved(by member: String) {
        try? writeSmallFile(removedPath, member.replacingOccurrences(of: "\n", with: " ") + "\n")
    }

    /// The author's id, then the signed statement, in hex.
    func saveEnded(_ statement: [UInt8]) throws(GroupMeshError) {
        var buffer = ByteBuffer(bytes: statement)
        let author = (try? SessionEnd(decoding: &buffer))?.author.hex ?? "unknown"
        try writeSmallFile(endedPath, author + " " + statement.map { String(format: "%02x", $0) }.joined() + "\n")
    }

    package func loadOrCreateIdentity() throws(GroupMeshError) -> NodeIdentity {
        do {
            if access(identityPath, F_OK) == 0 { return try NodeIdentity.load(from: identityPath) }
            let identity = NodeIdentity.generate()
            try identity.write(to: identityPath)
            return identity
        } catch {
            throw .keyFile(error.description)
        }
    }

    // MARK: small files

    func readSmallFile(_ filePath: String, limit: Int = 4096) throws(GroupMeshError) -> String? {
        let fd = open(filePath, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw .dataDirectory(path: path, reason: "\(filePath): \(Self.errnoText())")
        }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: limit)
        var total = 0
        while total < limit {
            // safe: limit > 0
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + total, limit - total) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw .dataDirectory(path: path, reason: "\(filePath): \(Self.errnoText())") }
            if n == 0 { break }
            total += n
        }
        return String(decoding: buffer.prefix(total), as: UTF8.self)
    }

    func writeSmallFile(_ filePath: String, _ text: String) throws(GroupMeshError) {
        let temporary = filePath + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .dataDirectory(path: path, reason: "\(filePath): \(Self.errnoText())") }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, filePath) == 0 else {
            let reason = Self.errnoText()
            unlink(temporary)
            throw .dataDirectory(path: path, reason: "\(filePath): \(reason)")
        }
    }

    /// The attachments `damaged-manifests` names: none when absent, nil when it cannot be read
    /// whole (a line that is no id, a file over 1 MiB).
    func loadDamagedManifests() -> Set<SHA256Digest>? {
        let limit = 1 << 20
        guard let text = try? readSmallFile(damagedManifestsPath, limit: limit) else {
            return access(damagedManifestsPath, F_OK) == 0 ? nil : []
        }
        guard text.utf8.count < limit else { return nil }
        var ids = Set<SHA256Digest>()
        for line in text.split(separator: "\n") {
            guard let id = SHA256Digest(hex: line) else { return nil }
            ids.insert(id)
        }
        return ids
    }

    func saveDamagedManifests(_ ids: [SHA256Digest]) throws(GroupMeshError) {
        guard !ids.isEmpty else {
            guard unlink(damagedManifestsPath) == 0 || errno == ENOENT else {
                throw .dataDirectory(path: path, reason: "\(damagedManifestsPath): \(Self.errnoText())")
            }
            return
        }
        try writeSmallFile(damagedManifestsPath, ids.map(\.hex).joined(separator: "\n") + "\n")
    }

    /// What the node remembers of the members (`members.json`); nothing when absent or unreadable.
    package func loadRememberedMembers() -> RememberedMembers {
        decodedRememberedMembers() ?? RememberedMembers()
    }

    private func decodedRememberedMembers() -> RememberedMembers? {
        guard let text = try? readSmallFile(membersPath, limit: 4 << 20) else { return nil }
        return try? JSONDecoder().decode(RememberedMembers.self, from: Data(text.utf8))
    }

    /// A `rivals.key` that does not decode is removed; one that cannot be read now (its mode, a
    /// disk error) is left for the next start. Either way the start left it out (the members hand
    /// the epochs that lost again). The line to warn with, when it was.
    package func removeDamagedRivals() -> String? {
        guard access(rivalsPath, F_OK) == 0 else { return nil }
        let bytes: [UInt8]
        do {
            bytes = try SecretFile.load(rivalsPath, limit: KeyEpochs.maxFileBytes, what: "rival epochs")
        } catch {
            return "\(error.description); left out of this start: the key epochs that lost a removal race are "
                + "learnt from the members again"
        }
        var probe = KeyEpochs(origin: SessionSecret.generate())
        let problem: String
        do {
            try probe.restoreRivals(bytes)
            return nil
        } catch {
            problem = "\(error)"
        }
        unlink(rivalsPath)
        return "\(rivalsPath) cannot be read (\(problem)); removed: the key epochs that lost a removal race are "
            + "learnt from the members again"
    }

    /// A `members.json` that cannot be read is moved aside to `damagedMembersPath` (replacing an
    /// older one), not written over by the node that starts without it: what it held can still
    /// be read. The line to warn with, when it was.
    package func setAsideDamagedMembers() -> String? {
        guard access(membersPath, F_OK) == 0, decodedRememberedMembers() == nil else { return nil }
        guard rename(membersPath, damagedMembersPath) == 0 else {
            return
                "\(membersPath) cannot be read, nor moved aside (\(Self.errnoText())): this node remembers no members"
        }
        return "\(membersPath) cannot be read; kept as \(damagedMembersPath). This node remembers no members: "
            + "it rejoins through the invite or --join given"
    }

    /// The rivals first (dropped when there are none), then the chain, which is what a start
    /// needs: a failure before the chain is written changes no epoch, and rivals written beside
    /// a chain that never was are not read back as its field (`KeyEpochs.restoreRivals`).
    package func saveEpochs(_ files: KeyEpochs.Files) throws(GroupMeshError) {
        do {
            if files.rivals.isEmpty {
                guard unlink(rivalsPath) == 0 || errno == ENOENT else {
                    throw GroupMeshError.store("cannot remove \(rivalsPath): \(Self.errnoText())")
                }
            } else {
                try SecretFile.store(files.rivals, to: rivalsPath)
            }
            try SecretFile.store(files.chain, to: epochsPath)
        } catch let error as GroupMeshError {
            throw error
        } catch {
            throw .store("\(error)")
        }
    }

    func saveRememberedMembers(_ members: RememberedMembers) throws(GroupMeshError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard let data = try? encoder.encode(members) else { return }
        try writeSmallFile(membersPath, String(decoding: data, as: UTF8.self))
    }

    /// `name (uid N)`, or `uid N` when the user has no name.
    static func userName(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return "\(String(cString: name)) (uid \(uid))"
    }

    static func errnoText() -> String {
        String(cString: strerror(errno))
    }
}

/// Holds the data dir's `flock` until released or the process ends.
public final class DataDirectoryLock: @unchecked Sendable {
    private let mutex = NSLock()
    private var fd: Int32?

    init(fd: Int32) { self.fd = fd }

    /// The node of this data dir has stopped: another may take it (once, however often called).
    func release() {
        mutex.withLock {
            if let fd { close(fd) }
            fd = nil
        }
    }

    deinit { release() }
}

extension String {
    func trimmingCharacters() -> String {
        var scalars = Substring(self)
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}
