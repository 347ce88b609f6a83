import MeshCrypto
import NIOCore

/// The session's key epochs as one node knows them: the secret it joined with, then each
/// rotation it took part in (Docs/SECURITY.md §Key epochs). Pure: the shell persists
/// `encoded()`, builds codecs from the secrets, and sends the handovers it is told to.
///
/// A member that missed a rotation (offline, or its handover was lost) still speaks the
/// earlier epoch. Any node that holds both answers it with a handover, but only if the member
/// was known to it when the rotation happened and was not removed: so an invite of the earlier
/// epoch no longer lets anyone new in.
public struct KeyEpochs: Sendable {
    public struct Transition: Sendable, Equatable {
        public var rotation: KeyRotation
        /// The secret of the epoch the rotation opened.
        public var secret: SessionSecret
        /// Members of the earlier epoch that may catch up (known then, not removed).
        public var entitled: Set<NodeID>

        public init(rotation: KeyRotation, secret: SessionSecret, entitled: Set<NodeID>) {
            self.rotation = rotation
            self.secret = secret
            self.entitled = entitled
        }
    }

    public enum Acceptance: Equatable, Sendable {
        /// A new epoch: switch to it. `replacing` is our current epoch when the new one is a
        /// competing rotation out of the same epoch that wins (two removals at once).
        case adopted(Transition, replacing: Transition?)
        /// The rotation out of our current epoch is already taken.
        case known
        /// The rotation leaves an epoch other than our current one.
        case notOurEpoch
        /// It removes us: the secret does not concern us any more.
        case removesUs
        /// Bad signature, wrong secret, or a sender that may not rotate.
        case invalid
    }

    /// At most one handover per member in this interval: a member that keeps speaking the old
    /// epoch (its handover lost) is answered again, a flood of its datagrams is not.
    public static let handoverInterval: Duration = .milliseconds(250)

    public let origin: SessionSecret
    public private(set) var transitions: [Transition]
    /// Every member removed by any rotation we know.
    public private(set) var removed: Set<NodeID>
    /// Epochs we were in that lost to a competing rotation, with the transition that won: their
    /// members are handed the winner. Not persisted (a restart forgets them).
    private var superseded: [SessionID: (secret: SessionSecret, winner: SessionID)] = [:]
    private var lastHandover: [HandoverKey: MeshInstant] = [:]

    private struct HandoverKey: Hashable {
        var member: NodeID
        var epoch: SessionID
    }

    public init(origin: SessionSecret, transitions: [Transition] = []) {
        self.origin = origin
        self.transitions = transitions
        self.removed = Set(transitions.flatMap(\.rotation.removed))
    }

    public var current: SessionSecret { transitions.last?.secret ?? origin }

    /// Epochs before the current one, oldest first.
    public var previousSecrets: [SessionSecret] {
        Array(([origin] + transitions.map(\.secret)).dropLast())
    }

    /// The secret of any epoch we had, by its session id.
    public func secret(of session: SessionID) -> SessionSecret? {
        if origin.sessionID == session { return origin }
        if let lost = superseded[session] { return lost.secret }
        return transitions.first { $0.secret.sessionID == session }?.secret
    }

    /// The transition out of an earlier epoch; nil for the current epoch or one we never had.
    public func transition(after session: SessionID) -> Transition? {
        if origin.sessionID == session { return transitions.first }
        if let lost = superseded[session] { return transitions.first { $0.secret.sessionID == lost.winner } }
        guard let index = transitions.firstIndex(where: { $0.secret.sessionID == session }) else { return nil }
        return transitions.indices.contains(index + 1) ? transitions[index + 1] : nil
    }

    /// Moves the session to `secret`, leaving `removing` out. `members` are the members known
    /// now (any state): they, less the removed, may catch up later.
    public mutating func rotate(removing: Set<NodeID>, to secret: SessionSecret, members: Set<NodeID>,
                                authority: some RecordAuthority) -> Transition {
        let rotation = KeyRotation(previousSession: current.sessionID, nextSession: secret.sessionID,
                                   removed: removing.sorted(), signingKey: authority.signingKey).signed(by: authority)
        let transition = Transition(rotation: rotation, secret: secret,
                                    entitled: members.subtracting(removing).subtracting(removed))
        append(transition)
        return transition
    }

    /// Takes a rotation handed over by `sender` (already proven by its signed record) with the
    /// secret it carried. `members` are the members we know now; the sender must be one of them.
    public mutating func accept(_ rotation: KeyRotation, secret: SessionSecret, from sender: NodeID,
                                localID: NodeID, members: Set<NodeID>,
                                authority: some RecordAuthority) -> Acceptance {
        guard rotation.hasValidSignature(authority), secret.sessionID == rotation.nextSession,
              members.contains(sender), !removed.contains(sender), !removed.contains(rotation.author),
              !rotation.removed.contains(sender), rotation.removed.count <= KeyRotation.maxRemoved else {
            return .invalid
        }
        if transitions.contains(where: { $0.rotation.nextSession == rotation.nextSession })
            || superseded[rotation.nextSession] != nil { return .known }
        // A competing rotation out of the epoch our current one left: the one that wins takes
        // its place, so that two removals at the same moment do not split the session.
        var replacing: Transition?
        if rotation.previousSession != current.sessionID {
            guard let last = transitions.last, rotation.previousSession == last.rotation.previousSession,
                  Self.wins(rotation, over: last.rotation) else { return .notOurEpoch }
            replacing = last
        }
        if rotation.removed.contains(localID) { return .removesUs }
        if let replacing {
            transitions.removeLast()
            removed = Set(transitions.flatMap(\.rotation.removed))
            superseded[replacing.secret.sessionID] = (replacing.secret, rotation.nextSession)
        }
        let transition = Transition(rotation: rotation, secret: secret,
                                    entitled: members.subtracting(rotation.removed).subtracting(removed))
        append(transition)
        return .adopted(transition, replacing: replacing)
    }

    /// Which of two rotations out of the same epoch stands: not one whose author the other
    /// removes; else the smaller new session id (any rule works if every member applies it).
    public static func wins(_ rotation: KeyRotation, over other: KeyRotation) -> Bool {
        if other.removed.contains(rotation.author) { return false }
        if rotation.removed.contains(other.author) { return true }
        return rotation.nextSession.value < other.nextSession.value
    }

    /// Whether `member`, heard speaking the earlier epoch `session`, is to be handed the next
    /// epoch now; records the handover for the rate limit.
    public mutating func handover(to member: NodeID, heardIn session: SessionID, now: MeshInstant) -> Transition? {
        guard let transition = transition(after: session), transition.entitled.contains(member),
              !removed.contains(member) else { return nil }
        let key = HandoverKey(member: member, epoch: transition.secret.sessionID)
        if let last = lastHandover[key], now < last + Self.handoverInterval { return nil }
        lastHandover[key] = now
        return transition
    }

    /// Whether `member` is owed a handover from an earlier epoch at all (for counting drops).
    public func isEntitled(_ member: NodeID, heardIn session: SessionID) -> Bool {
        guard let transition = transition(after: session) else { return false }
        return transition.entitled.contains(member) && !removed.contains(member)
    }

    private mutating func append(_ transition: Transition) {
        transitions.append(transition)
        removed.formUnion(transition.rotation.removed)
    }

    // MARK: persistence

    static let fileMagic = Array("GMEP".utf8)
    static let fileVersion: UInt8 = 1
    /// Far above any real history; bounds what a damaged file can make us allocate.
    public static let maxFileBytes = 4 << 20

    /// The transitions as bytes for the data dir's `epochs.key` (secrets inside: store it 0600).
    public func encoded() -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(Self.fileMagic)
        buffer.writeInteger(Self.fileVersion)
        buffer.writeInteger(UInt32(transitions.count))
        for transition in transitions {
            transition.rotation.encode(into: &buffer)
            buffer.writeBytes(transition.secret.bytes)
            buffer.writeInteger(UInt32(transition.entitled.count))
            for id in transition.entitled.sorted() { id.encode(into: &buffer) }
        }
        return Array(buffer.readableBytesView)
    }

    public static func decode(_ bytes: [UInt8], origin: SessionSecret) throws(WireError) -> KeyEpochs {
        var buffer = ByteBuffer(bytes: bytes)
        guard try buffer.readWireBytes(fileMagic.count, "epochs magic") == fileMagic,
              try buffer.readWire(UInt8.self, "epochs version") == fileVersion else {
            throw .invalidField(what: "epochs file header")
        }
        let count = try buffer.readWire(UInt32.self, "epoch count")
        var transitions: [Transition] = []
        var previous = origin.sessionID
        for _ in 0..<count {
            let rotation = try KeyRotation(decoding: &buffer)
            guard let secret = try? SessionSecret(bytes: try buffer.readWireBytes(SessionSecret.byteCount, "epoch secret")),
                  rotation.previousSession == previous, secret.sessionID == rotation.nextSession else {
                throw .invalidField(what: "epoch chain")
            }
            let entitledCount = try buffer.readWire(UInt32.self, "entitled count")
            guard Int(entitledCount) * NodeID.byteCount <= buffer.readableBytes else {
                throw .truncated(what: "entitled members")
            }
            var entitled = Set<NodeID>()
            for _ in 0..<entitledCount { entitled.insert(try NodeID(decoding: &buffer)) }
            transitions.append(Transition(rotation: rotation, secret: secret, entitled: entitled))
            previous = secret.sessionID
        }
        guard buffer.readableBytes == 0 else { throw .trailingBytes(buffer.readableBytes) }
        return KeyEpochs(origin: origin, transitions: transitions)
    }
}
