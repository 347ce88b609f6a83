#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Timing and fan-out of the membership protocol. The profiles follow memberlist's LAN, WAN and
/// local configurations, tightened for `lan` so that a dead node is known everywhere within 5 s
/// in a 50-node mesh (Docs/BENCHMARKS.md).
package struct MembershipSettings: Sendable, Equatable {
    package enum Profile: String, Sendable, CaseIterable {
        case lan, local, wan
    }

    /// Time between two probes of this node (before the local-health multiplier).
    package var probeInterval: Duration
    /// How long to wait for a direct ack before asking others to probe (before the multiplier).
    package var probeTimeout: Duration
    /// When a probe without an ack has failed (before the multiplier; at most the probe period).
    /// Apart from the interval, so that probing less often does not also detect later.
    package var probeDeadline: Duration
    /// How many members to ask for an indirect probe.
    package var indirectProbes: Int
    /// Suspicion lasts `suspicionMultiplier × max(1, log10 N) × suspicionUnit` at least …
    package var suspicionMultiplier: Double
    /// The time a suspicion is measured in: what a refutation needs to come back (gossip to the
    /// suspect and back, a verification probe or two), not how often members are probed.
    package var suspicionUnit: Duration
    /// … and `suspicionMaxMultiplier` times that at most, shrinking with confirmations (Lifeguard).
    package var suspicionMaxMultiplier: Double
    /// The most the local-health multiplier stretches probe intervals and timeouts (Lifeguard).
    package var maxLocalHealth: Int
    /// Each update is sent `retransmitMultiplier × ⌈log10(N + 1)⌉` times.
    package var retransmitMultiplier: Int
    package var gossipInterval: Duration
    package var gossipFanout: Int
    /// Full-state exchange with one random member, to repair what gossip missed.
    package var pushPullInterval: Duration
    /// Dead and left members are forgotten after this long.
    package var forgetAfter: Duration
    /// How soon a joiner that has heard from no one first retries its seeds; each wait after
    /// that doubles, up to `joinRetryMaximum`, for as long as nobody answers. Also the spacing
    /// of answers to one member's joins (half of it) and of questions to one stranger.
    package var joinRetryInterval: Duration
    /// The longest wait between two tries of the seeds: a joiner whose invite nobody answers
    /// keeps trying for good (the inviter may come up later) at a few datagrams a minute.
    package var joinRetryMaximum: Duration = .seconds(30)
    /// Each wait is cut by up to this share, at random (from the seeded generator), so that
    /// joiners started together (a restarted lab, one invite given to many) do not retry in
    /// step. Below ½: an honest joiner's retries stay further apart than the answer spacing.
    package var joinRetryJitter = 0.2
    /// The most seeds one try contacts; with more (a restart that remembered a large mesh),
    /// the next tries take the next ones in turn.
    package var joinSeedsPerAttempt = 32
    /// How often to offer our state to one dead member, so healed partitions merge.
    package var reconnectInterval: Duration
    /// How long a member forgotten after it died is still asked, as a joiner asks its seeds
    /// (`LostMembers`): a cut that outlasts `forgetAfter` still heals (Serf's reconnect timeout).
    package var lostMemberRetention: Duration = .seconds(24 * 3600)
    /// Refutations forced by one other boot of our identity before it counts as a live twin.
    package var identityConflictRefutations = 4
    /// News (an update this node had not seen) is gossiped this soon after the last round
    /// instead of at the next regular one: each hop of an epidemic would otherwise wait half a
    /// gossip interval on average. `nil`: news waits for the regular round.
    package var newsGossipSpacing: Duration? = .milliseconds(20)
    /// The most members, this node included, that are neither dead nor left: a record for one
    /// more is refused until a slot frees. What a member can invent (records for identities
    /// nobody runs) then costs the others a bounded table, and a removal's rotation, which
    /// names every member but its author and the removed in one datagram, always fits (also
    /// when the removed member is not among the live). Simulations of large meshes raise it.
    package var maxLiveMembers = KeyRotation.maxRoster + 1

    package static func profile(_ profile: Profile) -> MembershipSettings {
        switch profile {
        case .lan:
            return MembershipSettings(
                probeInterval: .milliseconds(800), probeTimeout: .milliseconds(200),
                probeDeadline: .milliseconds(500), indirectProbes: 3, suspicionMultiplier: 3,
                suspicionUnit: .milliseconds(350), suspicionMaxMultiplier: 4, maxLocalHealth: 8,
                retransmitMultiplier: 5,
                gossipInterval: .milliseconds(200), gossipFanout: 3, pushPullInterval: .seconds(30),
                forgetAfter: .seconds(60), joinRetryInterval: .seconds(1), reconnectInterval: .seconds(5))
        case .local:
            return MembershipSettings(
                probeInterval: .milliseconds(200), probeTimeout: .milliseconds(100),
                probeDeadline: .milliseconds(200), indirectProbes: 2, suspicionMultiplier: 3,
                suspicionUnit: .milliseconds(200), suspicionMaxMultiplier: 4, maxLocalHealth: 8,
                retransmitMultiplier: 3,
                gossipInterval: .milliseconds(100), gossipFanout: 3, pushPullInterval: .seconds(15),
                forgetAfter: .seconds(30), joinRetryInterval: .milliseconds(500), reconnectInterval: .seconds(3)
            )
            .withNewsSpacing(.milliseconds(10)).withJoinRetryMaximum(.seconds(10))
        case .wan:
            return MembershipSettings(
                probeInterval: .seconds(5), probeTimeout: .seconds(3),
                probeDeadline: .seconds(5), indirectProbes: 3, suspicionMultiplier: 6,
                suspicionUnit: .seconds(5), suspicionMaxMultiplier: 4, maxLocalHealth: 8, retransmitMultiplier: 4,
                gossipInterval: .milliseconds(500), gossipFanout: 4, pushPullInterval: .seconds(60),
                forgetAfter: .seconds(300), joinRetryInterval: .seconds(3), reconnectInterval: .seconds(30)
            )
            .withNewsSpacing(.milliseconds(100)).withJoinRetryMaximum(.seconds(60))
        }
    }

    package static let lan = profile(.lan)

    private func withNewsSpacing(_ spacing: Duration?) -> MembershipSettings {
        var settings = self
        settings.newsGossipSpacing = spacing
        return settings
    }

    private func withJoinRetryMaximum(_ maximum: Duration) -> MembershipSettings {
        var settings = self
        settings.joinRetryMaximum = maximum
        return settings
    }

    /// Lifeguard's suspicion bounds for a cluster of `memberCount`.
    package func suspicionTimeouts(memberCount: Int) -> (minimum: Duration, maximum: Duration) {
        let scale = max(1.0, log10(Double(max(1, memberCount))))
        let minimum = suspicionUnit * (suspicionMultiplier * scale)
        return (minimum, minimum * suspicionMaxMultiplier)
    }

    /// How many times each update is piggybacked before it is dropped from the queue.
    package func retransmitLimit(memberCount: Int) -> Int {
        retransmitMultiplier * Int(log10(Double(memberCount + 1)).rounded(.up)).clamped(to: 1...)
    }

    /// Bound on the time from a crash to every live member seeing it dead, derived from these
    /// settings. Each of the N-1 survivors probes the crashed member once per round-robin round,
    /// at a uniformly random place in the round, so the chance that nobody has probed it after t
    /// probe intervals is about e^-t: 10 intervals leave it below 10^-4. Then one probe until its
    /// deadline, the longest suspicion, and the verdict's gossip retransmissions.
    package func deadDetectionBound(memberCount: Int) -> Duration {
        let (_, maximum) = suspicionTimeouts(memberCount: memberCount)
        let firstProbe = probeInterval * 10.0
        let dissemination = gossipInterval * Double(retransmitLimit(memberCount: memberCount) + 2)
        return firstProbe + min(probeDeadline, probeInterval) + maximum + dissemination
    }
}

extension Int {
    func clamped(to range: PartialRangeFrom<Int>) -> Int { Swift.max(self, range.lowerBound) }
}

extension Double {
    /// A share between 0 and ½ (a jitter that could cut a wait to nothing would not space retries).
    var clampedShare: Double { isFinite ? Swift.min(Swift.max(self, 0), 0.5) : 0 }
}
