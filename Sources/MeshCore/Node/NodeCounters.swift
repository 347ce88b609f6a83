import MeshCrypto

/// What a node counts about its traffic and its work; `status --json` prints it as `counters`
/// (with the shell's own: send errors, simulated drops).
package struct NodeCounters: Sendable, Equatable {
    package var datagramsSent: UInt64 = 0
    package var datagramsReceived: UInt64 = 0
    package var bytesSent: UInt64 = 0
    package var bytesReceived: UInt64 = 0
    /// The same by kind: every datagram sent, and every received one that opened.
    package var sent = TrafficCounts()
    package var received = TrafficCounts()
    /// Received datagrams dropped, by reason; every reason is present, at 0 until it happens.
    package var dropped: [DropReason: UInt64] = Dictionary(uniqueKeysWithValues: DropReason.allCases.map { ($0, 0) })
    /// Datagrams a node acting as release 0.9.0 (tests only) dropped for a frame of a later
    /// protocol other than the version frame: what must never reach such a member.
    package var laterProtocolDrops: UInt64 = 0
    /// Introductions of members not taken: their door had introduced as many live members as one
    /// may (a door that signed for more).
    package var introductionsPastBound: UInt64 = 0
    /// Version frames that named a founding id other than the one this node holds (a member
    /// whose door told it another, or one that makes its own up).
    package var foundingMismatches: UInt64 = 0
    package var chunksFetched: UInt64 = 0
    package var chunksServed: UInt64 = 0
    /// Chunks whose bytes did not match their hash (never stored nor served).
    package var chunksRejected: UInt64 = 0
    package var chunkPayloadBytesSent: UInt64 = 0
    /// Bytes of pieces queued for members that cancelled them before they went (`ChunkCancel`).
    package var chunkPayloadBytesCancelled: UInt64 = 0
    /// Bytes of chunks fetched and stored (verified against their hash).
    package var chunkPayloadBytesFetched: UInt64 = 0
    /// Reliable application messages, per recipient: acknowledged, or not confirmed in time
    /// (the recipient left, or no acknowledgement came; it may still have arrived).
    package var reliableDelivered: UInt64 = 0
    package var reliableUnconfirmed: UInt64 = 0
    /// Pieces of chunks this node did not ask for (dropped).
    package var piecesUnsolicited: UInt64 = 0
    /// Wants answered "busy" because the send queue was full or too many chunks were being read.
    package var wantsRefused: UInt64 = 0
    /// Wants a seed answered "left to others": the chunk is left to the member that has it or is getting
    /// it (super-seeding), and second copies it sent of a chunk: to a member turned away for 5 s,
    /// or of one only it held whose first copy was lost or too slow (`SeedingPolicy.Verdict`).
    package var seedingRefusals: UInt64 = 0
    package var seedingSecondCopies: UInt64 = 0
    /// Paces told a holder again because its pieces showed it had not heard the last (`ToldPace`).
    package var pacesRetold: UInt64 = 0
    /// Wants refused for their piece size: under 256 bytes (a flood of tiny datagrams) or over
    /// what our datagrams carry. A member's bug or malice.
    package var wantsMisshapen: UInt64 = 0
    /// Requests for path probes not answered: a size out of bounds, or over a member's budget.
    package var probeRequestsRefused: UInt64 = 0
    /// Fetches that ended without the attachment (unavailable, or the store refused).
    package var fetchesFailed: UInt64 = 0
    /// Messages in the application stream that are not a message envelope, and journal messages
    /// that do not decode: a member's bug or malice, dropped.
    package var messagesMalformed: UInt64 = 0
    /// Application consumers (a `listen`, a `messages()` stream) that drained nothing for the
    /// stall limit while new messages waited for them, and were cut off (`ConsumerFlow`).
    package var consumersStalled: UInt64 = 0
    /// Key epochs handed to members (on removal, and to members that had not caught up).
    package var handoversSent: UInt64 = 0
    /// Handovers to us that were not taken: not for our boot, did not open, or not believable.
    package var handoversRefused: UInt64 = 0
    /// Notices of our removal held for a competing rotation that keeps us (`removalNoticeHold`).
    package var removalNoticesHeld: UInt64 = 0
    /// Ends of the session refused (another epoch, a bad signature, not a member's).
    package var endsRefused: UInt64 = 0
    /// Datagrams of members not told of the end, answered with it while we ended the session.
    package var endsAnswered: UInt64 = 0
    /// Our datagrams to relayed members, sent through their relays; and those that came to us
    /// through a relay and opened (what this node carries for others: `RelayService.Counters`).
    package var relayedSent: UInt64 = 0
    package var relayedReceived: UInt64 = 0
    /// LAN discovery: announcements sent, taken (this session's, MAC valid), ignored (anything
    /// else on the port), and members punched at the address they were heard from.
    package var lan = LANCounters()

    package init() {}

    package mutating func countDrop(_ reason: DropReason) {
        dropped[reason, default: 0] += 1
    }
}

package struct LANCounters: Sendable, Equatable, Codable {
    package var announcementsSent: UInt64 = 0
    package var announcementsHeard: UInt64 = 0
    package var announcementsIgnored: UInt64 = 0
    package var membersMet: UInt64 = 0

    package init() {}
}
