/// Puts unreliable messages back together from their fragments, in bounded memory: at most
/// `capacity` bytes of incomplete messages per peer (the oldest is dropped to make room), and
/// an incomplete message is dropped after `timeout`.
package struct FragmentReassembly: Sendable {
    struct Partial: Sendable {
        var fragments: [UInt16: [UInt8]]
        var count: UInt16
        var bytes: Int
        var started: MeshInstant
    }

    package let capacity: Int
    package let timeout: Duration
    private var partials: [UInt64: Partial] = [:]
    private var bytes = 0
    /// Recently completed ids, so a duplicated last fragment does not deliver twice.
    private var completed: [UInt64] = []
    private var completedSet: Set<UInt64> = []
    package private(set) var dropped: UInt64 = 0

    package init(capacity: Int = 1 << 20, timeout: Duration = .seconds(5)) {
        self.capacity = capacity
        self.timeout = timeout
    }

    package var bufferedBytes: Int { bytes }
    package var earliestExpiry: MeshInstant? { partials.values.map(\.started).min().map { $0 + timeout } }

    /// Returns the whole message once its last missing fragment arrives.
    package mutating func onFragment(_ fragment: UnreliableFragment, now: MeshInstant) -> [UInt8]? {
        guard !completedSet.contains(fragment.messageID) else { return nil }
        if fragment.count == 1 {
            remember(fragment.messageID)
            return fragment.body
        }
        var partial =
            partials[fragment.messageID]
            ?? Partial(fragments: [:], count: fragment.count, bytes: 0, started: now)
        guard partial.count == fragment.count, partial.fragments[fragment.index] == nil else { return nil }
        let cost = max(fragment.body.count, 64)
        // Room is made by dropping the oldest *other* messages: dropping this one would lose the
        // fragments already counted in `partial` while it is stored again below.
        while bytes + cost > capacity,
            let oldest = partials.filter({ $0.key != fragment.messageID }).min(by: {
                $0.value.started < $1.value.started
            })
        {
            drop(oldest.key)
        }
        guard bytes + cost <= capacity else { return nil }
        partial.fragments[fragment.index] = fragment.body
        partial.bytes += cost
        bytes += cost
        partials[fragment.messageID] = partial
        guard partial.fragments.count == Int(partial.count) else { return nil }
        partials[fragment.messageID] = nil
        bytes -= partial.bytes
        remember(fragment.messageID)
        var message: [UInt8] = []
        for index in 0..<partial.count { message += partial.fragments[index] ?? [] }
        return message
    }

    /// Drops incomplete messages older than the timeout.
    package mutating func expire(now: MeshInstant) {
        for (id, partial) in partials where now >= partial.started + timeout { drop(id) }
    }

    private mutating func drop(_ id: UInt64) {
        guard let partial = partials.removeValue(forKey: id) else { return }
        bytes -= partial.bytes
        dropped += 1
    }

    private mutating func remember(_ id: UInt64) {
        completed.append(id)
        completedSet.insert(id)
        if completed.count > 1024 {
            completedSet.remove(completed.removeFirst())
        }
    }
}
