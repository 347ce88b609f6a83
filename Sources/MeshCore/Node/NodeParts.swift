import MeshCrypto

// The parts of `NodeInstance`'s state, one concern each. Each is a plain value mutated in place
// through the instance's stored property (never copied out and back: several hold tables that
// grow with the session). The extensions named beside each one carry its decisions.

/// Keys (NodeInstance+Epochs, +Removal): the epochs, their codecs, and what a rotation still owes.
struct KeyState: Sendable {
    var epochs: KeyEpochs
    var codec: DatagramCodec
    /// Codecs of the earlier epochs, by session id: for members that have not caught up.
    var earlierCodecs: [SessionID: DatagramCodec] = [:]
    /// When the next beacon of the current epoch goes out, and how many are left.
    var beaconAt: MeshInstant?
    var beaconsLeft = 0
    /// The members the rotations removed, where they were reached (and through whom, when
    /// relayed): told with the beacons.
    var removedToTell: [(member: NodeID, address: PeerAddress, relay: NodeID?)] = []
    /// When a removed member that spoke again in an epoch it knew was last answered with its
    /// removal (one that came back after the beacons, as a lost laptop found again does).
    var removedAnsweredAt: [NodeID: MeshInstant] = [:]
    /// When a member whose datagrams came in an epoch we never held was last sent a beacon in
    /// the epoch ours left, and the wait before the next (`beaconUnknownEpoch`).
    var unknownEpochBeacons: [NodeID: (at: MeshInstant, wait: Duration)] = [:]
    /// When a join in an epoch we left, from a node not owed the next, was last answered (an
    /// invite older than a removal): once a second in all, as its sender's id is its own to invent.
    var outOfDateAnsweredAt: MeshInstant?
    /// A `remove-member` whose rotation is being stored.
    var pendingRemoval: RequestID?
    /// A removal that takes more members than one rotation names: the rotations still to make.
    var stagedRemoval: StagedRemoval?
    /// The rotations that lost as last stored (`KeyEpochs.encodedRivals()`): stored again when
    /// they change without a change of epoch.
    /// Nil when the last write failed: written again at the next change of epoch or rivals.
    var storedRivals: [UInt8]?
    /// A key epoch without this node was seen (told once).
    var removedFromSession = false
    /// Notices of rotations out of our current epoch that remove us, each held a while before we
    /// stop: a competing rotation out of the same epoch that keeps us may be on its way, and win.
    /// One per epoch left, a few at most.
    var heldRemovalNotices: [(rotation: KeyRotation, until: MeshInstant)] = []
    /// Handovers that came while our own removal was being stored: taken once it is committed,
    /// so that ours and a competing one meet as two rotations out of one epoch.
    var deferredHandovers: [(handover: EpochHandover, header: DatagramHeader, address: PeerAddress)] = []
}

/// A member removed with more members it introduced than one rotation names
/// (`KeyRotation.maxRemoved`): rotations follow one another, the member in the first, until
/// every one is removed. What matters is the last: none of them holds its secret.
struct StagedRemoval: Sendable {
    var request: RequestID
    var member: NodeID
    /// Everyone it introduced, in the order they go.
    var introduced: [NodeID]
    /// Rotations made so far, and how many the last was handed to.
    var rotations = 0
    var handedTo = 0
    /// When the next rotation goes: each waits for rivals of the one before (`removalNoticeHold`),
    /// which are weighed only out of the epoch it left. Nil while one is being stored.
    var nextAt: MeshInstant?
}

/// How this node goes: a leave waiting for others to hold what only it holds
/// (NodeInstance+Leave), or the session being ended (NodeInstance+End).
struct Closing: Sendable {
    var handover: LeaveHandover?
    var ending: SessionEnding?
}

/// The members as the rest of the node reaches them (NodeInstance+Membership, +Joining).
struct MemberDirectory: Sendable {
    /// Where each live member is reached: looking it up in the membership per datagram sent
    /// would cost a copy of the member.
    var addresses: [NodeID: PeerAddress] = [:]
    /// What the data dir keeps for the next start, and whether it changed since it was saved.
    var remembered: RememberedMembers
    var rememberedDirty = false
    /// While joining through seeds, until a member answers.
    var joinWait: JoinWait?
    /// A member that took part, left out of a rotation's roster (away while a member was removed,
    /// by a remover that did not know it): the author of that rotation, once told.
    var leftOutBy: NodeID?
    /// The wall clock at an instant (`Boot.unixTime`): when members were lost, in `members.json`.
    var wallClock: (instant: MeshInstant, unixTime: UInt64)?
    /// Members whose journal sync waits for their first datagram of their own: a record names
    /// an address only by its claim, and sync to it would answer one datagram with several. The
    /// value: whether it is the boot we knew (a false death, whose holdings stand).
    var unprovenJoiners: [NodeID: Bool] = [:]
    /// Addresses a member's hello came from that nothing vouches for, checked lately with a
    /// pairwise ping (NodeInstance+AddressChecks): a few per member.
    var addressChecks: [NodeID: [AddressCheck]] = [:]
    /// Who let each member in (NodeInstance+Introductions).
    var introductions: IntroductionBook
    /// The session's founding id, and who founded it (NodeInstance+Founding).
    var founding: SessionFounding?
    /// Members we let in that held no founding id, asked once more (NodeInstance+Founding).
    var foundingRetold: Set<NodeID> = []
}

/// Commands waiting for the network (NodeInstance+Messenger, +Ping).
struct CommandWaits: Sendable {
    /// Application sends waiting for their acknowledgements, by delivery send id.
    var sends: [UInt64: (request: RequestID, recipients: Int, reliable: Bool)] = [:]
    /// `ping` commands waiting for their `pong`, by token.
    var pings: [UInt64: (request: RequestID, member: NodeID, address: PeerAddress, sentAt: MeshInstant)] = [:]
}

/// The attachments this node holds or knows of, as the store last said (NodeInstance+Journal).
struct AttachmentLibrary: Sendable {
    /// The manifests and the index of their chunks.
    var manifestTable = ManifestTable()
    /// Attachments whose every chunk is stored (and durable).
    var complete: Set<SHA256Digest> = []
    /// Chunks held of attachments neither whole nor fetching.
    var knownHeld: [SHA256Digest: Int] = [:]
    /// Whether `start` has the store delete what no attachment uses (`Restored.logIsWhole`).
    var collectsAtStart = false
    /// Attachments whose manifest was found damaged and is not stored again yet
    /// (`Restored.damagedManifests`), and what the data dir last recorded of them (nil: unknown).
    var damagedManifests: Set<SHA256Digest> = []
    var damagedManifestsSaved: Set<SHA256Digest>? = []
    /// Damaged manifests written again whose sync has not come back yet.
    var manifestsBeingWritten: Set<SHA256Digest> = []
    /// Operations of others applied but not yet in the journal log (their append failed).
    var backlog: [JournalOperation] = []
    var backlogRetryAt: MeshInstant?
    /// The slow check of every chunk held whole.
    var scrub = ChunkScrub()
}

/// Fetches under way and what waits on them (NodeInstance+Fetch).
struct FetchTable: Sendable {
    var fetches: [SHA256Digest: Fetch] = [:]
    /// Chunk requests in flight, by digest: which chunks of which attachments they are for.
    var requested: [SHA256Digest: [ChunkRef]] = [:]
    /// Fetches that failed, and when replication tries each again (the wait doubles per failure).
    var retries: [SHA256Digest: (failures: Int, at: MeshInstant)] = [:]
    /// Loads waiting for their attachment's fetch.
    var loadWaiters: [SHA256Digest: [(request: RequestID, destination: ExportDestination)]] = [:]
    /// Loads sent back to a fetch because the attachment was found damaged, and how often.
    var exportRetries: [RequestID: Int] = [:]
    /// Fetches that stored chunks since availability was last announced, and when it is next.
    var dirtyBitmaps: Set<SHA256Digest> = []
    var nextAvailabilityAt = MeshInstant.zero
    /// Replication waits a while after the store failed to take a chunk.
    var replicationPausedUntil: MeshInstant?
}

/// Serving chunks to others (NodeInstance+Serve).
struct ServingState: Sendable {
    /// Chunk reads under way for other members, until their pieces are written.
    var reads: Set<ServeBudget.Key> = []
    /// Of those, the ones whose asker cancelled them meanwhile (`ChunkCancel`): nothing is sent.
    var cancelled: Set<ServeBudget.Key> = []
    /// Bytes of each chunk sent to each member lately: past two copies a second, a chunk kept in
    /// memory is read again for that member instead.
    var budget = ServeBudget()
    /// Chunks just served, for re-asks of their lost pieces.
    var recentChunks: RecentChunks
    /// Whether the driver's send queue takes more (`setWritable`).
    var writable = true
    /// Pieces owed to members, leaving at the rates they asked for.
    var pacer = PiecePacer()
    /// Initial seeding: which wants for chunks we added are left to others.
    var seeding: SeedingPolicy
}

/// Receiving chunks (NodeInstance+Pacing, +Resume).
struct ReceivingState: Sendable {
    var downlink: DownlinkController
    /// What fetches reached over their holders' paths, for careful resume.
    var savedPaths = SavedPathCapacities()
    /// Members that sent this node a chunk that verified: only their pieces and datagram numbers
    /// feed the controller.
    var provenHolders: Set<NodeID> = []
    /// The pace each holder was last told, when, and whether it shows.
    var toldRates: [NodeID: ToldPace] = [:]
    var assembler: ChunkAssembler
}

/// Where members see us and whom we meet on the LAN (NodeInstance+Addresses, +LAN).
struct Reachability: Sendable {
    /// Where members see us, and our candidate addresses.
    var discovery: AddressDiscovery
    /// Where we told each member its datagrams come from.
    var echoes: AddressEchoes
    /// The NAT behaviour last reported (logged and told to the driver when it changes).
    var reportedNAT = NATBehaviour.unknown
    /// When we announce ourselves on the LAN, and whom we met there.
    var lan: LANDiscovery
}

/// Each member's path: where its own datagrams proved it is, hole punching, birthday rounds and
/// the datagram size it carries (NodeInstance+Paths, +Birthday, +PathMTU).
struct LinkState: Sendable {
    var paths: MemberPaths
    var checkAt = MeshInstant.zero
    var birthday: BirthdayPunching
    var birthdayCheckAt = MeshInstant.zero
    var pathMTU: PathMTUDiscovery
    /// Probes answered per member in the current second.
    var probeAnswers: [NodeID: (count: Int, since: MeshInstant)] = [:]
}
