import MeshCrypto
import NIOCore

/// What a node remembers across restarts (`DATA_DIR/members.json`): its own last incarnation,
/// so a restart outbids what the others remember of it, where the members were, so it can
/// rejoin without an invite, and the members that left or were forgotten, so that
/// `remove-member` can still name them (a lost laptop is offline long before it is removed).
/// Codable as the file holds it (ids in hex, addresses as text).
package struct RememberedMembers: Codable, Sendable, Equatable {
    package struct Entry: Codable, Sendable, Equatable {
        package var id: String
        package var name: String
        package var addresses: [String]
        /// For a former member forgotten after it died: when (Unix seconds), so that a restart
        /// looks for it only for what is left of the day (`MembershipSettings.lostMemberRetention`).
        /// Absent from files written before it, and when the node did not know the time.
        package var lostSince: UInt64?

        package init(id: String, name: String, addresses: [String], lostSince: UInt64? = nil) {
            self.id = id
            self.name = name
            self.addresses = addresses
            self.lostSince = lostSince
        }
    }

    package var incarnation: UInt64 = 0
    package var members: [Entry] = []
    /// The addresses given at the last start (an invite's, `--join`), kept until a member
    /// answers: a node restarted before it met anyone still joins without the invite. Once
    /// joined, `members` says where the session is, and these are dropped.
    package var seeds: [String] = []
    /// Members that left or were forgotten (dead past `forgetAfter`), the latest first: they
    /// still hold the epoch they knew, so the user must be able to remove them by name. Those
    /// that left have no addresses; those forgotten after they died keep where they were last,
    /// so that a node that lost every member still finds them after a restart.
    package var former: [Entry] = []
    /// Who let each member in (this node included), as both signed them, in hex of their wire
    /// form: a restart keeps introducers, and does not ask its door again.
    package var introductionsHex: [String] = []
    /// This node made the session (it started with nobody to join): it has no door, and asks none
    /// after a restart either.
    package var founder = false
    /// The session's founding id (hex) as this node's door told it, and the founder's id once
    /// the founder proved it (PROTOCOL.md §3, "Founding"): a restart need not learn them again.
    package var founding: String?
    package var foundedBy: String?

    package init(incarnation: UInt64 = 0, members: [Entry] = [], seeds: [String] = [], former: [Entry] = []) {
        self.incarnation = incarnation
        self.members = members
        self.seeds = seeds
        self.former = former
    }

    private enum CodingKeys: String, CodingKey {
        case incarnation, members, seeds, former, introductions, founder, founding, foundedBy
    }

    // Files written before `seeds` or `former` existed have no such key.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        incarnation = try container.decodeIfPresent(UInt64.self, forKey: .incarnation) ?? 0
        members = try container.decodeIfPresent([Entry].self, forKey: .members) ?? []
        seeds = try container.decodeIfPresent([String].self, forKey: .seeds) ?? []
        former = try container.decodeIfPresent([Entry].self, forKey: .former) ?? []
        introductionsHex = try container.decodeIfPresent([String].self, forKey: .introductions) ?? []
        founder = try container.decodeIfPresent(Bool.self, forKey: .founder) ?? false
        founding = try container.decodeIfPresent(String.self, forKey: .founding)
        foundedBy = try container.decodeIfPresent(String.self, forKey: .foundedBy)
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(incarnation, forKey: .incarnation)
        try container.encode(members, forKey: .members)
        if !seeds.isEmpty { try container.encode(seeds, forKey: .seeds) }
        if !former.isEmpty { try container.encode(former, forKey: .former) }
        if !introductionsHex.isEmpty { try container.encode(introductionsHex, forKey: .introductions) }
        if founder { try container.encode(founder, forKey: .founder) }
        try container.encodeIfPresent(founding, forKey: .founding)
        try container.encodeIfPresent(foundedBy, forKey: .foundedBy)
    }

    /// What `founding` and `foundedBy` say; nil when either does not decode (the door tells again).
    package var sessionFounding: SessionFounding? {
        guard let founding, let id = FoundingID(hex: founding) else { return nil }
        guard let foundedBy else { return SessionFounding(id: id) }
        guard let founder = NodeID(hex: foundedBy) else { return nil }
        return SessionFounding(id: id, founder: founder)
    }

    package mutating func keep(_ founding: SessionFounding?) {
        self.founding = founding?.id.hex
        foundedBy = founding?.founder?.hex
    }

    package var seedAddresses: [PeerAddress] {
        seeds.compactMap { try? PeerAddress(parsing: $0) }
    }

    package var addresses: [PeerAddress] {
        members.flatMap { $0.addresses.compactMap { try? PeerAddress(parsing: $0) } }
    }

    /// The former members that were lost (forgotten after they died), the latest first, with
    /// where they were last, but for those `removed` since.
    package func lost(removed: Set<NodeID>) -> [(id: NodeID, addresses: [PeerAddress], since: UInt64?)] {
        former.compactMap { entry in
            guard let id = NodeID(hex: entry.id), !removed.contains(id) else { return nil }
            let addresses = entry.addresses.compactMap { try? PeerAddress(parsing: $0) }
            return addresses.isEmpty ? nil : (id, addresses, entry.lostSince)
        }
    }

    /// Former members lost with no time kept (a file from before it was, a start without a
    /// clock): their day starts at `time`.
    package mutating func dateLost(at time: UInt64) {
        for index in former.indices where !former[index].addresses.isEmpty && former[index].lostSince == nil {
            former[index].lostSince = time
        }
    }

    /// Former members lost at or before `time` (Unix seconds) are no longer looked for: where
    /// they were is dropped (their names stay, for `remove-member`).
    package mutating func expireLost(lostAtOrBefore time: UInt64) {
        for index in former.indices {
            if let since = former[index].lostSince, since <= time {
                former[index].addresses = []
                former[index].lostSince = nil
            }
        }
    }

    /// The introductions kept; one that does not decode is passed over (its member asks, or
    /// tells us, again).
    package var introductions: [Introduction] {
        introductionsHex.compactMap { text in
            guard let bytes = Hex.decode(text) else { return nil }
            var buffer = ByteBuffer(bytes: bytes)
            guard let introduction = try? Introduction(decoding: &buffer), buffer.readableBytes == 0,
                introduction.isCountersigned
            else { return nil }
            return introduction
        }
    }

    /// Keeps the introductions of `localID` and of the members remembered.
    package mutating func keepIntroductions(_ introductions: some Sequence<Introduction>, localID: NodeID) {
        let kept = Set(members.map(\.id)).union([localID.hex])
        introductionsHex = introductions.filter { kept.contains($0.member.hex) }
            .sorted { $0.member < $1.member }
            .map { introduction in
                var buffer = ByteBuffer()
                introduction.encode(into: &buffer)
                return Hex.encode(buffer.readableBytesView)
            }
    }

    package var ids: [NodeID] { members.compactMap { NodeID(hex: $0.id) } }

    package func contains(_ id: NodeID) -> Bool { members.contains { $0.id == id.hex } }

    /// The view merged into what was remembered, not written over it: just after a restart the
    /// view is empty, and a crash then must not forget where the members were. Dead members stay
    /// too (if both ends of a link die in turn, each restart must still know where the other
    /// was); a member that left moves to `former` (once, so that `former` stays in the order
    /// members went; not those `removed`, who need no naming), and one back is no longer former.
    ///
    /// At most `maxEntries`: records of members that are gone cost a member nothing to make, so
    /// past the bound live members are kept first, then the view's others, then what only the
    /// file knew.
    package mutating func merge(_ view: some Sequence<Member>, removed: Set<NodeID> = []) {
        var entries = Dictionary(members.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
        var rank: [String: Int] = [:]
        var departed: [Entry] = []
        for member in view {
            let entry = Entry(
                id: member.id.hex, name: member.record.name, addresses: member.record.addresses.map(\.description))
            if member.status == .left {
                let newlyLeft = entries.removeValue(forKey: entry.id) != nil || !former.contains { $0.id == entry.id }
                if newlyLeft, !removed.contains(member.id) { departed.append(entry) }
                // Lost once, back, and now gone for good: nobody looks for it any more.
                if let index = former.firstIndex(where: { $0.id == entry.id }) {
                    former[index].addresses = []
                    former[index].lostSince = nil
                }
            } else {
                former.removeAll { $0.id == entry.id }
                entries[entry.id] = entry
            }
            rank[member.id.hex] = member.status.isGone ? 1 : 0
        }
        var kept = Array(entries.values)
        if kept.count > Self.maxEntries {
            kept.sort { (rank[$0.id] ?? 2, $0.id) < (rank[$1.id] ?? 2, $1.id) }
            kept.removeLast(kept.count - Self.maxEntries)
        }
        members = kept.sorted { $0.id < $1.id }
        for entry in departed { retire(entry) }
    }

    /// Far above a session's live members (`MembershipSettings.maxLiveMembers`).
    package static let maxEntries = 256

    /// Far above a session's members: what a member invents and then lets die pushes out only
    /// the oldest of the rest.
    package static let maxFormer = 64

    /// The member is forgotten: no longer remembered as a member, but as a former one (if we
    /// remembered it, and it is not `removed`).
    /// `lostAt`: it was forgotten after it died, and was last at these addresses (`LostMembers`),
    /// which a restart still joins through.
    /// `since`: when it was lost (Unix seconds), when the node knows the time.
    package mutating func forget(
        _ id: NodeID, removed: Bool = false, lostAt addresses: [PeerAddress] = [], since: UInt64? = nil
    ) {
        guard let index = members.firstIndex(where: { $0.id == id.hex }) else { return }
        let entry = members.remove(at: index)
        if !removed {
            retire(entry, addresses: addresses.map(\.description), lostSince: addresses.isEmpty ? nil : since)
        }
    }

    private mutating func retire(_ entry: Entry, addresses: [String] = [], lostSince: UInt64? = nil) {
        former.removeAll { $0.id == entry.id }
        former.insert(Entry(id: entry.id, name: entry.name, addresses: addresses, lostSince: lostSince), at: 0)
        if former.count > Self.maxFormer { former.removeLast(former.count - Self.maxFormer) }
    }
}
