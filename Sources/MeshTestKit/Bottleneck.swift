import MeshCore

/// A rate limit with a bounded FIFO queue in front of it: a home router's uplink or downlink, as
/// `tc tbf` or `htb` makes one on the namespace links. A datagram waits behind the bytes queued
/// before it and leaves at the link's rate; one that finds the queue full is dropped (tail drop).
/// Every flow through the node shares it, so flows compete as at a real bottleneck (
/// several holders feeding one joiner meet in the joiner's downlink).
package struct Bottleneck: Sendable, Equatable, CustomStringConvertible {
    package var bytesPerSecond: Double
    /// The most bytes waiting (the datagram being sent included).
    package var queueBytes: Int

    package init(bytesPerSecond: Double, queueBytes: Int) {
        precondition(bytesPerSecond > 0 && queueBytes > 0, "a bottleneck needs a rate and room")
        self.bytesPerSecond = bytesPerSecond
        self.queueBytes = queueBytes
    }

    /// A link of `megabitsPerSecond` whose queue holds `queue` worth of its rate (a "100 ms
    /// queue"), as link emulators are usually configured.
    package init(megabitsPerSecond: Double, queue: Duration) {
        let rate = megabitsPerSecond * 1_000_000 / 8
        self.init(bytesPerSecond: rate, queueBytes: max(1, Int(rate * queue.milliseconds / 1000)))
    }

    package var description: String {
        "\(bytesPerSecond * 8 / 1_000_000) Mbit/s, \(queueBytes) B queue"
    }

    /// How long `bytes` take to leave at this rate.
    func serialization(of bytes: Int) -> Duration {
        .nanoseconds(Int64((Double(bytes) / bytesPerSecond * 1e9).rounded()))
    }
}

/// A bottleneck in use: when the last byte queued leaves, and what it has seen.
struct BottleneckQueue {
    var limit: Bottleneck
    var busyUntil: MeshInstant = .zero
    var statistics = SimBottleneckStatistics()

    init(_ limit: Bottleneck) { self.limit = limit }

    /// When a datagram of `size` bytes that reaches the queue at `now` has left it, or nil when
    /// the queue has no room for it.
    mutating func admit(_ size: Int, at now: MeshInstant) -> MeshInstant? {
        let waiting =
            busyUntil > now ? Int(((busyUntil - now).milliseconds / 1000 * limit.bytesPerSecond).rounded()) : 0
        guard waiting + size <= limit.queueBytes else {
            statistics.dropped += 1
            return nil
        }
        busyUntil = max(busyUntil, now) + limit.serialization(of: size)
        statistics.forwarded += 1
        statistics.bytesForwarded += size
        statistics.peakQueueBytes = max(statistics.peakQueueBytes, waiting + size)
        return busyUntil
    }
}

/// What one bottleneck did.
package struct SimBottleneckStatistics: Sendable, Equatable {
    package var forwarded = 0
    package var bytesForwarded = 0
    /// Datagrams that found the queue full.
    package var dropped = 0
    package var peakQueueBytes = 0

    package init() {}
}
