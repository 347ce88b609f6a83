import MeshCrypto
import NIOCore

/// The session's key epochs as one node knows them: the secret it joined with, then each
/// rotation it took part in (Docs/SECURITY.md §Key epochs). Pure: the shell persists
/// `encoded()`, builds codecs from the secrets, and sends the handovers it is told to.
///
/// A member that missed a rotation (offline, or its handover was lost) still speaks the
/// earlier epoch. Any node that holds both answers it with a handover, but only if the rotation's
/// roster names it (the rotating member knew it then) and it was not removed: so an invite of
/// the earlier epoch no longer lets anyone new in.
package struct KeyEpochs: Sendable {
    package struct Transition: Sendable, Equatable {
        package var rotation: KeyRotation
        /// The secret of the epoch the rotation opened.
        package var secret: SessionSecret

        package init(rotation: KeyRotation, secret: SessionSecret) {
            self.rotation = rotation
            self.secret = secret
        }
    }

    package enum RotationError: Error, Equatable, Sendable {
        case tooManyMembers(Int)
        case tooManyRemoved(Int)
    }

    package enum Acceptance: Equatable, Sendable {
        /// A new epoch: switch to it. `replacing` is our current epoch when the new one is a
        /// competing rotation out of the same epoch that wins (two removals at once).
        case adopted(Transition, replacing: Transition?)
        /// The rotation out of our current epoch is already taken.
        case known
        /// The rotation leaves an epoch other than our current one.
        case notOurEpoch
        /// It removes us: the secret does not concern us any more.
        case removesUs
        /// Bad signature, wrong secret, a sender that may not rotate, or not owed to us.
        case invalid
    }

    /// At most one handover per member in this interval: a member that keeps speaking the old
    /// epoch (its handover lost) is answered again, a flood of its datagrams is not.
    package static let handoverInterval: Duration = .milliseconds(250)

    /// The first epoch this node still holds: the secret it joined with, until the chain grew
    /// past `maxTransitions` and the oldest epochs were forgotten.
    package private(set) var origin: SessionSecret
    package private(set) var transitions: [Transition]
    /// What the forgotten epochs leave behind: their session ids, so that an invite of one is told
    /// apart from another session's, and whom they removed, who stay removed. Each bounded, the
    /// latest kept. Nil while nothing was forgotten.
    package struct Forgotten: Sendable, Equatable {
        package var sessions: [SessionID] = []
        package var removed: [NodeID] = []
        package static let maxEach = 1_024

        package init(sessions: [SessionID] = [], removed: [NodeID] = []) {
            self.sessions = sessions
            self.removed = removed
        }
    }
    package private(set) var forgotten: Forgotten?
    /// Whether the oldest epochs were forgotten: `origin` is no longer the secret joined with,
    /// so the file names it (`encoded()`).
    package var forgotOldest: Bool { forgotten != nil }
    /// Rotations kept after the origin, at most: the current epoch and the 256 before it. Any member may rotate (each removal is a
    /// rotation), so a member that removes and invites without end would make the chain, its
    /// file and a codec per epoch grow without bound; a real session sees a few. A member
    /// offline through more rotations than this is handed nothing and needs a new invite.
    package static let maxTransitions = 256
    /// Every member removed by any rotation we know.
    package private(set) var removed: Set<NodeID>
    /// Epochs that lost to a competing rotation out of the same epoch (`previous`), ours or
    /// handed to us: their members are handed whichever rotation out of `previous` stands now.
    /// Kept with the rivals in the data dir's `rivals.key` (`encodedRivals()`).
    private var superseded: [SessionID: (secret: SessionSecret, previous: SessionID)] = [:]
    /// The rotations out of the epoch our current one left that lost to it, with their secrets:
    /// the one that stands is chosen from all of them (`winner(of:)`), whatever order they came
    /// in, so that members that heard three or more in different orders end in one epoch.
    private var rivals: [Transition] = []
    /// Rotations out of that same epoch that remove us, known from their notices (no secret):
    /// part of the field too, or members would choose from different sets.
    private var removingRivals: [KeyRotation] = []
    /// Rivals kept of each kind, at most: any member may rotate, so a member could make a
    /// table of them; removals at the same moment are a few. Past it, members may keep
    /// different fields (a known gap: ROADMAP.md).
    package static let maxRivals = 8
    /// Member boots told the field since it last changed (`mayTellField`).
    private var fieldToldTo: Set<MemberBoot> = []

    private struct MemberBoot: Hashable {
        var member: NodeID
        var boot: UInt64
    }
    private var lastHandover: [HandoverKey: MeshInstant] = [:]

    private struct HandoverKey: Hashable {
        var member: NodeID
        var epoch: SessionID
    }

    package init(origin: SessionSecret, transitions: [Transition] = [], forgotten: Forgotten? = nil) {
        self.origin = origin
        self.transitions = transitions
        self.forgotten = forgotten
        self.removed = []
        recomputeRemoved()
        forgetOldestEpochs()
    }

    /// Every member a rotation we hold removed, and those the forgotten ones did.
    private mutating func recomputeRemoved() {
        removed = Set(forgotten?.removed ?? []).union(transitions.flatMap(\.rotation.removed))
    }

    /// Whether `session` is an epoch of this chain that was forgotten (and not held again).
    package func forgot(_ session: SessionID) -> Bool {
        guard forgotten?.sessions.contains(session) == true else { return false }
        return secret(of: session) == nil
    }

    package var current: SessionSecret { transitions.last?.secret ?? origin }

    /// Epochs before the current one, oldest first.
    package var previousSecrets: [SessionSecret] {
        Array(([origin] + transitions.map(\.secret)).dropLast())
    }

    /// Whether `secret` is one of the chain's epochs (an invite of this session, however old, as
    /// long as its epoch was not forgotten).
    package func holds(_ secret: SessionSecret) -> Bool {
        origin == secret || transitions.contains { $0.secret == secret }
    }

    /// The secret of any epoch we had, by its session id.
    package func secret(of session: SessionID) -> SessionSecret? {
        if origin.sessionID == session { return origin }
        if let lost = superseded[session] { return lost.secret }
        return transitions.first { $0.secret.sessionID == session }?.secret
    }

    /// The transition out of an earlier epoch; nil for the current epoch or one we never had.
    package func transition(after session: SessionID) -> Transition? {
        if origin.sessionID == session { return transitions.first }
        if let lost = superseded[session] { return transitions.first { $0.rotation.previousSession == lost.previous } }
        guard let index = transitions.firstIndex(where: { $0.secret.sessionID == session }) else { return nil }
        return transitions.indices.contains(index + 1) ? transitions[index + 1] : nil
    }

    /// The rotation that moves the session to `secret` without `removing`, owed to the members
    /// known now less the removed: every `live` one, then as many of `others` (known in another
    /// state, the likeliest to come back first) as the roster still holds. A member left out,
    /// long dead, needs an invite again. Taken with `commit` once stored.
    package func rotation(
        removing: Set<NodeID>, to secret: SessionSecret, live: Set<NodeID>, others: [NodeID] = [],
        authority: some RecordAuthority
    ) throws(RotationError) -> Transition {
        let notOwed = removing.union(removed).union([authority.signingKey.nodeID])
        let required = live.subtracting(notOwed)
        guard removing.count <= KeyRotation.maxRemoved else { throw .tooManyRemoved(removing.count) }
        guard required.count <= KeyRotation.maxRoster else { throw .tooManyMembers(required.count) }
        var owed = required
        for id in others where owed.count < KeyRotation.maxRoster && !notOwed.contains(id) { owed.insert(id) }
        let rotation = KeyRotation(
            previousSession: current.sessionID, nextSession: secret.sessionID,
            removed: removing.sorted(), roster: owed.map(KeyRotation.rosterEntry).sorted(),
            signingKey: authority.signingKey
        ).signed(by: authority)
        return Transition(rotation: rotation, secret: secret)
    }

    /// Takes a rotation this node made (`rotation(removing:…)`), after it was stored.
    package mutating func commit(_ transition: Transition) {
        (rivals, removingRivals, fieldToldTo) = ([], [], [])
        append(transition)
    }

    /// The epochs with `transition` taken: what to store before switching.
    package func committing(_ transition: Transition) -> KeyEpochs {
        var copy = self
        copy.commit(transition)
        return copy
    }

    /// Takes a rotation handed over by `sender` (already proven by its signed record) with the
    /// secret it carried. `members` are the members we know now; the sender must be one of them.
    package mutating func accept(
        _ rotation: KeyRotation, secret: SessionSecret, from sender: NodeID,
        localID: NodeID, members: Set<NodeID>,
        authority: some RecordAuthority
    ) -> Acceptance {
        // A competing rotation is judged against the epochs before the one it competes with.
        let competing =
            rotation.previousSession != current.sessionID
            && transitions.last?.rotation.previousSession == rotation.previousSession
        let removedBefore = competing ? removed(before: rotation.previousSession) : removed
        guard secret.sessionID == rotation.nextSession, members.contains(sender), !removedBefore.contains(sender),
            !removedBefore.contains(rotation.author), !rotation.removed.contains(sender),
            rotation.removed.contains(localID) || rotation.owes(localID),
            rotation.hasValidSignature(authority)
        else {
            return .invalid
        }
        if transitions.contains(where: { $0.rotation.nextSession == rotation.nextSession })
            || superseded[rotation.nextSession] != nil
        {
            return .known
        }
        let incoming = Transition(rotation: rotation, secret: secret)
        guard rotation.previousSession != current.sessionID else {
            if rotation.removed.contains(localID) { return .removesUs }
            (rivals, removingRivals, fieldToldTo) = ([], [], [])
            append(incoming)
            return .adopted(incoming, replacing: nil)
        }
        // A competing rotation out of the epoch our current one left: the one that stands among
        // all we know out of that epoch takes its place, so that removals at the same moment do
        // not split the session.
        guard let last = transitions.last, rotation.previousSession == last.rotation.previousSession else {
            return .notOurEpoch
        }
        let field = [last] + rivals + [incoming]
        let winner = Self.winner(of: last.rotation, field.dropFirst().map(\.rotation) + removingRivals)
        // Ours stands, or one that removes us does (its notice, held, decides).
        guard winner != last.rotation, !removingRivals.contains(winner) else {
            if !rotation.removed.contains(localID) { keepRival(incoming) }
            return .notOurEpoch
        }
        if winner == rotation, rotation.removed.contains(localID) { return .removesUs }
        guard let standing = field.first(where: { $0.rotation == winner }) else { return .notOurEpoch }
        stand(standing, replacing: last)
        if standing.rotation != rotation, !rotation.removed.contains(localID) { keepRival(incoming) }
        return .adopted(standing, replacing: last)
    }

    /// `standing` takes the place of `last` (out of the same epoch), which becomes a rival.
    private mutating func stand(_ standing: Transition, replacing last: Transition) {
        transitions.removeLast()
        recomputeRemoved()
        rivals.removeAll { $0.rotation == standing.rotation }
        superseded[standing.secret.sessionID] = nil
        keepRival(last, ours: true)
        fieldToldTo = []
        append(standing)
    }

    /// A rotation out of the epoch our current one left that removes us, told in a notice: it
    /// joins the field. When another rival of ours now stands, we switch to it (`adopted`); when
    /// the one that stands removes us, nothing changes here (the notice decides, after its hold).
    package mutating func noteRemovingRival(_ rotation: KeyRotation, localID: NodeID) -> Acceptance? {
        guard let last = transitions.last, rotation.previousSession == last.rotation.previousSession,
            rotation.removed.contains(localID), rotation != last.rotation, !removingRivals.contains(rotation),
            removingRivals.count < Self.maxRivals
        else { return nil }
        removingRivals.append(rotation)
        fieldToldTo = []
        let winner = Self.winner(of: last.rotation, rivals.map(\.rotation) + removingRivals)
        guard winner != last.rotation, let standing = rivals.first(where: { $0.rotation == winner }) else { return nil }
        stand(standing, replacing: last)
        return .adopted(standing, replacing: last)
    }

    /// A rotation out of the epoch our current one left that does not stand (now): kept, with
    /// its secret, for the next comparison and for handing the winner to its members.
    private mutating func keepRival(_ transition: Transition, ours: Bool = false) {
        guard !rivals.contains(where: { $0.rotation == transition.rotation }) else { return }
        // One we were in is always kept (its members are handed the winner); past the bound,
        // one only handed to us is not.
        guard rivals.count < (ours ? 2 * Self.maxRivals : Self.maxRivals) else { return }
        superseded[transition.secret.sessionID] = (transition.secret, transition.rotation.previousSession)
        rivals.append(transition)
        fieldToldTo = []
    }

    /// Whether `member`, which handed us a rival out of `previous`, is to be told the field now:
    /// once per member until the field changes.
    package mutating func mayTellField(outOf previous: SessionID, to member: NodeID, boot: UInt64) -> Bool {
        guard transitions.last?.rotation.previousSession == previous else { return false }
        return fieldToldTo.insert(MemberBoot(member: member, boot: boot)).inserted
    }

    /// `member` showed it is in another epoch than ours (its beacon): it may be told again.
    package mutating func forgetFieldTold(_ member: NodeID) {
        fieldToldTo = fieldToldTo.filter { $0.member != member }
    }

    /// The members removed by the transitions before the one out of `previous` (all, when we
    /// took none out of it): a rival out of `previous` is judged against these, not against
    /// what our own rotation out of it removed.
    package func removed(before previous: SessionID) -> Set<NodeID> {
        guard let index = transitions.firstIndex(where: { $0.rotation.previousSession == previous }) else {
            return removed
        }
        return Set(forgotten?.removed ?? []).union(transitions[..<index].flatMap(\.rotation.removed))
    }

    /// Whether `rotation` is one we took or were handed that lost to another out of its epoch.
    package func lost(_ rotation: KeyRotation) -> Bool { superseded[rotation.nextSession] != nil }

    /// The rotations out of `previous` that lost to ours, with their secrets, when that is the
    /// epoch our current one left: handed to a member that chose another, so that it chooses
    /// from the same field.
    package func lostTransitions(outOf previous: SessionID) -> [Transition] {
        guard let last = transitions.last, last.rotation.previousSession == previous else { return [] }
        return rivals
    }

    /// The rotations we know out of `previous` that remove `member`, when that is the epoch our
    /// current one left: told to a member that hands us a rival, so that it chooses from the
    /// same field (it can be handed none of them).
    package func rivals(outOf previous: SessionID, removing member: NodeID) -> [KeyRotation] {
        guard let last = transitions.last, last.rotation.previousSession == previous else { return [] }
        return ([last.rotation] + rivals.map(\.rotation) + removingRivals).filter { $0.removed.contains(member) }
    }

    /// Whether `rotation` stands among the rotations we know out of the epoch it leaves (ours
    /// out of it, and the rivals of ours when that is the epoch our current one left). Nothing
    /// of ours out of it: it stands.
    package func stands(_ rotation: KeyRotation) -> Bool {
        guard let ours = transitions.first(where: { $0.rotation.previousSession == rotation.previousSession }) else {
            return true
        }
        var others = [rotation]
        if ours.rotation == transitions.last?.rotation { others += rivals.map(\.rotation) + removingRivals }
        return Self.winner(of: ours.rotation, others) == rotation
    }

    /// The rotation that stands among several out of one epoch: the one that beats the most of
    /// the others (`wins`), then the smaller new session id. For two, the one that `wins`; for
    /// three that beat each other in a cycle, the same one whatever order they came in.
    package static func winner(of first: KeyRotation, _ others: [KeyRotation]) -> KeyRotation {
        var unique = [first]
        for rotation in others where !unique.contains(where: { $0.nextSession == rotation.nextSession }) {
            unique.append(rotation)
        }
        func score(_ rotation: KeyRotation) -> Int {
            unique.filter { $0.nextSession != rotation.nextSession && wins(rotation, over: $0) }.count
        }
        var best = first
        for rotation in unique.dropFirst() {
            let (a, b) = (score(rotation), score(best))
            if a > b || (a == b && rotation.nextSession.value < best.nextSession.value) { best = rotation }
        }
        return best
    }

    /// Which of two rotations out of the same epoch stands: not one whose author the other
    /// removes (unless each removes the other's); else the smaller new session id. Any total
    /// order works if every member applies it.
    package static func wins(_ rotation: KeyRotation, over other: KeyRotation) -> Bool {
        let removedByOther = other.removed.contains(rotation.author)
        let removesOther = rotation.removed.contains(other.author)
        if removedByOther != removesOther { return removesOther }
        return rotation.nextSession.value < other.nextSession.value
    }

    /// Whether `member`, heard speaking the earlier epoch `session`, is to be handed the next
    /// epoch now; records the handover for the rate limit. `overridingInterval`: the member just
    /// proved a new address (the shell's check), which the last handover did not go to.
    package mutating func handover(
        to member: NodeID, heardIn session: SessionID, now: MeshInstant, overridingInterval: Bool = false
    ) -> Transition? {
        guard let transition = transition(after: session), transition.rotation.owes(member),
            !removed.contains(member)
        else { return nil }
        let key = HandoverKey(member: member, epoch: transition.secret.sessionID)
        if !overridingInterval, let last = lastHandover[key], now < last + Self.handoverInterval { return nil }
        lastHandover[key] = now
        return transition
    }

    /// Whether `member` is owed a handover from an earlier epoch at all (for counting drops).
    package func isEntitled(_ member: NodeID, heardIn session: SessionID) -> Bool {
        guard let transition = transition(after: session) else { return false }
        return transition.rotation.owes(member) && !removed.contains(member)
    }

    private mutating func append(_ transition: Transition) {
        transitions.append(transition)
        removed.formUnion(transition.rotation.removed)
        forgetOldestEpochs()
    }

    /// Past `maxTransitions`, the oldest epochs go: the first one kept becomes the origin, their
    /// ids and whom they removed are kept (`Forgotten`), and what only they held goes with them
    /// (the rivals that lost out of them, their handovers' rate limits).
    private mutating func forgetOldestEpochs() {
        let excess = transitions.count - Self.maxTransitions
        guard excess > 0 else { return }
        let dropped = transitions.prefix(excess)
        var forgotten = self.forgotten ?? Forgotten()
        forgotten.sessions += [origin.sessionID] + dropped.dropLast().map(\.secret.sessionID)
        forgotten.removed += dropped.flatMap(\.rotation.removed)
        forgotten.sessions = Array(forgotten.sessions.suffix(Forgotten.maxEach))
        forgotten.removed = Array(forgotten.removed.suffix(Forgotten.maxEach))
        self.forgotten = forgotten
        origin = transitions[excess - 1].secret
        transitions.removeFirst(excess)
        recomputeRemoved()
        let held = Set([origin.sessionID] + transitions.map(\.secret.sessionID))
        superseded = superseded.filter { held.contains($0.value.previous) }
        lastHandover = lastHandover.filter { held.contains($0.key.epoch) }
    }

    // MARK: persistence

    /// What the data dir keeps: the chain of transitions (`epochs.key`) and the rotations that
    /// lost to it (`rivals.key`, empty when there are none). Two files, so that a release that
    /// knows only the chain still reads it.
    package struct Files: Sendable, Equatable {
        package var chain: [UInt8]
        package var rivals: [UInt8]

        package init(chain: [UInt8], rivals: [UInt8]) {
            self.chain = chain
            self.rivals = rivals
        }
    }

    package var files: Files { Files(chain: encoded(), rivals: encodedRivals()) }

    static let fileMagic = Array("GMEP".utf8)
    /// 2: the chain from the secret joined with (`session.key`); 3: the same, from the origin
    /// the file names, once the oldest epochs were forgotten. Version 2 is written while it
    /// suffices, so that the previous release still reads the file.
    static let fileVersion: UInt8 = 2
    static let forgotOldestFileVersion: UInt8 = 3
    static let rivalsMagic = Array("GMRV".utf8)
    static let rivalsVersion: UInt8 = 1
    /// Far above any real history; bounds what a damaged file can make us allocate.
    package static let maxFileBytes = 4 << 20
    /// Lost epochs a rivals file holds, at most: bounds what a damaged file can make us allocate.
    static let maxSupersededStored = 4_096

    /// The transitions as bytes for the data dir's `epochs.key` (secrets inside: store it 0600).
    package func encoded() -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(Self.fileMagic)
        if let forgotten {
            buffer.writeInteger(Self.forgotOldestFileVersion)
            buffer.writeBytes(origin.bytes)
            buffer.writeInteger(UInt16(forgotten.sessions.count))
            for session in forgotten.sessions { buffer.writeInteger(session.value) }
            buffer.writeInteger(UInt16(forgotten.removed.count))
            for id in forgotten.removed { id.encode(into: &buffer) }
        } else {
            buffer.writeInteger(Self.fileVersion)
        }
        buffer.writeInteger(UInt32(transitions.count))
        for transition in transitions {
            transition.rotation.encode(into: &buffer)
            buffer.writeBytes(transition.secret.bytes)
        }
        return Array(buffer.readableBytesView)
    }

    /// The chain `encoded()` wrote. `origin` is the secret the node joined with, where the chain
    /// starts unless the file names another (the oldest epochs forgotten).
    package static func decode(_ bytes: [UInt8], origin joined: SessionSecret) throws(WireError) -> KeyEpochs {
        var buffer = ByteBuffer(bytes: bytes)
        guard try buffer.readWireBytes(fileMagic.count, "epochs magic") == fileMagic else {
            throw .invalidField(what: "epochs file header")
        }
        let origin: SessionSecret
        var forgotten: Forgotten?
        switch try buffer.readWire(UInt8.self, "epochs version") {
        case fileVersion: origin = joined
        case forgotOldestFileVersion:
            guard let named = try? SessionSecret(bytes: try buffer.readWireBytes(SessionSecret.byteCount, "origin"))
            else { throw .invalidField(what: "epochs origin") }
            origin = named
            var kept = Forgotten()
            let sessions = try buffer.readWire(UInt16.self, "forgotten epoch count")
            guard sessions <= Forgotten.maxEach else { throw .invalidField(what: "forgotten epoch count") }
            for _ in 0..<sessions {
                kept.sessions.append(SessionID(value: try buffer.readWire(UInt64.self, "forgotten epoch")))
            }
            let removed = try buffer.readWire(UInt16.self, "forgotten removed count")
            guard removed <= Forgotten.maxEach else { throw .invalidField(what: "forgotten removed count") }
            for _ in 0..<removed { kept.removed.append(try NodeID(decoding: &buffer)) }
            forgotten = kept
        default: throw .invalidField(what: "epochs file header")
        }
        // A longer chain (written before the bound, or by a release without it) loads, and its
        // oldest epochs are forgotten at once.
        let count = try buffer.readWire(UInt32.self, "epoch count")
        var transitions: [Transition] = []
        var previous = origin.sessionID
        for _ in 0..<count {
            let rotation = try KeyRotation(decoding: &buffer)
            guard
                let secret = try? SessionSecret(
                    bytes: try buffer.readWireBytes(SessionSecret.byteCount, "epoch secret")),
                rotation.previousSession == previous, secret.sessionID == rotation.nextSession
            else {
                throw .invalidField(what: "epoch chain")
            }
            transitions.append(Transition(rotation: rotation, secret: secret))
            previous = secret.sessionID
        }
        guard buffer.readableBytes == 0 else { throw .trailingBytes(buffer.readableBytes) }
        return KeyEpochs(origin: origin, transitions: transitions, forgotten: forgotten)
    }

    /// The rotations that lost, as bytes for the data dir's `rivals.key` (secrets inside: store
    /// it 0600); empty when there are none. Without them a restart forgets the epochs that lost:
    /// a member still in one could no longer be handed the winner by us, and the winner among
    /// three or more would be chosen again from fewer.
    package func encodedRivals() -> [UInt8] {
        guard !superseded.isEmpty || !removingRivals.isEmpty else { return [] }
        var buffer = ByteBuffer()
        buffer.writeBytes(Self.rivalsMagic)
        buffer.writeInteger(Self.rivalsVersion)
        // The epoch the field belongs to: read back only beside the same chain.
        buffer.writeInteger(current.sessionID.value)
        // The rivals' own secrets first, should the bound ever cut.
        let rivalSessions = Set(rivals.map(\.secret.sessionID))
        let lost = superseded.sorted { first, second in
            let (a, b) = (rivalSessions.contains(first.key), rivalSessions.contains(second.key))
            return a != b ? a : first.key.value < second.key.value
        }.prefix(Self.maxSupersededStored)
        buffer.writeInteger(UInt32(lost.count))
        for (_, entry) in lost {
            buffer.writeInteger(entry.previous.value)
            buffer.writeBytes(entry.secret.bytes)
        }
        for field in [rivals.map(\.rotation), removingRivals] {
            buffer.writeInteger(UInt32(field.count))
            for rotation in field { rotation.encode(into: &buffer) }
        }
        return Array(buffer.readableBytesView)
    }

    /// Takes back what `encodedRivals()` kept, after the chain was loaded. Written beside another
    /// chain (a crash between the two files' writes, a start by another release), only the lost
    /// epochs' secrets are taken: the members hand the rest again.
    package mutating func restoreRivals(_ bytes: [UInt8]) throws(WireError) {
        guard !bytes.isEmpty else { return }
        var buffer = ByteBuffer(bytes: bytes)
        guard try buffer.readWireBytes(Self.rivalsMagic.count, "rivals magic") == Self.rivalsMagic,
            try buffer.readWire(UInt8.self, "rivals version") == Self.rivalsVersion
        else {
            throw .invalidField(what: "rivals file header")
        }
        let head = SessionID(value: try buffer.readWire(UInt64.self, "rivals chain head"))
        let inChain = Set([origin.sessionID] + transitions.map(\.secret.sessionID))
        let lostCount = try buffer.readWire(UInt32.self, "lost epoch count")
        guard lostCount <= Self.maxSupersededStored else { throw .invalidField(what: "lost epoch count") }
        var lost: [SessionID: (secret: SessionSecret, previous: SessionID)] = [:]
        for _ in 0..<lostCount {
            let previous = SessionID(value: try buffer.readWire(UInt64.self, "lost epoch previous"))
            guard
                let secret = try? SessionSecret(
                    bytes: try buffer.readWireBytes(SessionSecret.byteCount, "lost epoch secret"))
            else { throw .invalidField(what: "lost epoch secret") }
            // One out of an epoch the chain forgot is no longer opened (nor handed anything).
            if !inChain.contains(secret.sessionID), inChain.contains(previous) {
                lost[secret.sessionID] = (secret, previous)
            }
        }
        var fields: [[KeyRotation]] = []
        for limit in [2 * Self.maxRivals, Self.maxRivals] {
            let count = try buffer.readWire(UInt32.self, "rival count")
            guard count <= limit else { throw .invalidField(what: "rival count") }
            var field: [KeyRotation] = []
            for _ in 0..<count { field.append(try KeyRotation(decoding: &buffer)) }
            fields.append(field)
        }
        guard buffer.readableBytes == 0 else { throw .trailingBytes(buffer.readableBytes) }
        // Rivals of the transition we are in: out of the epoch it left, not in the chain.
        let left = transitions.last?.rotation.previousSession
        func fits(_ rotation: KeyRotation) -> Bool {
            head == current.sessionID && rotation.previousSession == left && !inChain.contains(rotation.nextSession)
        }
        superseded = lost
        rivals = fields[0].filter(fits).compactMap { rotation in
            lost[rotation.nextSession].map { Transition(rotation: rotation, secret: $0.secret) }
        }
        removingRivals = fields[1].filter(fits)
    }

    /// The last `count` epochs of the chain before the current one, oldest first, then those that
    /// lost out of them: where a member removed lately may still be (the epoch its removal left,
    /// or one before, when it was removed on top of a competing rotation).
    package func recentEarlierSessions(_ count: Int) -> [SessionID] {
        let recent = previousSecrets.suffix(count).map(\.sessionID)
        let left = Set(recent)
        let lost = superseded.filter { left.contains($0.value.previous) }.keys.sorted { $0.value < $1.value }
        return recent + lost
    }

    /// Where a member `rotation` removed may still be, however many rotations came since: the
    /// epoch the rotation left, and the one before it (removed on top of a competing rotation).
    package func epochsARemovalLeft(_ rotation: KeyRotation) -> [SessionID] {
        let before = transitions.first { $0.secret.sessionID == rotation.previousSession }?.rotation.previousSession
        return [rotation.previousSession] + (before.map { [$0] } ?? [])
    }

    /// Every secret of an epoch we had or were handed that lost, by its session id: the shell
    /// opens datagrams in each (members not caught up yet).
    package var earlierSecrets: [SessionSecret] {
        previousSecrets + superseded.values.map(\.secret).sorted { $0.sessionID.value < $1.sessionID.value }
    }
}
