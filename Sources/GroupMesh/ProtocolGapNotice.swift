import MeshCore
import MeshCrypto

/// The line a node prints, once per member boot, for a member whose protocol versions and its
/// own do not meet (PROTOCOL.md §3, "Protocol versions"). The core decides when; this only says
/// it. The member's name comes from its own record, so it is escaped.
package enum ProtocolGapNotice {
    /// `bob (0123456789ab) speaks protocol 4 (oldest 3); this node speaks 2 (oldest 1): upgrade
    /// groupmesh on this node`, or `…: that member must upgrade groupmesh` when it is behind.
    package static func line(member: NodeID, name: String, theirs: SpokenVersions, ours: SpokenVersions) -> String {
        let advice =
            theirs.current > ours.current ? "upgrade groupmesh on this node" : "that member must upgrade groupmesh"
        return "\(TerminalText.escaped(MeshNode.displayName(name, member))) speaks \(theirs); "
            + "this node speaks \(ours.current) (oldest \(ours.oldest)): \(advice)"
    }
}
