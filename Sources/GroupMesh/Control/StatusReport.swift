import MeshCore

/// What `status --json` prints (CLI.md, status); also the answer to the control socket's `status`.
public struct StatusReport: Codable, Sendable, Equatable {
    /// The `state` of a member a key rotation removed (membership has it left or dead).
    public static let removedState = "removed"

    public struct SelfInfo: Codable, Sendable, Equatable {
        public var id: String
        public var name: String
        public var address: String
        /// The current key epoch's session id: it changes when a member is removed.
        public var session: String
        /// How many key epochs followed the one this node joined (one per removal it saw).
        public var keyEpoch: Int
        public var profile: String
        public var localHealth: Int
        /// The UDP socket's kernel buffers in bytes, as `getsockopt` reports them (SocketBuffers).
        public var receiveBuffer: Int
        public var sendBuffer: Int
        /// The NAT in front of this node as members' observations tell it: `unknown`, `none`,
        /// `endpoint-independent` or `symmetric` (PROTOCOL.md §1b).
        public var nat: String
        /// The public address a quorum of members sees us at, once adopted (null before).
        public var reflexiveAddress: String?
        /// Every address our signed record gives, where members may reach us.
        public var candidates: [String]
        /// The session's founding id (PROTOCOL.md §3, "Founding"), as this node's door told it;
        /// null for a session made by an older release, for a member without a door, and until
        /// the door's frame came.
        public var founding: String? = nil
        /// The member that founded the session (id), once its own frame proved it; this node's
        /// own id when it did.
        public var founder: String? = nil

        // `reflexiveAddress` is always present, null until adopted, so scripts can rely on the key.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(name, forKey: .name)
            try container.encode(address, forKey: .address)
            try container.encode(session, forKey: .session)
            try container.encode(keyEpoch, forKey: .keyEpoch)
            try container.encode(profile, forKey: .profile)
            try container.encode(localHealth, forKey: .localHealth)
            try container.encode(receiveBuffer, forKey: .receiveBuffer)
            try container.encode(sendBuffer, forKey: .sendBuffer)
            try container.encode(nat, forKey: .nat)
            try container.encode(reflexiveAddress, forKey: .reflexiveAddress)
            try container.encode(candidates, forKey: .candidates)
            try container.encode(founding, forKey: .founding)
            try container.encode(founder, forKey: .founder)
        }
    }

    public struct MemberInfo: Codable, Sendable, Equatable {
        public var id: String
        public var name: String
        public var address: String
        public var state: String
        public var incarnation: UInt64
        public var rttMs: Double?
        /// The largest datagram (UDP payload) this member's path to us was proven to carry, the
        /// size its chunk pieces come in; null until we pulled chunks from it (PROTOCOL.md §1a).
        public var datagramSize: Int?
        /// How we reach it (PROTOCOL.md §1c, §1d): `direct`, `punching`, `punched`, `relayed` or
        /// `unreachable`; empty for ourselves.
        public var path: String
        /// Where we send to it now: where its own datagrams come from, once one did; its relay's
        /// address while it is relayed.
        public var pathAddress: String
        /// The member that relays our datagrams to it (id), while `path` is `relayed`; else null.
        public var relay: String?
        /// Whether it carries datagrams for members that cannot meet (its record says).
        public var relays: Bool
        /// The newest protocol version it speaks (PROTOCOL.md §3, "Protocol versions"): what its
        /// version frame said, 1 for a member that never sent one; null while it is being asked.
        /// Ours for ourselves.
        public var `protocol`: Int?
        /// The member that let it in (id), as both signed it (PROTOCOL.md §3, "Introductions");
        /// null for the member that made the session (one made by this release), a member of the
        /// previous release, and while its introduction has not reached us.
        public var introducedBy: String? = nil
        /// Its name as this node knows it, also once it has left (null when never known; absent
        /// from an older node's report).
        public var introducedByName: String? = nil

        // `rttMs`, `datagramSize` and `introducedBy` are always present, null until measured, so scripts can rely
        // on the keys.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(name, forKey: .name)
            try container.encode(address, forKey: .address)
            try container.encode(state, forKey: .state)
            try container.encode(incarnation, forKey: .incarnation)
            try container.encode(rttMs, forKey: .rttMs)
            try container.encode(datagramSize, forKey: .datagramSize)
            try container.encode(path, forKey: .path)
            try container.encode(pathAddress, forKey: .pathAddress)
            try container.encode(relay, forKey: .relay)
            try container.encode(relays, forKey: .relays)
            try container.encode(`protocol`, forKey: .protocol)
            try container.encode(introducedBy, forKey: .introducedBy)
            try container.encode(introducedByName, forKey: .introducedByName)
        }
    }

    public struct AttachmentInfo: Codable, Sendable, Equatable {
        /// The attachment's own id (32 hex characters).
        public var id: String
        /// Its content's SHA-256 manifest digest (64 hex characters).
        public var content: String
        public var size: UInt64
        public var chunks: Int
        public var chunksHave: Int
        public var holders: Int
        /// `available` (a live member holds it whole), `partial` (nobody live holds it whole,
        /// some chunks are held), `unavailable` (no live member holds any of it).
        public var state: String
        /// The live members holding every chunk (ids; this node's included).
        public var heldBy: [String]
        /// The metadata of the latest add (UTF-8, usually JSON); only in `attachments --json`.
        public var metadata: String?
        /// This node is fetching it now (to replicate it, or for a `get`).
        public var fetching: Bool?
    }

    /// A leave waiting for other members to take what only this node holds.
    public struct LeavingInfo: Codable, Sendable, Equatable {
        /// Attachments only this node holds whole, still.
        public var attachments: [String]
        public var bytes: UInt64
        /// Members asked to take them (ids).
        public var askedMembers: [String]
        /// Until the node leaves anyway.
        public var secondsLeft: Double
    }

    /// A join that no member has answered yet (absent once one did, and for a node that
    /// joined through nobody: it made the session, or remembered no one).
    public struct JoiningInfo: Codable, Sendable, Equatable {
        /// `waiting`: no member has answered; the node keeps trying. `out-of-date`: a member
        /// answered that the session moved to a key this node is not owed (an invite older than
        /// a removal); it keeps trying, but only a new invite lets it in.
        public var state: String
        /// Where the join goes: the invite's addresses, `--join`, seeds kept from an earlier
        /// start, remembered members.
        public var addresses: [String]
        /// Tries of those addresses so far.
        public var attempts: Int
        /// Seconds since the join started.
        public var since: Double
    }

    /// The congestion control of what this node fetches (`DownlinkController`): one rate for
    /// every holder together, from the queueing delay its pieces meet on the way.
    public struct DownlinkInfo: Codable, Sendable, Equatable {
        /// Bytes per second all holders together are asked to send at.
        public var rate: Double
        /// `foreground` while someone waits for a fetch, else `background` (yields first).
        public var priority: String
        /// The queueing delay last measured and the one aimed at, in milliseconds.
        public var queueingDelayMs: Double
        public var targetMs: Double
        /// The lowest round trip of a chunk request lately, in milliseconds (nil before one).
        public var roundTripMs: Double?
        public var slowStart: Bool
        /// Competing with a flow that keeps the queue full (a foreground fetch only).
        public var competing: Bool
        /// Times the rate was cut for a loss rate only an overflowing queue gives.
        public var lossBackoffs: UInt64
        /// Slowdown tests run (a foreground fetch slowing to ⅛ to see whose queue it is), and of
        /// those, the ones that found another flow's queue (and so began or kept competing).
        public var slowdowns: UInt64
        public var slowdownsFoundAnotherFlow: UInt64
        /// The line loses datagrams at random (not from a queue overflowing): the target is then
        /// lower once slow start is over (PROTOCOL.md §6, *Lossy lines*).
        public var lossyLine: Bool
        /// On such a line, the most replication asks, in bytes per second: half of what the line gave
        /// when last measured (PROTOCOL.md §6, *Replication on a lossy line leaves room*). Absent: no cap.
        public var backgroundCap: Double?
    }

    /// One kind of traffic (`TrafficKind`: membership, messages, journal, transfer, keys, ping).
    public struct TrafficInfo: Codable, Sendable, Equatable {
        public var datagramsSent: UInt64
        public var bytesSent: UInt64
        /// Received datagrams that opened under the session's keys.
        public var datagramsReceived: UInt64
        public var bytesReceived: UInt64
    }

    public struct Counters: Codable, Sendable, Equatable {
        public var datagramsSent: UInt64
        public var datagramsReceived: UInt64
        public var bytesSent: UInt64
        public var bytesReceived: UInt64
        public var dropped: [String: UInt64]
        public var sendErrors: UInt64
        public var retransmissions: UInt64
        public var chunksFetched: UInt64
        public var chunksServed: UInt64
        public var chunksRejected: UInt64
        /// Chunks held whole that the scrub read again, and those of them that failed their hash
        /// (discarded, and their attachment fetched again).
        public var chunksScrubbed: UInt64
        public var chunksScrubbedDamaged: UInt64
        public var chunkPayloadBytesSent: UInt64
        /// Piece bytes queued for members that cancelled the chunk before they went (`chunkCancel`).
        public var chunkPayloadBytesCancelled: UInt64
        /// Wants sent again for the pieces of a chunk that did not come.
        public var pieceReasks: UInt64
        /// Pieces of chunks this node did not ask for (dropped).
        public var piecesUnsolicited: UInt64
        /// Wants answered "busy" (send queue full, or too many chunk reads under way).
        public var wantsRefused: UInt64
        /// Paces told a holder again: its pieces showed it had not heard the last one.
        public var pacesRetold: UInt64
        /// Super-seeding: wants answered busy to leave the chunk to the member that has it or is
        /// getting it; second copies sent (a member turned away for 5 s, a first copy lost or too slow).
        public var seedingRefusals: UInt64
        public var seedingSecondCopies: UInt64
        /// Datagrams dropped on purpose by `run --simulate-loss`.
        public var simulatedDrops: UInt64
        /// Chunk requests that went unanswered in time and were asked elsewhere.
        public var requestTimeouts: UInt64
        /// Key epochs handed to members; handovers to us that were refused.
        public var handoversSent: UInt64
        public var handoversRefused: UInt64
        /// Messages a Swift API reader (`messages(of:)`) did not get: unreliable ones while it was
        /// behind, and the oldest beyond the newest 4,096 once it stalled (a `listen` counts its
        /// own and says so).
        public var messagesDroppedForSlowReaders: UInt64
        /// `listen` clients cut off for reading nothing for the stall limit while messages waited.
        public var consumersStalled: UInt64
        /// Control connections closed after 20 s idle or to make room; refused (all busy).
        public var controlConnectionsClosed: UInt64
        public var controlConnectionsRefused: UInt64
        /// Datagrams the kernel dropped because the UDP receive buffer was full (from
        /// /proc/net/udp; absent where it cannot be read). Nothing above counts them.
        public var kernelReceiveDrops: UInt64?
        /// Event handlers run, and of those: failed (exit status not 0, or could not start),
        /// killed at their time limit; events dropped for handlers 1,024 behind.
        public var eventHandlersRun: UInt64
        /// Ends of the session refused (a bad signature, another epoch, not a member's).
        public var endsRefused: UInt64
        public var eventHandlersFailed: UInt64
        public var eventHandlersTimedOut: UInt64
        public var eventHandlersDropped: UInt64
        /// The datagrams and bytes above by kind.
        public var traffic: [String: TrafficInfo]
        /// Members this node came to suspect (its own failed probes and others' accusations it
        /// took), and times it outbid what others held of it (a suspicion, a death, an earlier boot).
        public var suspicionsRaised: UInt64
        public var refutations: UInt64
        /// Paths whose datagram size fell back to the base (a black hole confirmed); requests for
        /// path probes refused (out of bounds, or over a member's budget) and for indirect probes
        /// refused (of no member alive, or to an address not in its record).
        public var pathBlackHoles: UInt64
        public var probeRequestsRefused: UInt64
        /// Simultaneous opens that found the member, and that ran out their budget.
        public var punchesSucceeded: UInt64
        public var punchesFailed: UInt64
        public var relay: RelayInfo
        /// Birthday rounds (PROTOCOL.md §1c); absent from an older node's report.
        public var birthday: BirthdayInfo? = nil
        /// Members' records not taken because the session already had its most live members
        /// (50, this node included); absent from an older node's report.
        public var membersRefusedFull: UInt64? = nil
        /// Members' introductions not taken because their door had introduced as many live
        /// members as one may (16); absent from an older node's report.
        public var introductionsPastBound: UInt64? = nil
        /// Version frames that named another founding id than this node's (absent from an older
        /// node's report).
        public var foundingMismatches: UInt64? = nil
    }

    /// Relays (PROTOCOL.md §1d): what this node sent and got through others, and what it carried
    /// for others. A relay only ever handles sealed datagrams of two other members.
    public struct RelayInfo: Codable, Sendable, Equatable {
        /// Whether this node carries datagrams for others (`run --no-relay` says no).
        public var enabled: Bool
        /// Our datagrams to relayed members, sent through their relays; theirs that came to us
        /// through a relay and opened.
        public var sentThroughRelays: UInt64
        public var receivedThroughRelays: UInt64
        /// Sealed datagrams (and their bytes) carried from one member to another.
        public var forwardedDatagrams: UInt64
        public var forwardedBytes: UInt64
        /// Over a pair's or the relay's rate: dropped. Refused: disabled, or to a member we do
        /// not reach on a path of our own.
        public var droppedOverRate: UInt64
        public var refused: UInt64
        /// Bytes per second carried for all pairs together now, and for each active pair; the
        /// owner's `--relay-budget` (nil: sized from `measuredCapacity`).
        public var budget: Int? = nil
        public var budgetPerPair: Int? = nil
        public var budgetSetting: Int? = nil
        /// The best rate this node's links were measured to carry (its own transfers up or down,
        /// or what it carried), forgotten by half every 10 minutes.
        public var measuredCapacity: Int? = nil
        /// The node's own transfers now (the larger direction, bytes per second), and whether
        /// the pairs yield to them (they share what the capacity leaves beside them).
        public var ownTransferRate: Int? = nil
        public var yielding: Bool? = nil
        public var activePairs: Int? = nil
        /// CPU time spent relaying (the event loop thread's, around each forward: Docs/CLI.md),
        /// and per MiB carried (nil before a MiB was).
        public var cpuSeconds: Double? = nil
        public var cpuMillisecondsPerMiB: Double? = nil

        // Every key present, null when unknown or unset (as CLI.md gives them): a script reads
        // `budgetSetting` without first asking whether it is there.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(enabled, forKey: .enabled)
            try container.encode(sentThroughRelays, forKey: .sentThroughRelays)
            try container.encode(receivedThroughRelays, forKey: .receivedThroughRelays)
            try container.encode(forwardedDatagrams, forKey: .forwardedDatagrams)
            try container.encode(forwardedBytes, forKey: .forwardedBytes)
            try container.encode(droppedOverRate, forKey: .droppedOverRate)
            try container.encode(refused, forKey: .refused)
            try container.encode(budget, forKey: .budget)
            try container.encode(budgetPerPair, forKey: .budgetPerPair)
            try container.encode(budgetSetting, forKey: .budgetSetting)
            try container.encode(measuredCapacity, forKey: .measuredCapacity)
            try container.encode(ownTransferRate, forKey: .ownTransferRate)
            try container.encode(yielding, forKey: .yielding)
            try container.encode(activePairs, forKey: .activePairs)
            try container.encode(cpuSeconds, forKey: .cpuSeconds)
            try container.encode(cpuMillisecondsPerMiB, forKey: .cpuMillisecondsPerMiB)
        }
    }

    public var `self`: SelfInfo
    public var members: [MemberInfo]
    public var attachments: [AttachmentInfo]
    public var counters: Counters
    /// Present while a leave hands over attachments.
    public var leaving: LeavingInfo?
    public var downlink: DownlinkInfo?
    /// Present while no member has answered this node's join.
    public var joining: JoiningInfo?
    /// Members this node lost touch with (forgotten after they died) and still looks for, the
    /// latest lost first; absent when none (and from nodes that predate it).
    public var lost: [LostMemberInfo]? = nil
    /// Present once a member told this node it was left out of the session's new key (a member
    /// was removed while it was away): the author of that rotation (id). Only a new invite lets
    /// it back in.
    public var leftOutBy: String? = nil

    public struct LostMemberInfo: Codable, Sendable, Equatable {
        public var id: String
        /// As the data dir remembers it (empty when it does not).
        public var name: String
        /// Where it is asked: its record's first addresses.
        public var addresses: [String]
        /// Seconds since it was lost, and until it is asked next.
        public var lostSeconds: Double
        public var nextAskSeconds: Double
    }
    /// LAN discovery (PROTOCOL.md §1g); absent when it is off (`--no-lan-discovery`, or no LAN).
    public var lanDiscovery: LANDiscoveryInfo? = nil

    public struct LANDiscoveryInfo: Codable, Sendable, Equatable {
        /// The interfaces announced on ("eth0 192.168.1.20").
        public var interfaces: [String]
        public var announcementsSent: UInt64
        /// Announcements of this session taken, and datagrams on the port that were not one
        /// (another session's, damaged, forged).
        public var announcementsHeard: UInt64
        public var announcementsIgnored: UInt64
        /// Members punched at the LAN address they announced.
        public var membersMet: UInt64
    }
    /// The gateway's port mapping (absent from nodes that predate it).
    public var portMapping: PortMappingInfo?
    /// Present with `run --stun` or `--turn` (StatusReport+Traversal).
    public var traversal: TraversalInfo? = nil
    /// The data dir and the room left on its disk (absent from nodes that predate it).
    public var storage: StorageInfo? = nil

    public struct StorageInfo: Codable, Sendable, Equatable {
        public var dataDirectory: String
        /// What the node may still write on the data dir's disk (null when it cannot be read).
        public var freeBytes: UInt64?
    }
}
