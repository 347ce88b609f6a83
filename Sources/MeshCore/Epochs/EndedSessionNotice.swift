import MeshCrypto
import NIOCore

/// A data dir whose session ended, started again (`groupmesh run` refuses it): before the process
/// exits it tells the members it remembers (and those it lost) that the session ended, a few
/// times over about two seconds, and answers any datagram of the ended epoch from a remembered or
/// lost member with the signed end. So a member that was offline during the end learns it as
/// soon as anyone who knows starts again (PROTOCOL.md §4, ending a session). Pure: the shell
/// sends what it returns and stops once `isDone`.
package struct EndedSessionNotice: Sendable {
    /// Notices to every remembered address, `interval` apart, starting at once.
    package static let rounds = 4
    package static let interval: Duration = .milliseconds(500)
    /// How long the notice runs: its rounds, and as long again after the first for answers.
    package static let duration: Duration = .seconds(2)
    /// At most one answer per member this often, and at most this many answers in all.
    package static let answerInterval: Duration = .seconds(1)
    package static let maxAnswers = 64
    /// An answer to an address that did not prove itself stays within this many times the size
    /// of the datagram it answers (QUIC's rule): a forged source earns its owner no flood.
    package static let answerFactor = 3

    package let statement: SessionEnd
    private var codec: DatagramCodec
    /// Remembered and lost members, and the addresses `members.json` gives for each.
    private let members: [NodeID: [PeerAddress]]
    private var random: SplitMix64
    private let until: MeshInstant
    private var roundsLeft = Self.rounds
    private var nextRound: MeshInstant
    private var answeredAt: [NodeID: MeshInstant] = [:]
    package private(set) var answers = 0
    package private(set) var noticesSent = 0

    /// Nil when the ended epoch's secret is not among `epochs` (nothing of it could be sealed).
    package init?(
        statement: SessionEnd, epochs: KeyEpochs, localID: NodeID, bootID: UInt64,
        remembered: RememberedMembers, wire: DatagramCodec.Configuration = .init(), seed: UInt64,
        now: MeshInstant
    ) {
        guard let secret = epochs.secret(of: statement.session) else { return nil }
        self.statement = statement
        codec = DatagramCodec(session: secret, localID: localID, localBootID: bootID, configuration: wire)
        var members: [NodeID: [PeerAddress]] = [:]
        for entry in remembered.members {
            guard let id = NodeID(hex: entry.id), id != localID else { continue }
            members[id] = entry.addresses.compactMap { try? PeerAddress(parsing: $0) }.filter { !$0.isUnspecified }
        }
        // Members lost before the end (forgotten after they died) were told nothing then.
        for lost in remembered.lost(removed: epochs.removed) where lost.id != localID && members[lost.id] == nil {
            members[lost.id] = lost.addresses.filter { !$0.isUnspecified }
        }
        self.members = members
        random = SplitMix64(seed: seed)
        until = now + Self.duration
        nextRound = now
    }

    /// Every remembered member's every address, once each.
    package var addresses: [PeerAddress] {
        var seen = Set<PeerAddress>()
        return members.keys.sorted().flatMap { members[$0] ?? [] }.filter { seen.insert($0).inserted }
    }

    package func isDone(now: MeshInstant) -> Bool { now >= until }

    /// When `tick` has something to do next.
    package var deadline: MeshInstant { roundsLeft > 0 ? min(nextRound, until) : until }

    /// The notices due now: the signed end to every remembered address.
    package mutating func tick(now: MeshInstant) -> [(datagram: ByteBuffer, to: PeerAddress)] {
        guard roundsLeft > 0, now >= nextRound, now < until else { return [] }
        roundsLeft -= 1
        nextRound = now + Self.interval
        let notices = addresses.map { (datagram: sealed(), to: $0) }
        noticesSent += notices.count
        return notices
    }

    /// The answer to a datagram that came from `source`: the signed end, when it is of the ended
    /// epoch and from a remembered member (its header says so: a datagram sealed for the boot
    /// before does not open here), within the per-member rate, and within `answerFactor` times
    /// its size unless `source` is an address `members.json` gives for that member.
    package mutating func answer(
        _ datagram: ByteBuffer, from source: PeerAddress,
        now: MeshInstant
    ) -> ByteBuffer? {
        var peek = datagram
        guard now < until, answers < Self.maxAnswers, case let .success(header) = DatagramHeader.decode(&peek),
            header.sessionID == statement.session, let known = members[header.sender]
        else { return nil }
        if let last = answeredAt[header.sender], now < last + Self.answerInterval { return nil }
        let answer = sealed()
        guard known.contains(source) || answer.readableBytes <= Self.answerFactor * datagram.readableBytes else {
            return nil
        }
        answeredAt[header.sender] = now
        answers += 1
        return answer
    }

    private mutating func sealed() -> ByteBuffer {
        codec.sealHello([.sessionEnd(statement)], nonce: random.nonce())
    }
}

extension SplitMix64 {
    /// A nonce of three words from this stream.
    fileprivate mutating func nonce() -> PacketNonce {
        let bytes = [next(), next(), next()].flatMap { word in withUnsafeBytes(of: word) { Array($0) } }
        return PacketNonce(raw: bytes)!  // safe: three words are exactly the 24 bytes of a nonce
    }
}
