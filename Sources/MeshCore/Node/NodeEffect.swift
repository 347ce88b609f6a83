import MeshCrypto
import NIOCore

/// What the node core asks of whoever drives it, in the order it asked. The driver drains them
/// after every input (`NodeInstance.drainEffects(into:)`) and carries each out; none of them
/// is a question back to the core, and none may be reordered against another of its kind.
package enum NodeEffect: Sendable {
    /// One sealed datagram.
    case send(ByteBuffer, to: PeerAddress)
    /// One sealed datagram with an IP TTL (hop limit) of `hops`, so that it opens our NAT's
    /// mapping and expires before the far router. A driver that cannot set it sends nothing (a
    /// datagram that reached the far router unasked could cost the punch it is part of).
    case sendShortLived(ByteBuffer, to: PeerAddress, hops: UInt8)
    /// A birthday round's hard side (`BirthdayPunching`): open sockets of our own and send the
    /// datagram from each, short-lived; a datagram that reaches one of them from the target is
    /// handed to the core as from the target, and from then on everything to the target leaves
    /// through that socket. A driver that cannot open them opens none (no round, counted).
    case openBirthdaySockets(BirthdaySockets)
    /// `count` sealed datagrams of `segmentSize` bytes back to back (only the last may be shorter):
    /// one segmented write (UDP GSO) where the kernel can, else one datagram each.
    case sendSegments(ByteBuffer, segmentSize: Int, count: Int, to: PeerAddress)
    /// Work for the store, executed in order; its outcome comes back through
    /// `NodeInstance.storageCompleted(_:_:now:)` with the same ticket.
    case storage(StorageRequest, StorageTicket)
    /// A LAN announcement (`LANAnnouncement`) to multicast on each LAN interface, TTL 1.
    case announceOnLAN([UInt8])
    case event(NodeEvent)
    /// A command (`NodeInstance.handle(_:request:now:)`) finished.
    case complete(RequestID, Result<NodeResult, NodeError>)
}

/// The sockets a birthday round's hard side asks for (`NodeEffect.openBirthdaySockets`).
package struct BirthdaySockets: Sendable {
    /// The member the round is with; where its public address is, the one we aim at.
    package var peer: NodeID
    package var target: PeerAddress
    /// A sealed punch for the member, sent once from each socket with an IP TTL of `hops`.
    package var datagram: ByteBuffer
    package var hops: UInt8
    package var count: Int
    /// The sockets no datagram reached are closed this long after they were opened.
    package var lifetime: Duration
}

/// What happened, for subscribers and logs; the core's state (`members`, `attachments`) says
/// what is true now.
package enum NodeEvent: Sendable {
    /// A member's status or record changed (the view now holds it).
    case memberChanged(Member)
    case memberForgotten(NodeID)
    /// The session moved to a new key epoch (a member was removed).
    case epochChanged(SessionID)
    /// An application message arrived (the journal's never show here).
    case message(NodeMessage)
    /// This application consumer (the shell's id) drained nothing for the stall limit: the
    /// node takes application messages again, and the shell disconnects it.
    case applicationConsumerStalled(UInt64)
    /// The attachment set changed.
    case attachmentsChanged
    case log(NodeLogRecord)
    /// Another live node has this node's identity (a copied data dir). The one that started
    /// later stops (`stopping`, the node is then stopped); the other carries on.
    case identityConflict(twinAddresses: [PeerAddress], stopping: Bool)
    /// The session was ended by `by` (maybe this node): this node passes it on, leaves, and
    /// the driver stops once the departure is out (the phase is then `leaving`).
    case sessionEnded(by: NodeID, name: String)
    /// A key epoch without this node was made: it is no longer in the session, and has stopped
    /// (`phase` is `stopped`; the driver closes its sockets).
    case removedFromSession(by: NodeID)
    /// What the members' observations say of the NAT in front of us changed (`AddressDiscovery`),
    /// with the reflexive address adopted, if any.
    case natDetected(NATBehaviour, reflexive: PeerAddress?)
    /// A node joining through seeds heard from no member `NodeSettings.joinWaitingNotice` after
    /// its start (told once; it keeps trying).
    case waitingForFirstMember(JoinProgress)
    /// After that: a first member answered, `member` (named by its own record: untrusted) from
    /// `address`, `waited` after the start.
    case joinedAfterWaiting(member: NodeID, name: String, address: PeerAddress, waited: Duration)
    /// Still joining, a member answered with the rotation that left the epoch this node speaks,
    /// and that rotation does not owe it the next: its invite (or its data dir, left off the
    /// roster while it was away) is out of date. `by` is the rotation's author, whom this node
    /// does not know. Told once per boot; the node keeps trying, as the answer proves nothing
    /// that anyone holding the old key could not have written.
    case inviteOutOfDate(by: NodeID)
    /// A member (named by its own record: untrusted) speaks no protocol version this node speaks:
    /// told once per member boot. Its datagrams of versions we know still count.
    case protocolGap(member: NodeID, name: String, theirs: SpokenVersions, ours: SpokenVersions)
}

/// An application message as it reached this node: who sent it (the pairwise key proves it),
/// how, and its type tag and body.
package struct NodeMessage: Sendable, Equatable {
    package var from: NodeID
    /// The sender's name as its signed record gives it: chosen by that member, so untrusted.
    package var fromName: String
    package var mode: DeliveryInstance.Mode
    package var type: String
    package var body: [UInt8]

    package init(from: NodeID, fromName: String, mode: DeliveryInstance.Mode, type: String, body: [UInt8]) {
        self.from = from
        self.fromName = fromName
        self.mode = mode
        self.type = type
        self.body = body
    }
}

/// swift-log's levels by their names, without the dependency.
package enum NodeLogLevel: String, Sendable, Comparable, CaseIterable {
    case trace, debug, info, notice, warning, error

    private var rank: Int { Self.allCases.firstIndex(of: self) ?? 0 }

    package static func < (lhs: NodeLogLevel, rhs: NodeLogLevel) -> Bool { lhs.rank < rhs.rank }
}

package struct NodeLogRecord: Sendable {
    package var level: NodeLogLevel
    package var message: String
    package var metadata: [(key: String, value: String)]
}
