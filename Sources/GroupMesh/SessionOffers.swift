#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import Logging
import MeshCrypto

/// The sessions an app is offered, as GroupActivities' `sessions()`: each session handed to it
/// (an invite as text, an invite file dropped in `inbox`, a new session it starts, or one it was
/// in when it last ran) comes out of `sessions()` as a ``MeshSession`` in `waiting`, to be set
/// up and joined.
///
/// ```swift
/// let offers = try SessionOffers(root: appSupport + "/sessions", configuration: template)
/// Task {
///     for await session in await offers.sessions() {
///         configureMessengerAndJournal(for: session)   // subscribe first: nothing is missed
///         try await session.join()
///     }
/// }
/// try await offers.offer(Invite(pastedText))           // or: try await offers.startSession()
/// ```
///
/// Each session lives in a data dir of its own under `root`, named by the session's id, so the
/// same invite offered again (or a later key epoch's) opens the same dir, and one app can be in
/// several sessions in turn or at once (give the template `listenPort` 0, or one session binds
/// the port the next needs).
public actor SessionOffers {
    /// Sessions made but not yet taken from `sessions()`; an offer past this is refused.
    public static let maxWaiting = 16
    /// Inbox files read in one look (every `inboxInterval`); the rest wait for the next.
    static let inboxFilesPerLook = 16
    static let inboxInterval = Duration.milliseconds(250)

    public nonisolated let root: String
    /// Invite files put here (written elsewhere and renamed in, so never read half-written) are
    /// offered once, then removed; a file that is not an invite is renamed `NAME.refused` and
    /// said in the log. Looked at while `sessions()` is read.
    public nonisolated var inbox: String { root + "/inbox" }

    private let template: NodeConfiguration
    private let logger: Logger
    private var stream: AsyncStream<MeshSession>
    private var continuation: AsyncStream<MeshSession>.Continuation
    private var reading = false
    private var reopened = false
    private var inboxWatch: Task<Void, Never>?
    /// The sessions handed out, by data dir: one still open is not opened twice.
    private var handedOut: [String: WeakSession] = [:]
    /// Data dirs whose node is being set up (an offer waits for its socket meanwhile).
    private var opening: Set<String> = []

    /// `configuration` is the template of every session's node (its `dataDirectory` and `invite`
    /// are replaced per session). Creates `root` and its inbox (0700) when missing.
    public init(
        root: String, configuration: NodeConfiguration,
        logger: Logger = Logger(label: "groupmesh.offers")
    ) throws(GroupMeshError) {
        self.root = root.count > 1 && root.hasSuffix("/") ? String(root.dropLast()) : root
        template = configuration
        self.logger = logger
        (stream, continuation) = AsyncStream.makeStream(
            of: MeshSession.self, bufferingPolicy: .bufferingOldest(Self.maxWaiting))
        for path in [self.root, self.root + "/inbox"] where mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw .dataDirectory(path: path, reason: String(cString: strerror(errno)))
        }
    }

    deinit {
        inboxWatch?.cancel()
        continuation.finish()
    }

    /// The offered sessions, each once, as they come: first those this app was in when it last ran
    /// (neither ended nor left), then every offer. One reader at a time: a second call ends the first
    /// sequence. Ends when this value is released.
    public func sessions() -> AsyncStream<MeshSession> {
        if reading {
            continuation.finish()
            (stream, continuation) = AsyncStream.makeStream(
                of: MeshSession.self, bufferingPolicy: .bufferingOldest(Self.maxWaiting))
        }
        reading = true
        if !reopened {
            reopened = true
            reopenKnownSessions()
        }
        if inboxWatch == nil {
            inboxWatch = Task { [weak self] in
                while !Task.isCancelled {
                    await self?.readInbox()
                    try? await Task.sleep(for: Self.inboxInterval)
                }
            }
        }
        return stream
    }

    /// Offers the session `invite` is for: it comes out of `sessions()`, ready to join. Returns
    /// false, offering nothing, when that session is already handed out and open. Throws when
    /// the session cannot be set up (its data dir, its socket) or was ended.
    @discardableResult
    public func offer(_ invite: Invite) async throws(GroupMeshError) -> Bool {
        let secret = invite.token.secret
        let existing = existingDirectory(holding: secret)
        // An invite of an epoch a dir here forgot: too old, said before anything changes.
        if existing == nil,
            let old = Self.sessionDirectories(in: root).first(where: { DataDirectory(path: $0).forgot(secret) })
        {
            throw .inviteTooOld(path: old)
        }
        let path = existing ?? directory(for: secret.sessionID)
        // Offered again: a session this app left is its to rejoin.
        DataDirectory(path: path).forgetLeft()
        return try await open(path, invite: invite, madeHere: existing == nil)
    }

    /// Offers the invite in the file at `path` (text, as `groupmesh invite` prints it).
    @discardableResult
    public func offer(file path: String) async throws(GroupMeshError) -> Bool {
        try await offer(try Invite(file: path))
    }

    /// Starts a new session (GroupActivities' `activate()`): it comes out of `sessions()` like any
    /// offer, and `session.invite()` gives its invite once it has joined.
    public func startSession() async throws(GroupMeshError) {
        let secret = SessionSecret.generate()
        let path = directory(for: secret.sessionID)
        let directory = DataDirectory(path: path)
        do {
            try directory.prepare()
            _ = try directory.foundSession(secret)
        } catch {
            Self.removeDirectory(path)
            throw error
        }
        _ = try await open(path, invite: nil, madeHere: true)
    }

    // MARK: opening

    /// `madeHere`: the data dir is this call's own, and goes if the session cannot be handed out
    /// (so that it does not come back as a session of the last run).
    private func open(_ path: String, invite: Invite?, madeHere: Bool) async throws(GroupMeshError) -> Bool {
        if let earlier = handedOut[path]?.session, await !earlier.state.isInvalidated { return false }
        guard opening.insert(path).inserted else { return false }
        defer { opening.remove(path) }
        var configuration = template
        configuration.dataDirectory = DataDirectory(path: path)
        configuration.invite = invite
        let session: MeshSession
        do {
            session = try await MeshSession(configuration, logger: logger)
        } catch {
            if madeHere { Self.removeDirectory(path) }
            throw error
        }
        // A session nobody takes is dropped here, and its node gives its socket back.
        guard case .enqueued = continuation.yield(session) else {
            if madeHere {
                await session.node.stopIfWaiting()
                Self.removeDirectory(path)
            }
            throw .offerNotTaken(waiting: Self.maxWaiting)
        }
        handedOut[path] = WeakSession(session)
        return true
    }

    private static func removeDirectory(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }

    private func directory(for session: SessionID) -> String { root + "/" + session.description }

    /// The data dirs under `root` that hold a session, this one's inbox aside.
    private static func sessionDirectories(in root: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return names.sorted().filter { $0.count == 16 && $0.allSatisfy(\.isHexDigit) }.map { root + "/" + $0 }
            .filter { DataDirectory(path: $0).hasSession }
    }

    private func existingDirectory(holding secret: SessionSecret) -> String? {
        let named = directory(for: secret.sessionID)
        if DataDirectory(path: named).hasSession { return named }
        return Self.sessionDirectories(in: root).first { DataDirectory(path: $0).holdsSession(secret) }
    }

    /// The data dirs under `root` whose session the app was in when it last ran: not ended (its
    /// data dir refuses it), not one this node was removed from, not left by the app.
    package static func sessionsToReopen(in root: String) -> [String] {
        sessionDirectories(in: root).filter { path in
            let directory = DataDirectory(path: path)
            return directory.loadEnded() == nil && directory.loadRemoved() == nil && !directory.wasLeft
        }
    }

    private func reopenKnownSessions() {
        for path in Self.sessionsToReopen(in: root) where handedOut[path]?.session == nil {
            Task {
                do { _ = try await open(path, invite: nil, madeHere: false) } catch {
                    logger.warning("cannot reopen the session in \(path): \(error)")
                }
            }
        }
    }

    // MARK: the inbox

    private func readInbox() async {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: inbox)) ?? [])
            .filter { !$0.hasPrefix(".") && !$0.hasSuffix(".refused") }.sorted()
        for name in names.prefix(Self.inboxFilesPerLook) {
            let path = inbox + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
                refuse(path, "not a regular file")
                continue
            }
            do {
                try await offer(try Invite(file: path))
                unlink(path)
            } catch {
                refuse(path, error.description)
            }
        }
    }

    private func refuse(_ path: String, _ reason: String) {
        logger.warning("offered invite \(TerminalText.escaped(path)) refused: \(reason)")
        if access(path, F_OK) == 0 { rename(path, path + ".refused") }
    }
}

/// A handed-out session, not kept alive by the offers: an app that drops it closes it.
private final class WeakSession {
    weak var session: MeshSession?
    init(_ session: MeshSession) { self.session = session }
}
