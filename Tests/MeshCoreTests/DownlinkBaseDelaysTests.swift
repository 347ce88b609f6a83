import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.BaseDelays`: LEDBAT's base delay per holder, and the queue above it.
@Suite struct DownlinkBaseDelaysTests {
    static let holder = NodeID(high: 1, low: 1)

    /// A piece that spent `delay` µs on the way, by a holder whose clock is `offset` µs ahead.
    static func sentAt(_ now: MeshInstant, delay: UInt32, offset: UInt32 = 0) -> UInt32 {
        UInt32(truncatingIfNeeded: now.nanoseconds / 1000) &- delay &+ offset
    }

    @Test("the queue is what a piece shows above the lowest delay seen, never negative, whatever the clocks")
    func theQueueIsAboveTheLowestDelay() {
        for offset: UInt32 in [0, 12_345, .max - 5, 1 << 31] {
            var delays = DownlinkController.BaseDelays(history: .seconds(60))
            var now = MeshInstant(nanoseconds: 5_000_000_000)
            func piece(delay: UInt32) -> Duration {
                delays.queue(sentAt: Self.sentAt(now, delay: delay, offset: offset), from: Self.holder, now: now)
            }
            let queue1 = piece(delay: 30000)
            #expect(queue1 == .zero)
            now = now + .milliseconds(10)
            let queue = piece(delay: 42000)
            #expect(queue == .milliseconds(12), "offset \(offset): \(queue)")
            // A lower delay is the new base at once: no negative queue.
            now = now + .milliseconds(10)
            let queue2 = piece(delay: 20000)
            #expect(queue2 == .zero)
            now = now + .milliseconds(10)
            let queue3 = piece(delay: 30000)
            #expect(queue3 == .milliseconds(10))
        }
    }

    @Test("each holder has a base of its own: one path's delay is not another's queue")
    func eachHolderHasItsOwnBase() {
        var delays = DownlinkController.BaseDelays(history: .seconds(60))
        let far = NodeID(high: 2, low: 2)
        let now = MeshInstant(nanoseconds: 1_000_000_000)
        _ = delays.queue(sentAt: Self.sentAt(now, delay: 5000), from: Self.holder, now: now)
        let queue4 = delays.queue(sentAt: Self.sentAt(now, delay: 80000), from: far, now: now)
        #expect(queue4 == .zero)
        delays.remove(far)
        #expect(delays.holders[far] == nil && delays.holders[Self.holder] != nil)
    }

    @Test("a path that got longer is followed within two periods of half the history, not before one")
    func aLongerPathIsFollowedWithinTheHistory() {
        var delays = DownlinkController.BaseDelays(history: .seconds(60))
        var now = MeshInstant(nanoseconds: 1_000_000_000)
        _ = delays.queue(sentAt: Self.sentAt(now, delay: 10000), from: Self.holder, now: now)
        var queues: [(seconds: Int, queue: Duration)] = []
        for second in stride(from: 5, through: 65, by: 5) {
            now = MeshInstant(nanoseconds: 1_000_000_000) + .seconds(second)
            queues.append((second, delays.queue(sentAt: Self.sentAt(now, delay: 50000), from: Self.holder, now: now)))
        }
        // The old low counts for the period it was seen in and the next one.
        #expect(queues.filter { $0.seconds < 30 }.allSatisfy { $0.queue == .milliseconds(40) }, "\(queues)")
        #expect(queues.filter { $0.seconds >= 60 }.allSatisfy { $0.queue == .zero }, "\(queues)")
    }
}

extension DownlinkControllerTests {
    @Test func theBaseDelayFollowsAClockThatWraps() {
        var controller = Self.started()
        var packet: UInt64 = 0
        // Our clock's microseconds sit just below 2^32 of theirs: differences wrap.
        let start = MeshInstant(nanoseconds: (UInt64(UInt32.max) - 100_000) * 1000)
        _ = Self.feed(&controller, from: start, seconds: 0.5, rate: 1e6, packet: &packet) { _ in 0.004 }
        #expect(controller.queueingDelay < .milliseconds(1))
    }
}
