/// What membership counts for an operator: how often this node came to suspect a member, how
/// often it had to refute an accusation of itself, and the round trips of its direct probes.
package struct MembershipCounters: Sendable, Equatable {
    /// Members this node began to suspect (its own failed probe, or an accusation it took).
    package var suspicionsRaised: UInt64 = 0
    /// Times this node outbid what others held of it: a suspicion, a death, a record or a
    /// departure of an earlier boot (or of a live twin).
    package var refutations: UInt64 = 0
    /// Round trips of direct probes answered in time.
    package var roundTrips = RoundTripSamples()
    /// Indirect probe requests not carried out: for no member this node knows alive, or to an
    /// address that is not one of that member's (a probe is never aimed at a third party).
    package var probeRequestsRefused: UInt64 = 0
    /// State digests (and summaries) from ids that are no member this node knows: not answered.
    package var digestsRefused: UInt64 = 0
    /// Records of members not taken because `maxLiveMembers` were live (a new member, or one
    /// dead or left coming back).
    package var recordsRefusedFull: UInt64 = 0

    package init() {}
}

/// The latest round trips, numbered: a reader that comes back every second takes those after
/// the number it last saw, and learns how many it missed if it was away too long. Bounded,
/// so a reader that never comes costs nothing.
package struct RoundTripSamples: Sendable, Equatable {
    package static let capacity = 64
    private var ring: [Duration] = []
    /// How many were ever recorded (the number of the latest).
    package private(set) var count: UInt64 = 0

    package init() {}

    package mutating func record(_ rtt: Duration) {
        if ring.count < Self.capacity {
            ring.append(rtt)
        } else {
            ring[Int(count % UInt64(Self.capacity))] = rtt
        }
        count += 1
    }

    /// The samples recorded after the first `seen`, oldest first, and how many of those are
    /// no longer held.
    package func samples(after seen: UInt64) -> (samples: [Duration], missed: UInt64) {
        guard seen < count else { return ([], 0) }
        let held = UInt64(ring.count)
        let first = max(seen, count - held)
        let samples = (first..<count).map { ring[Int($0 % UInt64(Self.capacity))] }
        return (samples, first - seen)
    }
}
