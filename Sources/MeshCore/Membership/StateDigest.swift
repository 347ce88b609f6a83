import MeshCrypto
import NIOCore

/// One datagram's share of a member's view for anti-entropy (push-pull): for each
/// member whose id lies in `lower..<upper` (to the end of the id space when `upper` is nil), its
/// incarnation and status: 25 bytes where its signed record takes about 170. The receiver sends
/// back only what the digest shows the sender lacks, and on a request its own digest of the same
/// range, so that the sender can do the same.
///
/// A summary stands for a range's entries by their count and hash: the receiver whose view of
/// the range hashes the same has nothing to do, and any other sends its own digest of the range
/// as a request. Views agree almost always when nothing happens, so an idle push-pull costs one
/// small datagram instead of two of 25 bytes a member.
package struct StateDigest: WireBody {
    package struct Summary: Equatable, Sendable {
        package var count: Int
        /// The first 16 bytes of SHA-256 over the entries as they go on the wire.
        package var hash: [UInt8]

        package static let hashLength = 16

        package init(count: Int, hash: [UInt8]) {
            self.count = count
            self.hash = hash
        }

        /// The summary of `entries` (sorted by id, as digests hold them).
        package init(of entries: [Entry]) {
            var buffer = ByteBuffer()
            buffer.reserveCapacity(entries.count * StateDigest.entryLength)
            for entry in entries { entry.encode(into: &buffer) }
            self.count = min(entries.count, Int(UInt16.max))  // as the wire carries it
            let digest = buffer.withUnsafeReadableBytes { SHA256Digest.hashing($0) }
            self.hash = Array(digest.bytes.prefix(Self.hashLength))
        }
    }

    package struct Entry: Equatable, Sendable {
        package var member: NodeID
        package var incarnation: UInt64
        package var status: MemberStatus

        package init(member: NodeID, incarnation: UInt64, status: MemberStatus) {
            self.member = member
            self.incarnation = incarnation
            self.status = status
        }
    }

    /// On the wire: id, incarnation, status.
    package static let entryLength = NodeID.byteCount + 8 + 1
    /// Flags, lower bound, upper bound, entry count.
    package static let fixedLength = 1 + NodeID.byteCount * 2 + 2

    /// "Send me your digest of this range too."
    package var isRequest: Bool
    package var lower: NodeID
    package var upper: NodeID?
    /// By id, strictly increasing, every one in range (none in a summary).
    package var entries: [Entry]
    /// Set instead of the entries: "my view of this range hashes so; send yours if yours differs".
    package var summary: Summary?

    package init(isRequest: Bool, lower: NodeID, upper: NodeID?, entries: [Entry]) {
        self.isRequest = isRequest
        self.lower = lower
        self.upper = upper
        self.entries = entries
    }

    package init(summarizing entries: [Entry], lower: NodeID, upper: NodeID?) {
        self.init(isRequest: false, lower: lower, upper: upper, entries: [])
        self.summary = Summary(of: entries)
    }

    /// What answers a summary that matches: a digest of the one id no member has (zero), which
    /// asks for nothing and draws nothing, also from members of the previous release. A partner
    /// waiting on its summary learns from it that the views agree.
    package static let agreement = StateDigest(
        isRequest: false, lower: NodeID(high: 0, low: 0), upper: NodeID(high: 0, low: 1), entries: [])

    package var isAgreement: Bool { self == .agreement }

    package func contains(_ id: NodeID) -> Bool {
        id >= lower && upper.map { id < $0 } ?? true
    }

    private static let requestFlag: UInt8 = 1
    private static let boundedFlag: UInt8 = 2
    private static let summaryFlag: UInt8 = 4

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        let flags = try buffer.readWire(UInt8.self, "digest flags")
        guard flags & ~(Self.requestFlag | Self.boundedFlag | Self.summaryFlag) == 0,
            flags & (Self.requestFlag | Self.summaryFlag) != Self.requestFlag | Self.summaryFlag
        else {
            throw .invalidField(what: "digest flags")
        }
        isRequest = flags & Self.requestFlag != 0
        lower = try NodeID(decoding: &buffer)
        let upper = try NodeID(decoding: &buffer)
        self.upper = flags & Self.boundedFlag != 0 ? upper : nil
        if let bound = self.upper, bound <= lower { throw .invalidField(what: "digest range") }
        let count = Int(try buffer.readWire(UInt16.self, "digest entry count"))
        if flags & Self.summaryFlag != 0 {
            entries = []
            summary = Summary(count: count, hash: try buffer.readWireBytes(Summary.hashLength, "digest summary"))
            return
        }
        guard count * Self.entryLength <= buffer.readableBytes else { throw .truncated(what: "digest entries") }
        var entries: [Entry] = []
        entries.reserveCapacity(count)
        for _ in 0..<count {
            let member = try NodeID(decoding: &buffer)
            let incarnation = try buffer.readWire(UInt64.self, "digest incarnation")
            let rank = try buffer.readWire(UInt8.self, "digest status")
            guard let status = MemberStatus(rank: rank) else { throw .invalidField(what: "digest status") }
            guard entries.last.map({ $0.member < member }) ?? true else { throw .invalidField(what: "digest order") }
            entries.append(Entry(member: member, incarnation: incarnation, status: status))
        }
        self.entries = entries
        guard entries.allSatisfy({ contains($0.member) }) else {
            throw .invalidField(what: "digest entry out of range")
        }
    }

    package func encode(into buffer: inout ByteBuffer) {
        let flags =
            (summary != nil ? Self.summaryFlag : isRequest ? Self.requestFlag : 0)
            | (upper != nil ? Self.boundedFlag : 0)
        buffer.writeInteger(flags)
        lower.encode(into: &buffer)
        (upper ?? NodeID(high: 0, low: 0)).encode(into: &buffer)
        if let summary {
            buffer.writeInteger(UInt16(clamping: summary.count))
            buffer.writeBytes(summary.hash)
            return
        }
        buffer.writeInteger(UInt16(entries.count))
        for entry in entries { entry.encode(into: &buffer) }
    }
}

extension StateDigest.Entry {
    func encode(into buffer: inout ByteBuffer) {
        member.encode(into: &buffer)
        buffer.writeInteger(incarnation)
        buffer.writeInteger(UInt8(status.rank))
    }
}

extension MemberStatus {
    init?(rank: UInt8) {
        guard let status = Self.allCases.first(where: { $0.rank == Int(rank) }) else { return nil }
        self = status
    }
}
