import MeshCrypto

/// Members this node held dead until it forgot them (`forgetAfter`), with where they were. A cut
/// that outlasts the forgetting (Wi-Fi gone for minutes, a laptop asleep, a partition into two
/// halves) would otherwise leave each side without the other for good: nobody would know where
/// to look. A lost member is asked as a joiner asks its seeds (our record and a request for its
/// members), each at waits that double up to a maximum, until `retention` has passed since it
/// was lost. One heard of again or removed is no longer lost.
///
/// Bounded: what a member invents and lets die (records naming any address) takes at most
/// `capacity` places, the oldest lost going first, and the membership asks at most a few of
/// them per reconnect interval.
package struct LostMembers: Sendable {
    package struct Entry: Sendable, Equatable {
        /// The record's first addresses.
        package var addresses: [PeerAddress]
        /// When it was added here, and how long it had been lost by then (before a restart: the
        /// monotonic clock may have started again since, so no instant of this boot says when).
        package var addedAt: MeshInstant
        package var ageWhenAdded: Duration
        package var nextAskAt: MeshInstant
        package var wait: Duration

        /// How long it has been lost.
        package func age(at now: MeshInstant) -> Duration { (now - addedAt) + ageWhenAdded }

        /// Larger for one lost later (nanoseconds on this boot's clock, below zero before it).
        package var lostOrder: Int64 { Int64(clamping: addedAt.nanoseconds) &- ageWhenAdded.nanosecondsClamped }
    }

    package static let capacity = 64
    /// Addresses kept per member: a record's first ones (its candidates, most likely first).
    package static let addressesKept = 4

    package init() {}

    package private(set) var entries: [NodeID: Entry] = [:]

    package var isEmpty: Bool { entries.isEmpty }

    package subscript(id: NodeID) -> Entry? { entries[id] }

    /// `id` was forgotten after it died, `age` ago (before a restart): asked first `firstWait`
    /// from now.
    package mutating func add(
        _ id: NodeID, addresses: [PeerAddress], now: MeshInstant, firstWait: Duration, age: Duration = .zero
    ) {
        let kept = Array(addresses.prefix(Self.addressesKept))
        guard !kept.isEmpty else { return }
        entries[id] = Entry(
            addresses: kept, addedAt: now, ageWhenAdded: max(.zero, age), nextAskAt: now + firstWait, wait: firstWait)
        if entries.count > Self.capacity,
            let oldest = entries.min(by: { ($0.value.lostOrder, $0.key) < ($1.value.lostOrder, $1.key) })
        {
            entries[oldest.key] = nil
        }
    }

    package mutating func remove(_ id: NodeID) {
        entries[id] = nil
    }

    /// Up to `count` members whose ask is due, the longest due first (ties by id), with their
    /// addresses; each one's next ask is pushed back by twice its last wait, up to `maximumWait`.
    /// Members lost longer than `retention` are dropped first.
    package mutating func takeDue(
        count: Int, now: MeshInstant, retention: Duration, maximumWait: Duration
    ) -> [(id: NodeID, addresses: [PeerAddress])] {
        entries = entries.filter { $0.value.age(at: now) < retention }
        let due = entries.filter { now >= $0.value.nextAskAt }
            .sorted { ($0.value.nextAskAt, $0.key) < ($1.value.nextAskAt, $1.key) }
            .prefix(max(0, count))
        return due.map { id, entry in
            var asked = entry
            asked.wait = min(entry.wait * 2, maximumWait)
            asked.nextAskAt = now + asked.wait
            entries[id] = asked
            return (id, entry.addresses)
        }
    }
}
