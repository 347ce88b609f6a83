import MeshCrypto

extension DownlinkController {
    /// Datagrams lost on the way, per holder, from its packet numbers: a gap before a datagram
    /// that carries a piece counts as lost, a late one takes a loss back.
    ///
    /// Invariants: only datagrams of an interval under way count; a holder is never believed to
    /// have lost more than it delivered in an interval (a member numbers its own datagrams, and
    /// one jumping ahead must not pass for congestion on our line); a jump of a thousand or more
    /// is a restarted peer or a long pause, not loss.
    struct DatagramLosses: Sendable {
        struct Holder: Sendable {
            var highestPacket: UInt64?
            /// This interval's datagrams with pieces, and those missing before them.
            var received = 0
            var lost = 0
        }

        private(set) var holders: [NodeID: Holder] = [:]

        /// Any pairwise datagram from `holder`; `counting`: an interval is under way.
        mutating func record(from holder: NodeID, packetNumber: UInt64, carriesPiece: Bool, counting: Bool) {
            var state = holders[holder] ?? Holder()
            if let highest = state.highestPacket {
                if packetNumber > highest {
                    let gap = packetNumber - highest - 1
                    if carriesPiece, counting, gap < 1000 { state.lost += Int(gap) }
                    state.highestPacket = packetNumber
                } else if state.lost > 0 {
                    // A late one was counted as lost.
                    state.lost -= 1
                }
            } else {
                state.highestPacket = packetNumber
            }
            if carriesPiece, counting { state.received += 1 }
            holders[holder] = state
        }

        /// The interval is over: what all holders delivered and lost in it (each holder's loss
        /// at most what it delivered), and the counts start again.
        mutating func closeInterval() -> (received: Int, lost: Int) {
            let received = holders.values.reduce(0) { $0 + $1.received }
            let lost = holders.values.reduce(0) { $0 + min($1.lost, $1.received) }
            for id in holders.keys {
                holders[id]?.received = 0
                holders[id]?.lost = 0
            }
            return (received, lost)
        }

        mutating func remove(_ holder: NodeID) {
            holders[holder] = nil
        }
    }
}
