import MeshCrypto

/// Who let each member in, as far as this node knows (PROTOCOL.md §3, "Introductions"), and
/// this node's own request for its introduction. A pure value: the node sends what it says and checks
/// signatures before anything goes in.
package struct IntroductionBook: Sendable {
    package struct Settings: Sendable {
        /// Requests sent to a member one interval apart; one silent through all of them is passed
        /// over for the next. Once every candidate refused or was silent, the round starts again a
        /// `recheck` later.
        package var attempts = 5
        package var interval: Duration = .seconds(2)
        package var recheck: Duration = .seconds(60)
        /// The live members one member may have introduced: a door past it refuses, and nobody
        /// takes more of its introductions.
        package var perDoor = 16
        /// Of those, the members signed for that have not told which introduction they took: a
        /// door past it refuses too, so that identities that ask every door and never tell cannot
        /// fill the honest doors.
        package var pendingPerDoor = 4
        package init() {}
    }

    /// Asking a member for our introduction.
    package struct Request: Sendable {
        package var asked: NodeID
        package var nextAt: MeshInstant
        package var attemptsLeft: Int
        /// The next round, waiting its `recheck` after every candidate refused or was silent: a
        /// member that becomes a candidate meanwhile is asked at once.
        package var isRecheck = false
    }

    package let settings: Settings
    /// The introductions both signed, by member (ours too).
    package private(set) var byMember: [NodeID: Introduction] = [:]
    package private(set) var request: Request?
    /// Members that refused us, or were silent, this round: asked again once every other was.
    private var passedOver: Set<NodeID> = []
    /// When each member's request was last answered: one answer per member per interval.
    private var answeredAt: [NodeID: MeshInstant] = [:]
    /// The member to ask first, before the one we came in through: the author of the rotation
    /// that removed our door.
    package private(set) var preferred: NodeID?
    /// The members we signed for this run: each counts in our bound (as pending) until it tells
    /// us which introduction it took.
    private var signedFor: Set<NodeID> = []

    package init(settings: Settings = .init(), remembered: [Introduction] = []) {
        self.settings = settings
        for introduction in remembered { byMember[introduction.member] = introduction }
    }

    package subscript(member: NodeID) -> Introduction? { byMember[member] }

    /// When the request needs the node next.
    package var nextDeadline: MeshInstant? { request?.nextAt }

    /// Keeps a countersigned introduction (checked by the caller), as its member last told it:
    /// only the member tells its own, and tells it again to each member whose version frame names
    /// another door, so all end with the one it holds. Whether it changed what we knew.
    @discardableResult
    package mutating func take(_ introduction: Introduction) -> Bool {
        guard byMember[introduction.member] != introduction else { return false }
        byMember[introduction.member] = introduction
        return true
    }

    /// The live members other than `member` that `door` introduced, as far as we know.
    package func liveIntroduced(by door: NodeID, otherThan member: NodeID, isLive: (NodeID) -> Bool) -> Int {
        var count = 0
        for introduction in byMember.values
        where introduction.door == door && introduction.member != member && isLive(introduction.member) {
            count += 1
        }
        return count
    }

    /// The live members other than `member` we signed for that have not told us yet.
    package func pending(otherThan member: NodeID, isLive: (NodeID) -> Bool) -> Int {
        var count = 0
        for signed in signedFor where signed != member && byMember[signed] == nil && isLive(signed) { count += 1 }
        return count
    }

    /// Whether `door` may introduce `member`: it introduced fewer live members than one may. Ours
    /// (`door == localID`) counts those pending too, and has room for no more than
    /// `pendingPerDoor` of them.
    package func hasRoom(in door: NodeID, for member: NodeID, localID: NodeID, isLive: (NodeID) -> Bool) -> Bool {
        let introduced = liveIntroduced(by: door, otherThan: member, isLive: isLive)
        guard door == localID else { return introduced < settings.perDoor }
        let pending = pending(otherThan: member, isLive: isLive)
        return introduced + pending < settings.perDoor && pending < settings.pendingPerDoor
    }

    /// Whether `asker` taking `door`'s introduction could close a loop, as far as we know:
    /// - `door`'s chain reaches `asker`;
    /// - when we ask (`asker == localID`), it holds a member we signed for that has not told us
    ///   it took another door (it may be taking ours: two members whose door went in one removal
    ///   ask each other's branches at once);
    /// - when we ask, it holds a member above `door` whose door was removed (`isVoid`), asking
    ///   again too, with a smaller id: its place is unknown, and of members asking into each
    ///   other's branches at once the one with the larger id yields, so they cannot close a ring.
    ///   Not `door` itself: a door that signed for us asks into our branch no more (the rule
    ///   above, at the door).
    package func mayCloseLoop(
        through door: NodeID, for asker: NodeID, localID: NodeID, isVoid: (NodeID) -> Bool
    ) -> Bool {
        var current = door
        for _ in 0..<Self.maxChain {
            if current == asker { return true }
            if asker == localID, signedFor.contains(current) {
                guard let told = byMember[current]?.door, told != localID, !isVoid(told) else { return true }
            }
            guard let next = byMember[current]?.door else { return false }
            if asker == localID, isVoid(next) { return current != door && current < asker }
            current = next
        }
        return true
    }

    /// Far above the members a session holds: a chain longer than that has a loop already.
    static let maxChain = 64

    package mutating func forget(_ member: NodeID) {
        byMember[member] = nil
        answeredAt[member] = nil
        signedFor.remove(member)
        passedOver.remove(member)
        if preferred == member { preferred = nil }
        if request?.asked == member { request = nil }
    }

    /// Asks the first of `candidates` (the members that may introduce us, the one we came in
    /// through first) that was not passed over this round, unless we hold ours or ask one of them
    /// already. When every one was, the round starts again a recheck later, unless a member that
    /// was not asked becomes a candidate before (its versions learnt late, a member that came).
    package mutating func ask(among candidates: [NodeID], localID: NodeID, now: MeshInstant) {
        guard byMember[localID] == nil, !candidates.isEmpty else { return stopAsking() }
        let fresh = candidates.first { !passedOver.contains($0) }
        if let request, candidates.contains(request.asked), !(request.isRecheck && fresh != nil) { return }
        if let fresh {
            request = Request(asked: fresh, nextAt: now, attemptsLeft: settings.attempts)
        } else {
            // The wait already begun is kept: a candidate that went does not start it again.
            let at = request.flatMap { $0.isRecheck ? $0.nextAt : nil } ?? now + settings.recheck
            request = Request(asked: candidates[0], nextAt: at, attemptsLeft: settings.attempts, isRecheck: true)
        }
    }

    /// The member to send a request to now, if one is due. One silent through every attempt is
    /// passed over (nil: the caller asks the next).
    package mutating func due(now: MeshInstant) -> NodeID? {
        guard var pending = request, pending.nextAt <= now else { return nil }
        if pending.isRecheck {
            // The new round: every member may be asked again.
            passedOver.removeAll()
            pending.isRecheck = false
        }
        guard pending.attemptsLeft > 0 else {
            passOver()
            return nil
        }
        pending.attemptsLeft -= 1
        pending.nextAt = now + settings.interval
        request = pending
        return pending.asked
    }

    /// Whether an answer of `member` is one we asked for: a request went to it (a member that
    /// waits for the next round's first request is not asked yet, and cannot cut the wait short).
    package func awaits(_ member: NodeID) -> Bool {
        guard let request, request.asked == member else { return false }
        return request.attemptsLeft < settings.attempts
    }

    /// `member` refused: the next member is asked. Whether we were asking it.
    package mutating func refused(by member: NodeID) -> Bool {
        guard awaits(member) else { return false }
        passOver()
        return true
    }

    private mutating func passOver() {
        if let asked = request?.asked { passedOver.insert(asked) }
        request = nil
    }

    /// Whether a request to `member` is on its way or due later, and `member` is still one to ask:
    /// nothing to choose before `nextAt`. Not while the next round waits: a candidate may come.
    package func isWaiting(on member: (NodeID) -> Bool, now: MeshInstant) -> Bool {
        guard let request, !request.isRecheck else { return false }
        return request.nextAt > now && member(request.asked)
    }

    package mutating func prefer(_ member: NodeID) { preferred = member }

    package mutating func stopAsking() {
        request = nil
        preferred = nil
        passedOver.removeAll()
    }

    /// Whether we signed for `member` (this run): a member we let in is not asked to let us in.
    package func hasSigned(for member: NodeID) -> Bool { signedFor.contains(member) }

    package mutating func signed(for member: NodeID) { signedFor.insert(member) }

    /// Whether to answer `member`'s request now (once per half interval each, so that a request
    /// sent again a little early is still answered; the members a node answers are those in its
    /// view, a bounded set).
    package mutating func mayAnswer(_ member: NodeID, now: MeshInstant) -> Bool {
        if let last = answeredAt[member], now < last + settings.interval / 2 { return false }
        answeredAt[member] = now
        return true
    }
}
