import MeshCrypto

/// One member as this node sees it.
package struct Member: Sendable, Equatable {
    package var record: MemberRecord
    package var status: MemberStatus
    /// The incarnation the status applies to: the record's, or a higher one an accusation named.
    package var incarnation: UInt64
    package var lastChange: MeshInstant
    /// Round-trip time of the last direct probe.
    package var rtt: Duration?
    package internal(set) var suspicion: Suspicion?

    package init(
        record: MemberRecord, status: MemberStatus, incarnation: UInt64, lastChange: MeshInstant,
        rtt: Duration? = nil, suspicion: Suspicion? = nil
    ) {
        self.record = record
        self.status = status
        self.incarnation = incarnation
        self.lastChange = lastChange
        self.rtt = rtt
        self.suspicion = suspicion
    }

    package var id: NodeID { record.id }
    package var address: PeerAddress? { record.addresses.first }
}

/// What the membership state machine asks its shell to do.
package enum MembershipDirective: Sendable, Equatable {
    /// Seal `frames` with the session's hello key and send them to `address`. `recipient` is nil
    /// when only the address is known (a join seed).
    case send(frames: [Frame], recipient: NodeID?, address: PeerAddress)
    /// Seal `frames` with the pairwise key of `recipient`'s current boot (24 bytes smaller than
    /// hello, and only that boot can open them) and send them to `address`. Without keys for
    /// it, nothing is sent: the caller falls back to hello when no answer comes.
    case sendPairwise(frames: [Frame], recipient: NodeID, address: PeerAddress)
    /// A member's status or record changed (a new record means a new boot: new pairwise keys).
    case memberChanged(Member)
    /// A dead or left member was forgotten.
    case memberForgotten(NodeID)
    /// Another boot of our own identity is alive (a copied data dir): `record` is its latest.
    /// Reported once per boot, after it outbid us `MembershipSettings.identityConflictRefutations`
    /// times (an earlier boot of ours, dead, stops outbidding after one or two).
    case identityConflict(MemberRecord)
    /// A member's record was refused: `maxLiveMembers` are live. Said at most once a minute.
    case sessionFull(refused: NodeID)
}
