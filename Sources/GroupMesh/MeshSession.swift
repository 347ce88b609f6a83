import Foundation
import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// A member of the session as the public API shows it (GroupActivities' `Participant`).
/// Equal when the member and its name are.
public struct Participant: Hashable, Sendable, Identifiable, CustomStringConvertible {
    package let node: NodeID
    public let name: String

    package init(id: NodeID, name: String) {
        node = id
        self.name = name
    }

    /// The member as a `UUID`, as GroupActivities' `Participant.ID`: the same 16 bytes as its node
    /// id, so the two convert both ways without loss (`id.nodeIDString`, `UUID(nodeID:)`).
    public var id: UUID { UUID(uuid: node.uuidBytes) }

    /// The member's node id as `groupmesh status` shows it, 32 lowercase hex characters.
    public var nodeID: String { node.hex }

    /// The name and the start of the id: the name alone is the member's own choice.
    public var description: String { name.isEmpty ? String(nodeID.prefix(12)) : "\(name) (\(nodeID.prefix(12)))" }
}

extension UUID {
    /// The UUID of the member whose node id (32 hex characters, as `groupmesh status` shows it) is
    /// `nodeID`; nil for any other text.
    public init?(nodeID: String) {
        guard let id = NodeID(hex: nodeID) else { return nil }
        self.init(uuid: id.uuidBytes)
    }

    /// The node id this UUID is (a `Participant.id`), as `groupmesh status` shows it: 32 lowercase
    /// hex characters.
    public var nodeIDString: String { NodeID(uuidBytes: uuid).hex }
}

extension NodeID {
    var uuidBytes: uuid_t {
        let b = bytes
        return (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])
    }

    init(uuidBytes u: uuid_t) {
        self.init(bytes: [u.0, u.1, u.2, u.3, u.4, u.5, u.6, u.7, u.8, u.9, u.10, u.11, u.12, u.13, u.14, u.15])
    }
}

/// A group session over the mesh, as GroupActivities' `GroupSession`: made `waiting`, then
/// `join()`ed, then invalidated for a reason (left, ended, removed…). The node behind it runs on
/// one event loop of NIO's shared group.
///
/// ```swift
/// let session = try await MeshSession(configuration)      // waiting: bound, not joined
/// let messenger = Messenger(session: session)             // subscribe first: nothing is missed
/// Task { for await (message, context) in messenger.messages(of: Stroke.self) { … } }
/// try await session.join()
/// for await state in await session.states() { if case .invalidated = state { … } }
/// ```
public final class MeshSession: Sendable {
    package let node: MeshNode
    private let lock: DataDirectoryLock
    /// The data dir had no session before this start: a `join()` that fails takes it back.
    private let madeSession: Bool
    private let directory: DataDirectory

    /// Sets up a node on `configuration`'s data dir (creating the session, or the one of
    /// `configuration.invite`) without joining: the session is `waiting` until `join()`.
    /// Throws when the data dir or the socket cannot be set up, the session was ended, or this
    /// node was removed from it (the data dir's `removed` file).
    public init(
        _ configuration: NodeConfiguration,
        logger: Logger = Logger(label: "groupmesh")
    ) async throws(GroupMeshError) {
        let directory = configuration.dataDirectory
        if let endedBy = directory.loadEnded() {
            // Whoever of the session was offline during the end, and is back now, is told.
            await EndedSessionNotifier.tell(configuration, eventLoop: MultiThreadedEventLoopGroup.singleton.next())
            throw .sessionEndedHere(path: directory.path, by: endedBy)
        }
        if let removedBy = directory.loadRemoved() { throw .removedFromSession(by: removedBy) }
        if let mismatch = configuration.unreachableSeeds(remembered: directory.loadRememberedMembers()) {
            throw mismatch
        }
        // A file given as the data dir is said first; a refused join makes no data dir.
        if configuration.invite == nil, let first = configuration.join.first, !directory.hasSession,
            !directory.isOtherThanDirectory
        {
            throw .joinWithoutInvite(address: first.description, path: directory.path)
        }
        try directory.prepare()
        let lock = try directory.lock()
        let hadSession = directory.hasSession
        let epochs = try directory.loadOrCreateSession(invited: configuration.invite?.token.secret)
        do throws(GroupMeshError) {
            let identity = try directory.loadOrCreateIdentity()
            node = try await MeshNode.prepare(
                identity: identity, epochs: epochs, configuration: configuration,
                eventLoop: MultiThreadedEventLoopGroup.singleton.next(), logger: logger)
        } catch {
            // A start that fails (a port in use) leaves no session behind: the next one, with
            // another port or another invite, starts as if this one never was.
            if !hadSession { directory.forgetUnstartedSession() }
            throw error
        }
        self.lock = lock
        self.madeSession = !hadSession
        self.directory = directory
    }

    /// A session dropped before it joined gives its socket back (one that joined runs until
    /// `leave()`, `end()` or the process ends).
    deinit {
        let node = node
        Task { await node.stopIfWaiting() }
    }

    /// Joins the mesh: the node takes datagrams and opens its control socket. A failure
    /// invalidates the session (`failedToStart`).
    public func join() async throws(GroupMeshError) {
        do { try await node.join() } catch {
            // Nothing was written yet (the control socket is bound before the node begins).
            if madeSession, case .failedToStart? = await node.invalidation { directory.forgetUnstartedSession() }
            throw error
        }
    }

    /// Sets up a node and joins at once (`init` then `join()`).
    public static func join(
        _ configuration: NodeConfiguration,
        logger: Logger = Logger(label: "groupmesh")
    ) async throws(GroupMeshError) -> MeshSession {
        let session = try await MeshSession(configuration, logger: logger)
        try await session.join()
        return session
    }

    /// The session's state now.
    public var state: SessionState {
        get async { await node.sessionState }
    }

    /// The state now and after every change; finishes after `invalidated`.
    public func states() async -> AsyncStream<SessionState> {
        await node.stateUpdates()
    }

    /// Ends the session for every member (GroupSession's `end()`): each is told and invalidated
    /// with reason `ended`; their data dirs remember it, so the session's invites no longer
    /// work. This member leaves too.
    public func end() async throws(GroupMeshError) {
        // The node stops whether or not every member could be told.
        defer { lock.release() }
        try await node.end()
    }

    public var localParticipant: Participant {
        get async {
            let me = await node.members.first
            return Participant(id: node.nodeID, name: me?.record.name ?? "")
        }
    }

    /// The members that are alive or suspected (not dead, not left), this node included.
    public var activeParticipants: Set<Participant> {
        get async { Self.active(in: await node.members) }
    }

    /// The set of active participants now and after every change.
    public func activeParticipantUpdates() async -> AsyncStream<Set<Participant>> {
        let updates = await node.memberUpdates()
        return AsyncStream { continuation in
            let task = Task {
                var last: Set<Participant>?
                for await view in updates {
                    let current = Self.active(in: view)
                    if current != last { continuation.yield(current) }
                    last = current
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    public func invite() async -> Invite { await node.invite() }

    /// The UDP address the node is bound to.
    public var localAddress: MeshAddress { MeshAddress(node.localAddress) }

    /// Why the node stopped by itself (it found a twin: another live node with its identity);
    /// nil while it runs, and after a leave.
    public var stopReason: GroupMeshError? {
        get async { await node.stopReason }
    }

    /// Leaves gracefully. First, unless not `waitingForReplication`, other live members are
    /// asked to take every attachment only this node holds whole, and the leave waits until
    /// they hold it (at most 10 s plus 1 s per 2 MiB). Returns what was handed over and what
    /// became unavailable (nil when the node had stopped already).
    @discardableResult
    public func leave(waitingForReplication: Bool = true) async -> LeaveSummary? {
        let report = await node.leave(waitingForReplication: waitingForReplication)
        if report != nil { node.configuration.dataDirectory.markLeft() }
        // The node has stopped: its data dir is free for the next session of it.
        lock.release()
        return report.map(LeaveSummary.init)
    }

    private static func active(in view: [Member]) -> Set<Participant> {
        Set(view.filter { !$0.status.isGone }.map { Participant(id: $0.id, name: $0.record.name) })
    }
}
