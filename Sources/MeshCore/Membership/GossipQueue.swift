import MeshCrypto

/// Updates waiting to be piggybacked (SWIM's dissemination component). Each is sent a limited
/// number of times; the least-sent go first, and a newer update about a member replaces the
/// older one, so the queue holds at most one update per member.
package struct GossipQueue: Sendable {
    struct Entry: Sendable {
        var frame: Frame
        var encodedLength: Int
        var transmissions: Int
        var order: UInt64  // newer updates win ties
    }

    private var entries: [NodeID: Entry] = [:]
    private var nextOrder: UInt64 = 0

    package init() {}

    package var count: Int { entries.count }
    /// How many updates were ever enqueued: a caller that sees it grow knows there is news.
    package var updatesEnqueued: UInt64 { nextOrder }
    package var isEmpty: Bool { entries.isEmpty }

    package mutating func enqueue(_ frame: Frame, about member: NodeID) {
        nextOrder += 1
        entries[member] = Entry(
            frame: frame, encodedLength: FrameCodec.encodedLength(of: frame),
            transmissions: 0, order: nextOrder)
    }

    /// Whether some update has been sent fewer than `count` times and can go to one of
    /// `recipients` (a member's own `alive` record does not go to it; see `take`).
    package func hasUpdates(sentFewerThan count: Int, toAnyOf recipients: [NodeID]) -> Bool {
        entries.contains { member, entry in
            guard entry.transmissions < count else { return false }
            guard case .alive = entry.frame else { return true }
            return recipients.count > 1 || recipients.first.map { $0 != member } ?? false
        }
    }

    package mutating func remove(about member: NodeID) {
        entries[member] = nil
    }

    /// Takes updates for one datagram to `recipient`, within `budget` bytes, counting a
    /// transmission for each and dropping those sent `limit` times. A member's own `alive` record
    /// is passed over on a datagram to that member: it signed the newest one itself, and the few
    /// transmissions an update gets belong to the members that have not heard it. What accuses
    /// the recipient still goes to it, so that it refutes.
    package mutating func take(budget: Int, limit: Int, for recipient: NodeID? = nil) -> [Frame] {
        guard !entries.isEmpty, budget > 0 else { return [] }
        let ordered = entries.sorted { lhs, rhs in
            if lhs.value.transmissions != rhs.value.transmissions {
                return lhs.value.transmissions < rhs.value.transmissions
            }
            return lhs.value.order > rhs.value.order
        }
        var remaining = budget
        var frames: [Frame] = []
        for (member, entry) in ordered where entry.encodedLength <= remaining {
            if member == recipient, case .alive = entry.frame { continue }
            frames.append(entry.frame)
            remaining -= entry.encodedLength
            if entry.transmissions + 1 >= limit {
                entries[member] = nil
            } else {
                entries[member]?.transmissions += 1
            }
            if remaining < FrameCodec.headerLength + 16 { break }
        }
        return frames
    }
}
