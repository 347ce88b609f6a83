import MeshCrypto

/// Who let each member in, as far as this node knows (PROTOCOL.md §3, "Introductions"), and
/// this node's own request to its door. A pure value: the node sends what it says and checks
/// signatures before anything goes in.
package struct IntroductionBook: Sendable {
    package struct Settings: Sendable {
        /// Requests sent to the door one interval apart, then one each `recheck` (the door may be
        /// slow to learn that we speak protocol 2, or all of them lost).
        package var attempts = 5
        package var interval: Duration = .seconds(2)
        package var recheck: Duration = .seconds(60)
        package init() {}
    }

    /// Asking the door for our introduction.
    struct Request: Sendable {
        var door: NodeID
        var nextAt: MeshInstant?
        var attemptsLeft: Int
    }

    package let settings: Settings
    /// The introductions both signed, by member (ours too).
    package private(set) var byMember: [NodeID: Introduction] = [:]
    private(set) var request: Request?
    /// When each member's request was last answered: one signature per member per interval.
    private var answeredAt: [NodeID: MeshInstant] = [:]

    package init(settings: Settings = .init(), remembered: [Introduction] = []) {
        self.settings = settings
        for introduction in remembered { byMember[introduction.member] = introduction }
    }

    package subscript(member: NodeID) -> Introduction? { byMember[member] }

    /// When the request needs the node next.
    var nextDeadline: MeshInstant? { request?.nextAt }

    /// Keeps a countersigned introduction (checked by the caller), as its member last told it:
    /// only the member tells its own, and tells it again to each member whose version frame names
    /// another door, so all end with the one it holds. Whether it changed what we knew.
    @discardableResult
    package mutating func take(_ introduction: Introduction) -> Bool {
        guard byMember[introduction.member] != introduction else { return false }
        byMember[introduction.member] = introduction
        return true
    }

    /// Whether `member` let us in, or let in a door of ours, as far back as we know: introducing
    /// it would close a loop (two members that joined through each other, members of the
    /// previous release upgrading one by one).
    func isInChain(_ member: NodeID, from localID: NodeID) -> Bool {
        var current = localID
        for _ in 0..<Self.maxChain {
            guard let door = byMember[current]?.door else { return false }
            if door == member { return true }
            current = door
        }
        return false
    }

    /// Far above the members a session holds: a chain longer than that has a loop already.
    static let maxChain = 64

    package mutating func forget(_ member: NodeID) {
        byMember[member] = nil
        answeredAt[member] = nil
        if request?.door == member { request = nil }
    }

    /// Ask `door` from now on (the member through which we joined, which speaks protocol 2),
    /// unless we hold ours or ask it already.
    mutating func ask(_ door: NodeID, localID: NodeID, now: MeshInstant) {
        guard byMember[localID] == nil, request?.door != door else { return }
        request = Request(door: door, nextAt: now, attemptsLeft: settings.attempts)
    }

    /// The door to send a request to now, if one is due.
    mutating func due(now: MeshInstant) -> NodeID? {
        guard var pending = request, let at = pending.nextAt, at <= now else { return nil }
        pending.attemptsLeft = max(pending.attemptsLeft - 1, 0)
        pending.nextAt = now + (pending.attemptsLeft > 0 ? settings.interval : settings.recheck)
        request = pending
        return pending.door
    }

    /// Whether the door's answer is one we asked for.
    func awaits(_ door: NodeID) -> Bool { request?.door == door }

    mutating func stopAsking() { request = nil }

    /// Whether we signed for `member` (this run): a member we let in is not asked to let us in.
    func hasSigned(for member: NodeID) -> Bool { answeredAt[member] != nil }

    /// Whether to answer `member`'s request now (once per interval each; the members a node
    /// answers are those in its view, a bounded set).
    mutating func mayAnswer(_ member: NodeID, now: MeshInstant) -> Bool {
        if let last = answeredAt[member], now < last + settings.interval { return false }
        answeredAt[member] = now
        return true
    }
}
