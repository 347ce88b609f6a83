import Logging
import MeshCore
import MeshCrypto
import NIOCore
import NIOPosix

/// A member of the session as the public API shows it (GroupActivities' `Participant`).
public struct Participant: Hashable, Sendable, Identifiable, CustomStringConvertible {
    /// The member's node id, 32 lowercase hex characters.
    public let id: String
    public let name: String

    package init(id: NodeID, name: String) {
        self.id = id.hex
        self.name = name
    }

    /// The name and the start of the id: the name alone is the member's own choice.
    public var description: String { name.isEmpty ? String(id.prefix(12)) : "\(name) (\(id.prefix(12)))" }
}

/// A group session over the mesh: join it, see who is in it, leave it. The node behind it runs
/// on one event loop of NIO's shared group.
///
/// ```swift
/// let session = try await MeshSession.join(dataDirectory: "/tmp/a", invite: token)
/// for await participants in await session.activeParticipantUpdates() { print(participants) }
/// ```
public final class MeshSession: Sendable {
    package let node: MeshNode
    private let lock: DataDirectoryLock

    private init(node: MeshNode, lock: DataDirectoryLock) {
        self.node = node
        self.lock = lock
    }

    /// Starts a node on `configuration`'s data dir (creating the session, or joining the one of
    /// `configuration.invite`) and joins the mesh.
    public static func join(_ configuration: NodeConfiguration,
                            logger: Logger = Logger(label: "groupmesh")) async throws(GroupMeshError) -> MeshSession {
        let directory = configuration.dataDirectory
        if let mismatch = configuration.unreachableSeeds(remembered: directory.loadRememberedMembers()) { throw mismatch }
        try directory.prepare()
        let lock = try directory.lock()
        let epochs = try directory.loadOrCreateSession(invited: configuration.invite?.token.secret)
        let identity = try directory.loadOrCreateIdentity()
        let node = try await MeshNode.start(identity: identity, epochs: epochs, configuration: configuration,
                                            eventLoop: MultiThreadedEventLoopGroup.singleton.next(), logger: logger)
        return MeshSession(node: node, lock: lock)
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

    /// Leaves gracefully; the session object is unusable afterwards.
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
        withExtendedLifetime(lock) {}
        return report.map(LeaveSummary.init)
    }

    private static func active(in view: [Member]) -> Set<Participant> {
        Set(view.filter { !$0.status.isGone }.map { Participant(id: $0.id, name: $0.record.name) })
    }
}
