import MeshCrypto
import MeshCore

/// The lines a joiner prints while no member answers it, and once one does (`run`, `status`).
/// The core decides when; these only say it. Addresses come from the invite, the command line
/// or the data dir; a member's name from its own record, so it is escaped.
package enum JoinNotice {
    /// Addresses shown in one line; the rest are counted.
    static let shownAddresses = 8

    package static func addressList(_ addresses: [String]) -> String {
        let shown = addresses.prefix(shownAddresses).map(TerminalText.escaped).joined(separator: ", ")
        let rest = addresses.count - shownAddresses
        return rest > 0 ? "\(shown) and \(rest) more" : shown
    }

    /// `invited`: the addresses come from an invite (given to this start, or kept from one that
    /// met nobody). Otherwise they are the members the data dir knows, and the invite is not
    /// what to check.
    static func waiting(_ progress: JoinProgress, invited: Bool) -> String {
        let tries = progress.attempts == 1 ? "once" : "\(progress.attempts) times"
        let check =
            invited
            ? "Check that the invite is the right one, that the inviting node is running"
            : "The members this data dir knows may all be offline; check that one is running"
        return "waiting for a first member: no answer yet from \(addressList(progress.addresses.map(\.description))) "
            + "(tried \(tries)); still trying. \(check), and that no firewall blocks UDP to those addresses"
    }

    /// A member answered with the rotation that left the epoch this node speaks, and it does not
    /// owe this node the next: only a new invite lets it in. `invited` as for `waiting`.
    static func outOfDate(invited: Bool) -> String {
        let why =
            invited
            ? "this invite is out of date: a member was removed since it was made"
            : "this node was left out of the session's new key: a member was removed while this node was away "
                + "or not yet known to the remover"
        // A data dir that never took part takes the new invite; one that did needs a fresh one.
        let how = invited ? "start again with it" : "join with it in a fresh --data-dir"
        return "\(why), and the session moved to a new key that this node is not given. Ask a member for a new "
            + "invite (groupmesh invite) and \(how); still trying meanwhile"
    }

    static func joined(member: NodeID, name: String, address: PeerAddress, waited: Duration) -> String {
        let seconds = Int((waited.milliseconds / 1000).rounded())
        return
            "joined: met \(TerminalText.escaped(MeshNode.displayName(name, member))) at \(address) after \(seconds) s"
    }

    /// `status`'s line while alone with seeds.
    package static func statusLine(addresses: Int, seconds: Double, state: String = waiting) -> String {
        guard state == outOfDateState else {
            return
                "waiting for a first member (no answer from \(addresses) address\(addresses == 1 ? "" : "es") for \(Int(seconds))s)"
        }
        return "not let in: the session moved to a new key this node is not given, only a new invite lets it in "
            + "(trying for \(Int(seconds))s)"
    }

    /// `status --json`'s `joining.state`: nobody answered yet, or a member answered that the
    /// session moved to a key this node is not owed.
    package static let waiting = "waiting"
    package static let outOfDateState = "out-of-date"
}
