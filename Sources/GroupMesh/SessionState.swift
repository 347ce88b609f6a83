/// Where a session is in its life, as GroupSession's `State`: `waiting` until `join()`, then
/// `joined`, then `invalidated` with the reason, for good. Every stream of the session (state,
/// participants, messages, attachments) has finished once it is invalidated.
public enum SessionState: Sendable, Equatable, CustomStringConvertible {
    /// Made, not joined: subscribe to what you need now, then `join()`, and nothing is missed.
    case waiting
    case joined
    case invalidated(reason: InvalidationReason)

    public var isInvalidated: Bool {
        if case .invalidated = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .waiting: return "waiting"
        case .joined: return "joined"
        case let .invalidated(reason): return "invalidated (\(reason))"
        }
    }
}

/// Why a session ended for this member.
public enum InvalidationReason: Sendable, Equatable, CustomStringConvertible {
    /// `leave()`.
    case left
    /// A member (maybe this one) called `end()`: the session is over for everyone.
    case ended(by: String)
    /// Another member removed this one (`remove-member`): the session goes on without it.
    case removed(by: String)
    /// Another live node has this node's identity and started earlier (a copied data dir).
    case identityConflict(twin: String)
    /// `join()` failed: the sockets or the data dir could not be set up.
    case failedToStart(String)
    /// Stopped without a word (the process is going away).
    case stopped

    public var description: String {
        switch self {
        case .left: return "left"
        case let .ended(by): return "ended by \(by)"
        case let .removed(by): return "removed by \(by)"
        case let .identityConflict(twin): return "another node with this identity runs at \(twin)"
        case let .failedToStart(reason): return "failed to start: \(reason)"
        case .stopped: return "stopped"
        }
    }
}
