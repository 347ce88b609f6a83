/// What a node believes about a member (PROTOCOL.md §4). At the same incarnation a later status
/// overrides an earlier one in this order: alive < suspect < dead < left.
package enum MemberStatus: String, Sendable, Codable, CaseIterable, Comparable {
    case alive, suspect, dead, left

    var rank: Int {
        switch self {
        case .alive: return 0
        case .suspect: return 1
        case .dead: return 2
        case .left: return 3
        }
    }

    package static func < (lhs: MemberStatus, rhs: MemberStatus) -> Bool { lhs.rank < rhs.rank }

    /// Dead and left members are not probed, not gossiped to, and forgotten after a while.
    package var isGone: Bool { self == .dead || self == .left }
}
