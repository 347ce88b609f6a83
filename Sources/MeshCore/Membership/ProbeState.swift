import MeshCrypto

/// The probe in flight this period (SWIM's failure detector, one target at a time).
struct ProbeState: Sendable {
    var target: NodeID
    var sequence: UInt64
    var sentAt: MeshInstant
    /// When to ask others to probe the target.
    var indirectAt: MeshInstant
    /// When the probe has failed if no ack came.
    var endAt: MeshInstant
    var indirectSent = false
    /// Only the pairwise first probe is out: until the hello ones follow, only the target's
    /// pairwise ack counts.
    var pairwiseOnly = false
    var nacksExpected = 0
    var nacksReceived = 0
}

/// An indirect probe this node makes for another member.
struct RelayedProbe: Sendable {
    var requester: NodeID
    var requesterAddress: PeerAddress
    var requesterSequence: UInt64
    var target: NodeID
    /// When to tell the requester "no answer" (Lifeguard's nack).
    var nackAt: MeshInstant
}
