import MeshCrypto

/// The members a node knows, keyed by id: a snapshot that nodes starting from the same view share
/// (copy-on-write, never written through), and this node's own changes on top of it.
///
/// A simulation of 10,000 nodes that each know the 10,000 others would otherwise hold 10^8
/// entries, tens of gigabytes. Started from one shared snapshot, each node holds only
/// what it changed since: the members it probed, the updates it heard. A node that starts alone
/// has an empty snapshot, and its changes are folded into a new snapshot of its own whenever they
/// outgrow the old one, so a lookup stays two hash probes at most and a write amortized O(1).
package struct MemberTable: Sendable {
    private var snapshot: [NodeID: Member]
    /// The snapshot's members that are neither dead nor left, by id: a node starting from a
    /// shared table reads its probe list from here without copying every member.
    private var snapshotActive: [NodeID]
    /// The snapshot's members that are not simply alive.
    private var snapshotUnsettled: [NodeID]
    /// Entries that differ from the snapshot: a member (added or changed), or nil (removed).
    private var changes: [NodeID: Member?] = [:]
    package private(set) var count: Int

    package init() {
        snapshot = [:]
        snapshotActive = []
        snapshotUnsettled = []
        count = 0
    }

    /// Every record as an alive member, changed `now`: the view of a converged mesh, to share
    /// between its nodes (`MembershipInstance.assume(_:now:)`).
    package init(assuming records: [MemberRecord], now: MeshInstant) {
        var members: [NodeID: Member] = [:]
        members.reserveCapacity(records.count)
        for record in records where members[record.id] == nil {
            members[record.id] = Member(
                record: record, status: .alive, incarnation: record.incarnation, lastChange: now)
        }
        snapshot = members
        snapshotActive = members.keys.sorted()
        snapshotUnsettled = []
        count = members.count
    }

    package var isEmpty: Bool { count == 0 }

    package subscript(id: NodeID) -> Member? {
        get {
            if let changed = changes[id] { return changed }
            return snapshot[id]
        }
        set {
            let existed = self[id] != nil
            if newValue == nil, snapshot[id] == nil {
                changes[id] = nil
            } else {
                changes[id] = .some(newValue)
            }
            count += (newValue != nil ? 1 : 0) - (existed ? 1 : 0)
            if changes.count > max(64, snapshot.count) { fold() }
        }
    }

    /// Every member, in no particular order.
    package var values: [Member] {
        var result: [Member] = []
        result.reserveCapacity(count)
        for (id, member) in snapshot where changes[id] == nil { result.append(member) }
        for case let member? in changes.values { result.append(member) }
        return result
    }

    /// The ids of the members that are not simply alive (suspect, dead, left): those with a clock
    /// running. None in a table made by `init(assuming:now:)`.
    package var unsettledIDs: [NodeID] {
        var result: [NodeID] = []
        for id in snapshotUnsettled where changes[id] == nil { result.append(id) }
        for case let (id, member?) in changes where member.status != .alive { result.append(id) }
        return result.sorted()
    }

    /// The ids of the members that are neither dead nor left, in increasing order.
    package var activeIDs: [NodeID] {
        guard !changes.isEmpty else { return snapshotActive }
        var result = snapshotActive.filter { changes[$0] == nil }
        var added = false
        for (id, change) in changes {
            guard let member = change, !member.status.isGone else { continue }
            result.append(id)
            added = true
        }
        return added ? result.sorted() : result
    }

    /// A snapshot of our own with the changes folded in: after as many writes as the old one
    /// held, so each write pays O(1) for it on average.
    private mutating func fold() {
        var merged = snapshot
        for (id, change) in changes { merged[id] = change }
        snapshot = merged
        snapshotActive = merged.filter { !$0.value.status.isGone }.keys.sorted()
        snapshotUnsettled = merged.filter { $0.value.status != .alive }.keys.sorted()
        changes = [:]
    }
}
