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

    static func waiting(_ progress: JoinProgress) -> String {
        let tries = progress.attempts == 1 ? "once" : "\(progress.attempts) times"
        return "waiting for a first member: no answer yet from \(addressList(progress.addresses.map(\.description))) "
            + "(tried \(tries)); still trying. Check that the invite is the right one, that the inviting node "
            + "is running, and that no firewall blocks UDP to those addresses"
    }

    static func joined(member: NodeID, name: String, address: PeerAddress, waited: Duration) -> String {
        let seconds = Int((waited.milliseconds / 1000).rounded())
        return
            "joined: met \(TerminalText.escaped(MeshNode.displayName(name, member))) at \(address) after \(seconds) s"
    }

    /// `status`'s line while alone with seeds.
    package static func statusLine(addresses: Int, seconds: Double) -> String {
        "waiting for a first member (no answer from \(addresses) address\(addresses == 1 ? "" : "es") for \(Int(seconds))s)"
    }
}
