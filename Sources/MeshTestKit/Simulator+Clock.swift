import MeshCore

/// Per-node clocks. Each node reads `Simulator.now` plus its own offset, so a test can make
/// one node's clock jump (a suspended VM resuming, an NTP step on a clock a protocol wrongly
/// treats as monotonic) and check that the protocol neither stalls nor declares peers dead
/// wholesale.
extension Simulator {
    /// What `node` sees as the current time.
    package func localTime(of node: SimAddress) -> MeshInstant {
        now + nodes[checked(node)].clockOffset
    }

    /// How far `node`'s clock is from the simulator's.
    package func clockOffset(of node: SimAddress) -> Duration {
        nodes[checked(node)].clockOffset
    }

    /// Moves `node`'s clock by `jump` (forward when positive) from now on. Its armed timers
    /// keep their deadlines on the node's clock, so after a forward jump every timer whose
    /// deadline has been skipped fires at once (in deadline order), as a monotonic-clock timer
    /// does after a suspend; the others fire correspondingly sooner. A backward jump delays
    /// them. Clocks cannot go below zero.
    package func jumpClock(of node: SimAddress, by jump: Duration) {
        let index = checked(node)
        nodes[index].clockOffset += jump
        record(.clockJumped(node, by: jump))
        // Re-arm in a fixed order: the timer table is a dictionary, whose order is random.
        let armed = nodes[index].timers.sorted { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
        for (id, timer) in armed {
            arm(timer: id, of: index, at: timer.deadline)
        }
    }
}
