import MeshCrypto
import NIOCore
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Anti-entropy by digest (PROTOCOL.md §4, push-pull): the summaries a member sends, and what it
/// answers a partner's digest with, within a budget per member.
extension MembershipInstance {
    // MARK: anti-entropy by digest

    /// What we hold of every member, this node included, by id.
    private var digestEntries: [StateDigest.Entry] {
        let mine = StateDigest.Entry(member: me.id, incarnation: me.incarnation, status: hasLeft ? .left : .alive)
        return
            ([mine]
            + members.values.map { StateDigest.Entry(member: $0.id, incarnation: $0.incarnation, status: $0.status) })
            .sorted { $0.member < $1.member }
    }

    /// Push-pull: one summary of our view, its count and hash.
    func summary(to recipient: NodeID, address: PeerAddress) -> MembershipDirective {
        .send(
            frames: [.stateDigest(StateDigest(summarizing: digestEntries, lower: NodeID(high: 0, low: 0), upper: nil))],
            recipient: recipient, address: address)
    }

    /// A partner whose view differs from our summary answers with this: its view as digests, 25
    /// bytes a member, asking for ours back; records travel only where one side is behind. Split
    /// by id range when the view does not fit one datagram. Reconnect sends this at once: a dead
    /// member's view differs anyway.
    func digest(to recipient: NodeID, address: PeerAddress) -> [MembershipDirective] {
        digests(of: digestEntries, request: true, lower: NodeID(high: 0, low: 0), upper: nil)
            .map { .send(frames: [.stateDigest($0)], recipient: recipient, address: address) }
    }

    /// `entries` (sorted, all within `lower..<upper`) as digests of consecutive ranges that
    /// together cover `lower..<upper`.
    private func digests(
        of entries: [StateDigest.Entry], request: Bool, lower: NodeID,
        upper: NodeID?
    ) -> [StateDigest] {
        let perDatagram = digestEntriesPerDatagram
        var result: [StateDigest] = []
        var start = lower
        var index = 0
        repeat {
            let end = min(index + perDatagram, entries.count)
            let bound = end < entries.count ? entries[end].member : upper
            result.append(
                StateDigest(isRequest: request, lower: start, upper: bound, entries: Array(entries[index..<end])))
            if let bound { start = bound }
            index = end
        } while index < entries.count
        return result
    }

    /// A partner's digest: we send the records it shows the partner lacks or holds older (or
    /// weaker: alive where we hold suspect or dead), refute what it believes of us, and on a
    /// request send our own digest of the range. The answers go where we reach a member we know
    /// (not wherever its datagram claims to come from). Each member gets at most a view's worth
    /// of ranges answered, and one more, per half join retry interval: the sender chooses the
    /// ranges, so a flood of digests of made-up ranges would otherwise cost a whole state each.
    mutating func answerDigest(
        _ digest: StateDigest, from sender: NodeID, address: PeerAddress,
        now: MeshInstant, into out: inout [MembershipDirective]
    ) {
        guard !hasLeft, sender != me.id else { return }
        // Answers go only to a member we know, where we reach it: a digest under a made-up id
        // would draw a view's worth of records to whatever source address it came from.
        guard let address = members[sender]?.address else {
            counters.digestsRefused += 1
            return
        }
        noteExchangeAnswer(digest, from: sender, now: now)
        guard takeDigestBudget(of: sender, now: now) else { return }
        if let summary = digest.summary {
            let mine = digestEntries.filter { digest.contains($0.member) }
            guard StateDigest.Summary(of: mine) != summary else {
                // Said, so that the partner does not send its summary again.
                out.append(.send(frames: [.stateDigest(.agreement)], recipient: sender, address: address))
                return
            }
            let requests = digests(of: mine, request: true, lower: digest.lower, upper: digest.upper)
            // A summary of a few bytes draws a view's worth of digests: each counts.
            chargeDigestBudget(of: sender, requests.count - 1)
            for request in requests {
                out.append(.send(frames: [.stateDigest(request)], recipient: sender, address: address))
            }
            return
        }
        var theirs: [NodeID: StateDigest.Entry] = [:]
        for entry in digest.entries { theirs[entry.member] = entry }
        // What they believe of us: an accusation at our incarnation or above is refuted at once.
        if let entry = theirs[me.id], entry.incarnation >= me.incarnation,
            entry.status == .suspect || entry.status == .dead
        {
            let accusation = Accusation(member: me.id, incarnation: entry.incarnation, accuser: sender)
            if entry.status == .suspect {
                mergeSuspect(accusation, now: now, into: &out)
            } else {
                mergeDead(accusation, now: now, into: &out)
            }
        }
        var groups: [[Frame]] = []
        if digest.contains(me.id), Self.isBehind(theirs[me.id], incarnation: me.incarnation, status: .alive) {
            groups.append([.alive(me)])
        }
        for member in members.values.sorted(by: { $0.id < $1.id }) where digest.contains(member.id) {
            if Self.isBehind(theirs[member.id], incarnation: member.incarnation, status: member.status) {
                groups.append(stateFrames(of: member))
            }
        }
        out += packed(groups).map { .send(frames: $0, recipient: sender, address: address) }
        if digest.isRequest {
            let mine = digestEntries.filter { digest.contains($0.member) }
            for answer in digests(of: mine, request: false, lower: digest.lower, upper: digest.upper) {
                out.append(.send(frames: [.stateDigest(answer)], recipient: sender, address: address))
            }
        }
    }

    /// Whether a partner that holds `entry` lacks what we hold of a member.
    private static func isBehind(_ entry: StateDigest.Entry?, incarnation: UInt64, status: MemberStatus) -> Bool {
        guard status != .left else { return false }
        guard let entry else { return true }
        return entry.incarnation < incarnation || (entry.incarnation == incarnation && entry.status < status)
    }

    private var digestEntriesPerDatagram: Int {
        max(1, (datagramBudget - FrameCodec.headerLength - StateDigest.fixedLength) / StateDigest.entryLength)
    }

    /// How many digests our view (this node included) takes.
    private var digestsPerView: Int {
        (members.count + 1 + digestEntriesPerDatagram - 1) / digestEntriesPerDatagram
    }

    /// Counts one answered digest of `sender` in its window; false when it has had its share (two
    /// views' worth of datagrams: an exchange from a summary on answers a view's worth of ours and
    /// a view's worth of theirs), or when 256 members already have windows open.
    private mutating func takeDigestBudget(of sender: NodeID, now: MeshInstant) -> Bool {
        let window = settings.joinRetryInterval * 0.5
        var budget = digestBudgets[sender] ?? (now, 0)
        if now >= budget.windowStart + window { budget = (now, 0) }
        guard budget.answered < 2 * digestsPerView + 1 else { return false }
        if digestBudgets[sender] == nil, digestBudgets.count >= Self.maxDigestWindows {
            digestBudgets = digestBudgets.filter { now < $0.value.windowStart + window }
            guard digestBudgets.count < Self.maxDigestWindows else { return false }
        }
        budget.answered += 1
        digestBudgets[sender] = budget
        return true
    }

    /// Counts `extra` more datagrams answered to `sender` in its window (one was counted already).
    private mutating func chargeDigestBudget(of sender: NodeID, _ extra: Int) {
        guard extra > 0, var budget = digestBudgets[sender] else { return }
        budget.answered += extra
        digestBudgets[sender] = budget
    }

    static let maxDigestWindows = 256

    /// memberlist's scaling: larger clusters exchange full state less often, so the cost per
    /// node stays flat as N grows.
    mutating func pushPullInterval() -> Duration {
        let n = Double(activeCount)
        let scale = n <= 32 ? 1.0 : (log2(n) - log2(32)).rounded(.up) + 1
        let jitter = 0.75 + Double(random.next() % 500) / 1000  // 0.75 to 1.25
        return settings.pushPullInterval * (scale * jitter)
    }
}
