import MeshCrypto
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Lifeguard's suspicion timer: it starts at the maximum and shrinks logarithmically as
/// independent members confirm the suspicion, down to the minimum after `expected` confirmations.
package struct Suspicion: Sendable, Equatable {
    package let incarnation: UInt64
    package let start: MeshInstant
    package let minimum: Duration
    package let maximum: Duration
    package let expectedConfirmations: Int
    package private(set) var accusers: Set<NodeID>
    /// How often the suspect was asked directly (see `verifyAt`).
    package var verifications = 0

    package init(
        incarnation: UInt64, accuser: NodeID, start: MeshInstant, minimum: Duration, maximum: Duration,
        expectedConfirmations: Int
    ) {
        self.incarnation = incarnation
        self.start = start
        self.minimum = minimum
        self.maximum = maximum
        self.expectedConfirmations = max(0, expectedConfirmations)
        self.accusers = [accuser]
    }

    /// Returns true when `accuser` is a new, independent confirmation.
    package mutating func confirm(by accuser: NodeID) -> Bool {
        guard accusers.count <= expectedConfirmations else { return false }
        return accusers.insert(accuser).inserted
    }

    package var confirmations: Int { accusers.count - 1 }

    package var timeout: Duration {
        guard expectedConfirmations > 0 else { return minimum }
        let fraction = log(Double(confirmations + 1)) / log(Double(expectedConfirmations + 1))
        let shrunk = maximum - (maximum - minimum) * min(1, fraction)
        return max(minimum, shrunk)
    }

    /// Set when the suspect was heard from as the timeout ran out: a member that talks is up,
    /// only late (a flooded or stalled member whose refutation is on its way), so it gets the
    /// whole maximum, whatever the confirmations. A crashed member is not heard (its last
    /// datagram is older than the suspicion), so detection is as fast as before.
    package var heldOpen = false

    package var deadline: MeshInstant { start + (heldOpen ? maximum : timeout) }

    /// When to ask the suspect directly next: every 30% of the minimum timeout, from then until
    /// the deadline. Gossip misses a refutation now and then (about e^-copies per member); a
    /// direct question answered with the suspect's current record does not depend on it.
    package var verifyAt: MeshInstant? {
        let next = start + minimum * (0.3 * Double(verifications + 1))
        return next < deadline ? next : nil
    }
}
