import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.LossHistory`: a queue overflowing, or a line losing at random.
@Suite struct DownlinkLossHistoryTests {
    @Test("beside a queue one interval's loss judges alone; with none, loss counts over about the last eight")
    func overflowBesideAQueueOrOverTheQuietIntervals() {
        var history = DownlinkController.LossHistory(settings: .init())
        // 6% of 100 beside an 8 ms queue (target 25 ms): an overflow.
        let overflow1 = history.overflowing(queue: 0.008, target: 0.025, received: 94, lost: 6)
        #expect(overflow1)
        // The same with no queue: random, until the quiet sum passes a tenth.
        let overflow2 = history.overflowing(queue: 0, target: 0.025, received: 94, lost: 6)
        #expect(!overflow2)
        for _ in 0..<4 {
            let overflow3 = history.overflowing(queue: 0, target: 0.025, received: 100, lost: 0)
            #expect(!overflow3)
        }
        let overflow4 = history.overflowing(queue: 0, target: 0.025, received: 80, lost: 20)
        #expect(!overflow4, "one heavy interval")
        var heavy = 0
        for _ in 0..<8 where history.overflowing(queue: 0, target: 0.025, received: 85, lost: 15) { heavy += 1 }
        #expect(heavy > 0)
        history.forgetQuiet()
        #expect(history.quiet == (received: 0, lost: 0))
        // Fewer than `lossMinimum` datagrams lost never judge.
        let overflow5 = history.overflowing(queue: 0.02, target: 0.025, received: 3, lost: 3)
        #expect(!overflow5)
    }

    @Test(
        "the line is lossy at 0.2% over intervals under the target, with at least 4 lost; loss over it does not count")
    func aLossyLineNeedsLossUnderTheTarget() {
        var history = DownlinkController.LossHistory(settings: .init())
        for _ in 0..<20 { _ = history.overflowing(queue: 0.030, target: 0.025, received: 100, lost: 1) }
        #expect(!history.isLossyLine, "loss over the target counted")
        _ = history.overflowing(queue: 0, target: 0.025, received: 500, lost: 3)
        #expect(!history.isLossyLine, "three datagrams made the line lossy")
        _ = history.overflowing(queue: 0, target: 0.025, received: 500, lost: 3)
        #expect(history.isLossyLine)
        // It decays by a 64th per interval under the target: a healed line is known again.
        for _ in 0..<400 { _ = history.overflowing(queue: 0, target: 0.025, received: 100, lost: 0) }
        #expect(!history.isLossyLine)
        #expect(history.line.received >= 0 && history.line.lost >= 0)
    }
}

extension DownlinkControllerTests {
    @Test func randomLossDoesNotCutTheRateButAnOverflowDoes() {
        var controller = Self.started()
        var packet: UInt64 = 0
        // 1% loss with an empty queue: not congestion.
        var now = Self.feed(&controller, from: .zero, seconds: 2, rate: 2e6, lossEvery: 100, packet: &packet) { _ in 0 }
        #expect(controller.lossBackoffs == 0)
        // One datagram in five lost: a queue overflowing.
        now = Self.feed(&controller, from: now, seconds: 0.5, rate: 2e6, lossEvery: 5, packet: &packet) { _ in 0 }
        #expect(controller.lossBackoffs > 0)
    }

    /// A lossy radio drops a few percent with no queue anywhere: cutting for it, a loopback fetch
    /// at 5% loss ran at 0.12× the loss-free one. Heavy loss that lasts is an overflow all the
    /// same (a policer drops without queueing); one heavy interval is not. The same loss beside a
    /// standing queue is a queue overflowing (an AQM drops before the queue reaches our target).
    @Test(
        "loss with no queue cuts only when it passes a tenth over the last intervals; beside a queue, a twentieth in one cuts"
    )
    func lossWithNoQueueIsRandomUnlessHeavy() {
        var packet: UInt64 = 0
        var quiet = Self.started()
        // Out of slow start (a queue that lasts ends it), then no queue again.
        var now = Self.feed(&quiet, from: .zero, seconds: 0.5, rate: 2e6, packet: &packet) { _ in 0 }
        now = Self.feed(&quiet, from: now, seconds: 0.1, rate: 2e6, packet: &packet) { _ in 0.010 }
        #expect(!quiet.slowStart)
        now = Self.feed(&quiet, from: now, seconds: 3, rate: 2e6, lossEvery: 16, packet: &packet) { _ in 0 }
        #expect(quiet.lossBackoffs == 0, "6% random loss cut the rate \(quiet.lossBackoffs) times")
        // One interval (40 ms) with a quarter lost, amid the 6%: not lasting.
        now = Self.feed(&quiet, from: now, seconds: 0.04, rate: 2e6, lossEvery: 4, packet: &packet) { _ in 0 }
        now = Self.feed(&quiet, from: now, seconds: 0.2, rate: 2e6, lossEvery: 16, packet: &packet) { _ in 0 }
        #expect(quiet.lossBackoffs == 0, "one heavy interval cut the rate")
        now = Self.feed(&quiet, from: now, seconds: 1, rate: 2e6, lossEvery: 6, packet: &packet) { _ in 0 }
        #expect(quiet.lossBackoffs > 0, "17% loss with no queue never cut")
        var queued = Self.started()
        now = Self.feed(&queued, from: .zero, seconds: 0.5, rate: 2e6, packet: &packet) { _ in 0 }
        _ = Self.feed(&queued, from: now, seconds: 3, rate: 2e6, lossEvery: 16, packet: &packet) { _ in 0.005 }
        #expect(queued.lossBackoffs > 0, "6% loss beside a 5 ms queue never cut")
    }

    /// A TCP on a line that loses at random is held down by that loss, not by the line, and its
    /// rate goes as one over its round trip: the queue a fetch keeps there is what TCP loses to
    /// it. Such a line is known by loss where the queue is under the target (where ours is not
    /// overflowing), and there the target is an eighth of the round trip, at least 10 ms, once
    /// slow start's overshoot has risen past it and drained.
    @Test(
        "a line that loses datagrams at random lowers the target to an eighth of the round trip, at least 10 ms, after slow start's overshoot",
        arguments: [(80, 10), (120, 15), (400, 25)])
    func aLossyLineLowersTheTarget(roundTrip: Int, expected: Int) {
        var controller = DownlinkController()
        controller.onRoundTrip(.milliseconds(roundTrip), now: .zero)
        var packet: UInt64 = 0
        var now = Self.feed(&controller, from: .zero, seconds: 1, rate: 1e6, packet: &packet) { _ in 0 }
        #expect(!controller.isLossyLine && controller.target == .milliseconds(25))
        now = Self.feed(&controller, from: now, seconds: 3, rate: 1e6, lossEvery: 200, packet: &packet) { _ in 0 }
        #expect(controller.isLossyLine)
        #expect(controller.slowStart && controller.target == .milliseconds(25), "lowered in slow start")
        // Slow start ends on a queue that stands; the interval it ended in closes with no queue
        // (its first pieces'), and the overshoot shows only after.
        now = Self.feed(&controller, from: now, seconds: 0.5, rate: 1e6, lossEvery: 200, packet: &packet) { _ in 0.030 }
        #expect(!controller.slowStart)
        #expect(controller.target == .milliseconds(25), "lowered before the overshoot drained: \(controller.target)")
        now = Self.feed(&controller, from: now, seconds: 1, rate: 1e6, lossEvery: 200, packet: &packet) { _ in 0 }
        #expect(controller.target == .milliseconds(expected), "target \(controller.target)")
        // The line heals: within some 64 intervals without loss the usual target is back.
        let intervals = Double(controller.interval.milliseconds) / 1000 * 80
        _ = Self.feed(&controller, from: now, seconds: intervals, rate: 1e6, packet: &packet) { _ in 0 }
        #expect(!controller.isLossyLine && controller.target == .milliseconds(25))
    }

    /// A hold before the first proof that followed growth has seen its overshoot show and drained
    /// it: once the line is known to lose at random, the lowered target applies from the first
    /// interval under it, not after a queue of ours has climbed toward 25 ms and fallen again.
    @Test(
        "after slow start's overshoot was held and drained before the first proof, a lossy line's target applies from the first interval under it"
    )
    func aLossyTargetAfterAnUnprovenHoldNeedsNoSecondOvershoot() {
        var controller = Self.started(.foreground, roundTrip: .milliseconds(80))
        var packet: UInt64 = 0
        // Slow start grows before the proof, overshoots (a queue stands), is held there and drained.
        var now = Self.feed(&controller, from: .zero, seconds: 1, rate: 1e6, trusted: false, packet: &packet) { _ in 0 }
        now = Self.feed(&controller, from: now, seconds: 0.6, rate: 1e6, trusted: false, packet: &packet) { _ in 0.030 }
        #expect(controller.slowStart)
        // The first proof, the overshoot drained; the proven holders' losses show a lossy line.
        now = Self.feed(&controller, from: now, seconds: 3, rate: 1e6, lossEvery: 200, packet: &packet) { _ in 0.002 }
        #expect(!controller.slowStart && controller.isLossyLine)
        #expect(controller.target == .milliseconds(10), "target \(controller.target)")
        #expect(controller.lossBackoffs == 0)
    }

    @Test("loss beside a queue over the target, or a handful of datagrams, does not make a line lossy")
    func lossOverTheTargetIsNotTheLines() {
        var packet: UInt64 = 0
        // 1% lost while a 30 ms queue stands: ours may be overflowing.
        var (overflowing, now) = Self.outOfSlowStart(queue: 0.03, packet: &packet)
        now = Self.feed(&overflowing, from: now, seconds: 3, rate: 1e6, lossEvery: 100, packet: &packet) { _ in 0.030 }
        #expect(!overflowing.isLossyLine && overflowing.target == .milliseconds(25))
        // Three datagrams lost in 700 with no queue: too few to tell.
        var (few, then) = Self.outOfSlowStart(queue: 0.03, packet: &packet)
        then = Self.feed(&few, from: then, seconds: 0.3, rate: 1e6, lossEvery: 70, packet: &packet) { _ in 0 }
        _ = Self.feed(&few, from: then, seconds: 0.7, rate: 1e6, packet: &packet) { _ in 0 }
        #expect(few.lastInterval.closedAt > then)
        #expect(!few.isLossyLine, "3 datagrams lost made the line lossy")
    }

    @Test("on a line that loses at random, a queue under the usual target but over the lowered one cuts the rate")
    func aLossyLinesTargetCutsAQueueTheUsualOneKeeps() {
        for lossy in [false, true] {
            var packet: UInt64 = 0
            var (controller, now) = Self.outOfSlowStart(queue: 0.03, packet: &packet)
            now = Self.feed(
                &controller, from: now, seconds: 3, rate: 1e6, lossEvery: lossy ? 200 : nil, packet: &packet
            ) { _ in 0 }
            #expect(controller.isLossyLine == lossy)
            // A queue past the lowered target that drains: the lowered target applies.
            now = Self.feed(
                &controller, from: now, seconds: 0.3, rate: 1e6, lossEvery: lossy ? 200 : nil, packet: &packet
            ) { _ in 0.030 }
            now = Self.feed(
                &controller, from: now, seconds: 1, rate: 1e6, lossEvery: lossy ? 200 : nil, packet: &packet
            ) { _ in 0 }
            #expect(controller.target == .milliseconds(lossy ? 10 : 25))
            // 18 ms of queue, standing, with 1 MB/s arriving: room under 25 ms, a cut over 10.
            _ = Self.feed(&controller, from: now, seconds: 1, rate: 1e6, lossEvery: lossy ? 200 : nil, packet: &packet)
            { _ in 0.018 }
            if lossy {
                #expect(controller.rate < 0.8e6, "not cut: \(controller.rate)")
            } else {
                #expect(controller.rate >= 0.95e6, "cut: \(controller.rate)")
            }
        }
    }
}
