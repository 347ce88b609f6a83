/// How the node's application-message consumers (each `listen`) keep up,
/// as the shell reports it: the receive-side flow control of the messenger (Docs/PROTOCOL.md
/// §5, Flow control). While a consumer is behind, the node takes no new application message
/// from any peer (so it acknowledges none); a consumer that makes no progress for `stallLimit`
/// is declared stalled and no longer counts, so one paused reader holds the node that long at
/// most. Pure: the shell supplies the time.
package struct ConsumerFlow: Sendable, Equatable {
    /// What the shell says of one consumer.
    package enum Report: Sendable, Equatable {
        /// Over its bound of queued bytes; said again each time it drained some (which restarts
        /// its stall clock). Saying it without progress would let a stalled reader hold the node.
        case behind
        /// Under its bound again, or gone.
        case caughtUp
    }

    /// The longest a consumer may hold acceptance without draining anything.
    package let stallLimit: Duration
    /// Behind consumers, by the shell's id, with when they last made progress.
    private var behind: [UInt64: MeshInstant] = [:]
    /// Declared stalled and not yet caught up (or gone): they hold nothing.
    private var stalled: Set<UInt64> = []

    package init(stallLimit: Duration) {
        self.stallLimit = stallLimit
    }

    /// Whether new application messages must wait: some consumer is behind and not stalled.
    package var isHolding: Bool { !behind.isEmpty }

    package mutating func report(_ consumer: UInt64, _ report: Report, now: MeshInstant) {
        switch report {
        case .behind:
            // A stalled consumer is cut off by the shell; until then it holds nothing.
            guard !stalled.contains(consumer) else { return }
            behind[consumer] = now
        case .caughtUp:
            behind[consumer] = nil
            stalled.remove(consumer)
        }
    }

    /// The consumers that made no progress for `stallLimit`, ascending: they stop holding
    /// acceptance, and the shell is to disconnect them.
    package mutating func expire(now: MeshInstant) -> [UInt64] {
        let expired = behind.filter { now >= $0.value + stallLimit }.map(\.key).sorted()
        for consumer in expired {
            behind[consumer] = nil
            stalled.insert(consumer)
        }
        return expired
    }

    /// When the earliest behind consumer would be declared stalled.
    package var nextDeadline: MeshInstant? {
        behind.values.min().map { $0 + stallLimit }
    }
}
