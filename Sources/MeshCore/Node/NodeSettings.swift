import MeshCrypto

/// Every policy of a node in one value: the shell builds it from `NodeConfiguration`, the
/// simulation from its scenario. Sub-machines keep their own settings (`MembershipSettings`,
/// `TransferScheduler.Settings`, `SeedingPolicy.Settings`); this holds them and what the node decides itself.
package struct NodeSettings: Sendable {
    package var membership: MembershipSettings
    package var wire = DatagramCodec.Configuration()
    package var transfer = TransferScheduler.Settings()
    /// The serving side's initial seeding (`SeedingPolicy`).
    package var seeding = SeedingPolicy.Settings()
    /// Chunk size of the attachments this node adds (others' come with their manifests).
    package var chunkSize = Manifest.defaultChunkSize
    /// The largest attachment accepted (100 MiB unless configured).
    package var maxAttachmentSize: UInt64 = 100 << 20
    /// The largest message body (GroupSessionMessenger's limit).
    package var maxMessageSize = 256 * 1024
    /// The scrub of the chunks held whole: when its passes run, and how fast.
    package var scrub = ChunkScrub.Settings()
    /// `--lazy`: fetch an attachment only when it is asked for (`get`, `Journal.load`).
    package var lazy = false
    /// How long a fetch goes on with no progress and nothing asked before it fails `unavailable`.
    package var unavailableTimeout: Duration = .seconds(10)
    /// How long one holder may take to send a manifest before another is asked.
    package var manifestRequestTimeout: Duration = .seconds(5)
    /// Once every holder was asked for a manifest without a good answer, the next round waits this long.
    package var manifestRoundPause: Duration = .milliseconds(500)
    /// A member that added the content answers "busy" for chunks others can pass on
    /// (`SeedingPolicy.verdict`).
    package var superSeeding = true
    /// Chunks read for others at once; more wants are answered "busy" (a member cannot make us
    /// read without bound).
    package var maxConcurrentServes = 128
    /// Reads for one member at once: a member that floods wants takes no more than its share
    /// (more of its wants wait their turn as "busy"). As many as a joiner may have flowing from
    /// one holder (`TransferScheduler.Settings.maximumFlowing`): fewer, and a lone holder whose
    /// pieces leave as soon as they are read refuses a `get`'s own wants, each refused chunk
    /// waiting 200 ms (Docs/DESIGN-NOTES.md).
    package var maxServesPerPeer = 64
    /// Pieces waiting for their pace, in all and for one member: past these, wants are
    /// answered "busy" (a member asking slowly for much cannot make us hold it all).
    package var maxPacedBytes = 64 << 20
    package var maxPacedBytesPerPeer = 16 << 20
    /// The longest a chunk request waits at a slow pace before the scheduler gives it up (a lost
    /// want is asked again sooner, by the assembler, once the chunk stays silent).
    package var maximumPacedWait: Duration = .seconds(120)
    /// The requesting side's congestion control (`DownlinkController`).
    package var downlink = DownlinkController.Settings()
    /// How large a datagram each holder's path to us carries (`PathMTUDiscovery`). Its ladder's
    /// top must not be over `wire.maxReceivedDatagramSize`.
    package var pathMTU = PathMTUDiscovery.Settings()
    /// Probes answered per member per second (each up to 8,972 bytes, asked for in 83).
    package var maxProbeAnswers = 10
    /// When a reflexive address is adopted (a quorum of members agrees), and when a member is
    /// told where its datagrams come from (NodeInstance+Addresses).
    package var addressDiscovery = AddressDiscovery.Settings()
    package var addressEchoes = AddressEchoes.Settings()
    /// Paths to members: silence before an introduction, the punch budget, keepalives.
    package var paths = MemberPaths.Settings()
    /// Birthday rounds (a symmetric NAT against an endpoint-independent one): sockets, probes,
    /// their rate, retries.
    package var birthday = BirthdayPunching.Settings()
    /// How a member's protocol versions are asked (PROTOCOL.md §3, "Protocol versions").
    package var versions = PeerVersions.Settings()
    /// How a member asks to be introduced, and how many one may introduce (PROTOCOL.md §3,
    /// "Introductions").
    package var introductions = IntroductionBook.Settings()
    /// The versions this node says it speaks: a test claims others to meet a gap.
    package var spokenVersions = SpokenVersions.this
    /// False makes the node act as release 0.9.0 (protocol 1) does: it sends no version frame and
    /// drops a datagram carrying one as malformed (after it authenticated, as 0.9.0's does). For
    /// tests only.
    package var knowsVersionFrames = true
    /// Carrying datagrams between members that cannot meet (`--no-relay`), and at what rates.
    package var relay = RelayService.Settings()
    /// Announcing ourselves on the LAN and meeting members heard there (`--no-lan-discovery`).
    package var lanDiscovery = LANDiscovery.Settings()
    /// Chunks kept after serving them, for re-asks of lost pieces (4 MiB at 256 KiB chunks).
    package var recentChunkCapacity = 16
    /// Datagrams per segmented write: the kernel takes up to 64 segments and 64 KiB.
    package var maxSegments = 64
    package var maxSegmentedBytes = 65_000
    /// After a chunk could not be stored (a full disk), fetches start only when asked for until
    /// this has passed: replication would fetch chunks only to fail to store them again.
    package var replicationPauseAfterStoreFailure: Duration = .seconds(30)
    /// Replication tries a failed fetch again after this, doubling per failure up to the maximum:
    /// what made it fail (a holder restarting, a partition, a clock jump) passes, and the node
    /// still ends with every attachment.
    package var fetchRetry: Duration = .seconds(5)
    package var maximumFetchRetry: Duration = .seconds(60)
    /// New chunks are announced to the members (`chunks` bitmaps) at most this often.
    package var availabilityInterval: Duration = .milliseconds(250)
    /// How long a journal message may go unacknowledged before it is given up.
    package var journalSendTimeout: Duration = .seconds(30)
    /// Anti-entropy: every this often, one random member gets our operation ids. Operations go to
    /// every member when made and a member that joins or comes back is synced at once, so this
    /// only repairs what those missed, and seldom is enough: an idle node pays for every round
    /// (Docs/DESIGN-NOTES.md).
    package var journalSyncInterval: Duration = .seconds(30)
    /// Operations of others whose append to the journal log failed are appended again this often.
    package var journalLogRetryInterval: Duration = .seconds(5)
    /// A leave waits at most this, plus a second per `leaveHandoverBytesPerSecond` at risk, for
    /// other members to take what only this node holds.
    package var leaveHandoverBase: Duration = .seconds(10)
    package var leaveHandoverBytesPerSecond: UInt64 = 2 << 20
    /// A leave waits at most this for the reliable messages this node sent that are not yet
    /// acknowledged (a member gone by then is reported as not reached by the send).
    package var leaveDrain: Duration = .seconds(5)
    /// A member asked to take an attachment that does not hold it whole after this: one more is asked.
    package var leaveHandoverReask: Duration = .seconds(10)
    /// A `ping` unanswered this long fails.
    package var pingTimeout: Duration = .seconds(2)
    /// How long an end waits for the members it tells to acknowledge it before leaving.
    package var endGrace: Duration = .seconds(3)
    /// After an epoch change: beacons in the epoch left, how many and how often (PROTOCOL.md §7).
    package var epochBeacons = 10
    package var epochBeaconInterval: Duration = .seconds(1)
    /// A notice of our removal by a rotation out of our current epoch waits this long for a
    /// competing rotation that keeps us (a few beacon intervals) before the node stops.
    package var removalNoticeHold: Duration = .seconds(5)
    /// A node joining through seeds that has heard from no member this long after its start
    /// says so, once (`NodeEvent.waitingForFirstMember`): a wrong invite, a stopped inviter or
    /// a firewall otherwise look like a session that works.
    package var joinWaitingNotice: Duration = .seconds(5)
    /// Seed addresses kept in the data dir for a restart that met nobody (an invite has a few).
    package var maxRememberedSeeds = 16
    /// Log records below this level are never made: they would cost on the datagram path.
    package var logLevel = NodeLogLevel.info

    package init(membership: MembershipSettings = .lan) {
        self.membership = membership
    }

    /// The timing defaults of a profile (`run --profile`).
    package init(profile: MembershipSettings.Profile) {
        self.init(membership: .profile(profile))
    }
}
