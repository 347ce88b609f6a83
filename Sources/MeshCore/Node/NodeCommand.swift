import MeshCrypto

/// Names one command until its completion. Chosen by the driver, unique among its pending
/// commands, so it can register its waiter before the command runs (the completion may come
/// among the command's own effects).
package struct RequestID: Hashable, Sendable, CustomStringConvertible {
    package var value: UInt64
    package init(_ value: UInt64) { self.value = value }
    package var description: String { "#\(value)" }
}

/// What a user or an application asks of the node.
package enum NodeCommand: Sendable {
    /// An application message to `targets` (nil: every active member).
    case send(MessageEnvelope, to: [NodeID]?, mode: DeliveryInstance.Mode, timeout: Duration?)
    /// A new attachment: ingested by the store, then recorded in the journal log, then published.
    case add(AttachmentSource, metadata: [UInt8])
    case remove(AttachmentID)
    /// The attachment's bytes, fetched first if they are not all here.
    case load(SHA256Digest, into: ExportDestination)
    /// A new key epoch without the member (Docs/SECURITY.md §Key epochs), and what becomes of
    /// the members it introduced that are still in the session.
    case removeMember(NodeID, introduced: IntroducedMembers = .keep([]))
    /// A graceful leave: once other members hold what only this node holds (unless not
    /// `waitingForReplication`), the departure goes out, then the driver calls `stop`.
    case leave(waitingForReplication: Bool)
    /// End the session for every member (`SessionEnd`): it is passed to every live member,
    /// then this node leaves; the driver calls `stop`.
    case end
    /// One round trip to a member over its path (`pong`, or `pingTimedOut`).
    case ping(NodeID)
}

/// What becomes of the members a removed member introduced, directly or through members it
/// introduced (PROTOCOL.md §3, "Introductions"). One kept stays with whom it introduced, and asks
/// for a new introduction.
package enum IntroducedMembers: Sendable, Equatable {
    /// Those named stay; any other refuses the removal, naming them.
    case keep(Set<NodeID>)
    /// They go in the same key epoch, but those named.
    case remove(keeping: Set<NodeID>)
    /// All stay.
    case keepAll
}

package enum AttachmentSource: Sendable, Equatable {
    case bytes([UInt8])
    /// A file the store reads, streamed (never loaded whole).
    case file(path: String)
}

package enum ExportDestination: Sendable, Equatable {
    case memory
    /// Written whole to a temporary file, then renamed to the path (a regular file or nothing:
    /// the shell refuses links, devices, pipes). `mode`: the new file's permissions (nil: 0666
    /// less the process's umask). Not `replace`: a file already at the path is kept, and the
    /// export fails saying so.
    case file(path: String, mode: UInt32? = nil, replace: Bool = true)
}

package enum NodeResult: Sendable, Equatable {
    /// Delivered to every target (reliable), or sent to every one (unreliable).
    case sent(recipients: Int)
    case added(AttachmentEntry)
    case removed(AttachmentID)
    /// The bytes, when loaded into memory.
    case loaded(Manifest, bytes: [UInt8]?)
    /// The member, how many were handed the new key at once, and the members it introduced
    /// that went with it.
    case memberRemoved(NodeID, handedTo: Int, introduced: [NodeID] = [])
    case left(LeaveReport)
    case ended
    case pong(rtt: Duration, address: PeerAddress)
}

/// Why a command failed; each case carries what a person needs to read it.
package enum NodeError: Error, Sendable, Equatable {
    /// The node stopped (or is stopping) before the command could finish.
    case stopped
    case messageTooLarge(size: Int, limit: Int)
    /// The targets that did not acknowledge, by member id, and why.
    case notDelivered([NodeID: DeliveryInstance.Failure])
    case metadataTooLarge(size: Int, limit: Int)
    /// No present attachment has this content.
    case unknownAttachment(SHA256Digest)
    case unknownAttachmentID(AttachmentID)
    /// No reachable member held the manifest within the unavailable timeout.
    case manifestUnavailable(SHA256Digest)
    /// No reachable member held `missing` of the `total` chunks within the unavailable timeout.
    case chunksUnavailable(SHA256Digest, missing: Int, total: Int)
    case store(StorageFailure)
    case cannotRemoveSelf
    case alreadyRemoved(NodeID)
    /// A key rotation travels in one datagram, which bounds the roster.
    case sessionTooLarge(limit: Int)
    /// The new epoch could not be stored: nothing changed.
    case epochNotStored(StorageFailure)
    /// Another removal is being stored, or waits between its rotations; one at a time.
    case removalInProgress
    /// The member introduced these, still in the session: nothing was removed.
    case introducedMembers(NodeID, [NodeID])
    /// The member and those it introduced are more than one removal's rotations remove.
    case tooManyToRemove(NodeID, introduced: Int, limit: Int)
    /// A removal made in several rotations stopped after some (`because`): `removed` are
    /// removed, `left` are still members.
    indirect case removalCutShort(NodeID, removed: [NodeID], left: [NodeID], because: NodeError)
    /// Rotations of other members kept taking back whom a removal's rotations removed.
    case removalOutpaced
    /// The session was ended (by this member or `by` another): nothing more is done.
    case sessionEnded(by: NodeID)
    /// The member has no known address (dead, left, or never met).
    case notReachable(NodeID)
    case pingTimedOut(NodeID)
    /// The caller gave the command up (`cancel(_:now:)`).
    case cancelled
}
