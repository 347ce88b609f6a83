#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import MeshCore

/// A bulk flow that follows TCP's congestion rules (RFC 5681, counted in segments): slow start,
/// congestion avoidance (Reno's one segment per round trip, or CUBIC's, RFC 9438, as Linux uses
/// by default), loss recovery on three duplicate acks with selective acknowledgements
/// (RFC 6675: the holes below the highest segment the receiver holds are sent again while the
/// segments in the network stay under the halved window), and a retransmission timeout (RFC 6298)
/// that starts over from one segment. The competitor the bench measures against: GroupMesh's transfers must
/// leave such a flow its share of a bottleneck. Not a TCP: no handshake, no receive window, whole
/// segments only, and each ack names the one segment that caused it instead of SACK blocks.
package final class TCPSender: SimulatedProcess {
    static let timeoutTimer: UInt64 = 1

    package enum Growth: Sendable {
        /// Additive increase of one segment per round trip, halving on loss.
        case reno
        /// RFC 9438: the window follows a cubic of the time since the last loss, back to the
        /// window it had then and beyond; 0.7 of it on loss; never slower than Reno would be.
        case cubic
    }

    package let growth: Growth
    /// CUBIC's state: the window at the last loss, when this growth began, and the Reno-paced
    /// estimate it must not fall below.
    private var windowAtLoss: Double = 0
    private var epochStart: MeshInstant?
    private var renoEstimate: Double = 0

    package let receiver: SimAddress
    package let segmentSize: Int
    /// When to stop sending new segments (what is lost after it is not sent again either).
    package let stopAt: MeshInstant

    /// Segments the network may hold (a real number: congestion avoidance adds 1/cwnd per ack).
    package private(set) var congestionWindow: Double = 10
    private var slowStartThreshold = Double.infinity
    /// The first segment not acknowledged, and the next new one to send.
    private var unacknowledged = 0
    private var nextSegment = 0
    private var duplicateAcks = 0
    /// Segments above `unacknowledged` the receiver holds.
    private var selectivelyAcknowledged: Set<Int> = []
    private var highestAcknowledged = -1
    /// In loss recovery until this segment is acknowledged.
    private var recoveryPoint: Int?
    /// Holes sent again in this recovery (or since the timeout).
    private var resent: Set<Int> = []
    /// Segments ever sent more than once: no RTT sample from their acks (Karn).
    private var ambiguous: Set<Int> = []
    private var sentAt: [Int: MeshInstant] = [:]
    private var smoothedRTT: Duration?
    private var rttVariation: Duration = .zero
    /// Timeouts since the last RTT sample: each doubles the timeout (RFC 6298 §5.5).
    private var backoff = 0
    /// The timer runs from the last ack of new data, not from the last send (RFC 6298 §5.1, 5.3):
    /// a lost retransmission must time out even while new segments keep going.
    private var timerArmed = false
    /// Bytes acknowledged so far: the flow's goodput.
    package private(set) var bytesAcknowledged = 0
    package private(set) var timeouts = 0
    package private(set) var recoveries = 0

    package init(to receiver: SimAddress, growth: Growth = .cubic, segmentSize: Int = 1200, until stopAt: MeshInstant) {
        precondition(segmentSize >= 8)
        self.growth = growth
        self.receiver = receiver
        self.segmentSize = segmentSize
        self.stopAt = stopAt
    }

    private var retransmissionTimeout: Duration {
        let base = smoothedRTT.map { max(.milliseconds(200), $0 + rttVariation * 4) } ?? .seconds(1)
        return min(.seconds(60), base * Double(1 << min(backoff, 8)))
    }

    package func start(now: MeshInstant, context: inout SimContext) {
        fill(now: now, context: &context)
    }

    package func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard datagram.count == 8 else { return }
        let cumulative = Self.segmentNumber(datagram, at: 0)
        let segment = Self.segmentNumber(datagram, at: 4)
        if segment >= cumulative, segment < nextSegment {
            selectivelyAcknowledged.insert(segment)
            highestAcknowledged = max(highestAcknowledged, segment)
        }
        if cumulative > unacknowledged {
            newAck(cumulative, now: now, context: &context)
        } else if cumulative == unacknowledged, nextSegment > unacknowledged {
            duplicateAcks += 1
            if recoveryPoint == nil, duplicateAcks >= 3 {
                recoveries += 1
                slowStartThreshold = reduced(Double(nextSegment - unacknowledged))
                congestionWindow = slowStartThreshold
                recoveryPoint = nextSegment - 1
                resent = []
            }
        }
        fill(now: now, context: &context)
    }

    package func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        timerArmed = false
        guard id == Self.timeoutTimer, nextSegment > unacknowledged else { return }
        // Everything in flight is presumed lost: one segment, and slow start up to half of it.
        timeouts += 1
        backoff += 1
        slowStartThreshold = reduced(Double(nextSegment - unacknowledged))
        congestionWindow = 1
        recoveryPoint = nil
        duplicateAcks = 0
        ambiguous.formUnion(unacknowledged..<nextSegment)
        selectivelyAcknowledged = []
        highestAcknowledged = unacknowledged - 1
        resent = []
        nextSegment = unacknowledged
        fill(now: now, context: &context)
    }

    private func newAck(_ acknowledged: Int, now: MeshInstant, context: inout SimContext) {
        let newlyAcknowledged = acknowledged - unacknowledged
        if !ambiguous.contains(acknowledged - 1), let sent = sentAt[acknowledged - 1] {
            sample(now - sent)
        }
        for segment in unacknowledged..<acknowledged {
            sentAt[segment] = nil
            ambiguous.remove(segment)
            resent.remove(segment)
            selectivelyAcknowledged.remove(segment)
        }
        bytesAcknowledged += newlyAcknowledged * segmentSize
        unacknowledged = acknowledged
        nextSegment = max(nextSegment, unacknowledged)
        duplicateAcks = 0
        if let recover = recoveryPoint {
            if acknowledged > recover { recoveryPoint = nil }
        } else if congestionWindow < slowStartThreshold {
            congestionWindow += Double(newlyAcknowledged)
        } else {
            grow(by: newlyAcknowledged, now: now)
        }
        if nextSegment > unacknowledged {
            context.schedule(timer: Self.timeoutTimer, after: retransmissionTimeout)
            timerArmed = true
        } else {
            context.cancel(timer: Self.timeoutTimer)
            timerArmed = false
        }
    }

    /// The window after a loss, from the segments in flight: half (Reno) or 0.7 (CUBIC, which
    /// also remembers where the loss happened, a little lower when it came sooner than last time).
    private func reduced(_ flight: Double) -> Double {
        switch growth {
        case .reno:
            return max(2, flight / 2)
        case .cubic:
            let window = max(flight, congestionWindow)
            windowAtLoss = window < windowAtLoss ? window * (1 + 0.7) / 2 : window
            epochStart = nil
            return max(2, window * 0.7)
        }
    }

    private func grow(by acknowledged: Int, now: MeshInstant) {
        switch growth {
        case .reno:
            congestionWindow += Double(acknowledged) / congestionWindow
        case .cubic:
            if epochStart == nil {
                epochStart = now
                renoEstimate = congestionWindow
                if windowAtLoss < congestionWindow { windowAtLoss = congestionWindow }
            }
            let c = 0.4, beta = 0.7
            let k = cbrt(windowAtLoss * (1 - beta) / c)
            let rtt = (smoothedRTT ?? .milliseconds(100)).milliseconds / 1000
            let t = (now - (epochStart ?? now)).milliseconds / 1000 + rtt
            let target = c * pow(t - k, 3) + windowAtLoss
            renoEstimate += 3 * (1 - beta) / (1 + beta) * Double(acknowledged) / congestionWindow
            let cubic =
                congestionWindow + max(0, min(target, 1.5 * congestionWindow) - congestionWindow)
                / congestionWindow * Double(acknowledged)
            congestionWindow = max(cubic, renoEstimate)
        }
    }

    private func sample(_ rtt: Duration) {
        backoff = 0
        guard let smoothed = smoothedRTT else {
            smoothedRTT = rtt
            rttVariation = rtt / 2
            return
        }
        let difference = smoothed > rtt ? smoothed - rtt : rtt - smoothed
        rttVariation = rttVariation * 0.75 + difference * 0.25
        smoothedRTT = smoothed * 0.875 + rtt * 0.125
    }

    /// The holes in recovery: below the highest segment the receiver holds, not held, not yet
    /// sent again.
    private var holes: [Int] {
        guard recoveryPoint != nil, highestAcknowledged > unacknowledged else { return [] }
        return (unacknowledged..<highestAcknowledged).filter {
            !selectivelyAcknowledged.contains($0) && !resent.contains($0)
        }
    }

    /// Sends holes first, then new segments, while the segments in the network (RFC 6675's pipe:
    /// sent, not acknowledged either way, and not presumed lost, a hole not yet sent again) stay
    /// under the window.
    private func fill(now: MeshInstant, context: inout SimContext) {
        var lost = holes[...]
        var inNetwork = nextSegment - unacknowledged - selectivelyAcknowledged.count - lost.count
        while Double(inNetwork) < congestionWindow.rounded(.down) {
            if let hole = lost.popFirst() {
                resent.insert(hole)
                ambiguous.insert(hole)
                send(hole, now: now, context: &context)
            } else if now < stopAt {
                send(nextSegment, now: now, context: &context)
                nextSegment += 1
            } else {
                break
            }
            inNetwork += 1
            if !timerArmed {
                context.schedule(timer: Self.timeoutTimer, after: retransmissionTimeout)
                timerArmed = true
            }
        }
    }

    private func send(_ segment: Int, now: MeshInstant, context: inout SimContext) {
        sentAt[segment] = now
        var bytes = [UInt8](repeating: 0, count: segmentSize)
        Self.setSegmentNumber(segment, in: &bytes, at: 0)
        context.send(bytes, to: receiver)
    }

    /// The big-endian 32-bit number at `offset`. Plain indexing: a test suite runs this for every
    /// segment and ack in a debug build, where `prefix(4).reduce` costs a generic call per byte.
    static func segmentNumber(_ bytes: [UInt8], at offset: Int) -> Int {
        Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
    }

    /// Writes `number` as `segmentNumber` reads it.
    static func setSegmentNumber(_ number: Int, in bytes: inout [UInt8], at offset: Int) {
        for index in 0..<4 { bytes[offset + index] = UInt8(truncatingIfNeeded: number >> (8 * (3 - index))) }
    }
}

/// The receiving end of `TCPSender`s (any number, each its own flow): acknowledges every
/// segment with the first one it still lacks of that flow (a cumulative ack; a duplicate when a
/// segment is missing) and the segment that came (standing in for SACK blocks).
package final class TCPReceiver: SimulatedProcess {
    private struct Flow {
        var expected = 0
        var outOfOrder: Set<Int> = []
    }

    private var flows: [SimAddress: Flow] = [:]
    package private(set) var segmentsReceived = 0

    package init() {}

    /// Takes `segment` into the flow; the first segment it still lacks.
    private static func advance(_ flow: inout Flow, by segment: Int) -> Int {
        if segment == flow.expected {
            flow.expected += 1
            while flow.outOfOrder.remove(flow.expected) != nil { flow.expected += 1 }
        } else if segment > flow.expected {
            flow.outOfOrder.insert(segment)
        }
        return flow.expected
    }

    package func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard datagram.count >= 8 else { return }
        let segment = TCPSender.segmentNumber(datagram, at: 0)
        segmentsReceived += 1
        // Changed in place: a copy of the flow would copy its out-of-order set on every insert.
        let expected = Self.advance(&flows[sender, default: Flow()], by: segment)
        // The first segment still lacked, and the one that came.
        var ack = [UInt8](repeating: 0, count: 8)
        TCPSender.setSegmentNumber(expected, in: &ack, at: 0)
        TCPSender.setSegmentNumber(segment, in: &ack, at: 4)
        context.send(ack, to: sender)
    }
}
