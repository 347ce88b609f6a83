import Foundation
import MeshCore

/// The CPU time this node spends relaying for others, for `status` (PROTOCOL.md §1d): the event
/// loop thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`) read around each datagram that asked us
/// to relay, from its opening to the send of what we carried on (checks, sealing, `sendmsg`).
/// Not counted: reading it from the socket, which happens in batches before the node sees it.
/// The clock is read only while forwards come (within a second of the last), so a node that
/// relays nothing pays nothing; the first forward after a pause goes unmeasured.
struct RelayCPU {
    private(set) var nanoseconds: UInt64 = 0
    private var measuringUntil = MeshInstant.zero

    /// The thread's CPU clock now, when forwards are coming (else nil: nothing is measured).
    func start(now: MeshInstant) -> UInt64? {
        now < measuringUntil ? Self.threadNanoseconds() : nil
    }

    /// The datagram handled since `start` asked us to relay.
    mutating func relayed(since start: UInt64?, now: MeshInstant) {
        if let start {
            let end = Self.threadNanoseconds()
            if end > start { nanoseconds += end - start }
        }
        measuringUntil = now + .seconds(1)
    }

    /// Milliseconds of CPU per MiB carried (nil before a MiB was).
    func millisecondsPerMiB(carried bytes: UInt64) -> Double? {
        guard bytes >= 1 << 20 else { return nil }
        return Double(nanoseconds) / 1e6 / (Double(bytes) / 1_048_576)
    }

    static func threadNanoseconds() -> UInt64 {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
