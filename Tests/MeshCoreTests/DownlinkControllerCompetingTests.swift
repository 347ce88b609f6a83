import MeshCrypto
import Testing
@testable import MeshCore

/// The controller's tests of whose queue it is: slowdowns (LEDBAT++), probes (BBR), and competing
/// with another flow (Copa); the helpers and the suite are in `DownlinkControllerTests`.
extension DownlinkControllerTests {
    /// A lone fetch's own queue `dt` seconds after it was `queue`: it drains while the fetch slows
    /// down, grows by the probe's quarter while it probes (up to `probeCap`), and otherwise goes
    /// back to 22 ms, where delay mode holds it.
    static func ownQueue(
        after queue: Double, at t: Double, dt: Double, _ controller: DownlinkController,
        probeCap: Double = 0.1
    ) -> Double {
        if t < 0.1 { return 0 }
        if controller.isSlowingDown { return max(0.001, queue - 0.875 * dt) }
        if controller.isProbing { return min(probeCap, queue + 0.25 * dt) }
        return queue > 0.022 ? max(0.022, queue - 0.1 * dt) : min(0.022, queue + 0.25 * dt)
    }

    /// One piece of 1,400 bytes that met `queue` seconds of queue over a 20 ms path, then a tick.
    static func deliverPiece(
        _ controller: inout DownlinkController, now: MeshInstant, queue: Double, packet: inout UInt64
    ) {
        packet += 1
        controller.onDatagram(from: holder, packetNumber: packet, carriesPiece: true)
        controller.onPiece(
            bytes: 1400, sentAt: UInt32(truncatingIfNeeded: (now.nanoseconds / 1000) &- UInt64((0.020 + queue) * 1e6)),
            from: holder, now: now)
        controller.onTick(now: now)
    }

    /// A lone get on a long path: its tests find the queue its own, its probes bring no more, and
    /// the queue a probe leaves (a quarter of the line more for a few round trips) must not pass
    /// for another flow's that never drains: competing's clock starts after the test and the
    /// probe, which drained the queue, not before them.
    @Test("a lone get on a 100 ms path tests, probes, and never competes")
    func aLoneGetOnALongPathNeverCompetes() {
        var controller = Self.started(.foreground, roundTrip: .milliseconds(100))
        var packet: UInt64 = 0
        var t = 0.0, last = 0.0, queue = 0.0
        var competedAt: Double?
        while t < 30 {
            let now = MeshInstant.zero + .seconds(t)
            let dt = t - last
            last = t
            queue = Self.ownQueue(after: queue, at: t, dt: dt, controller)
            Self.deliverPiece(&controller, now: now, queue: queue, packet: &packet)
            if controller.competing, competedAt == nil { competedAt = t }
            t += 1400 / 1e6
        }
        #expect(controller.slowdowns >= 2, "\(controller.slowdowns) tests")
        #expect(controller.lastProbeGain != nil, "no probe judged")
        #expect(controller.slowdownsFoundAnotherFlow == 0)
        #expect(competedAt == nil, "competed at \(competedAt ?? 0) s")
    }

    /// A probe that finds the line ours alone asked a quarter more than it carries, and left
    /// that in the queue: the rate goes to what arrived, drained for two intervals, then back to
    /// what arrived; not to the rate before the test (above what arrives, or the test would not
    /// have run), which left the probe's queue to delay mode's cuts (a lone get on a 10 Mbit/s,
    /// 80 ms line overflowed its queue and fell to a third of the line for 5 s, in simulation).
    /// With the probe's queue under the target (`probeQueue` 20 ms), delay mode grows during the
    /// drain: that must not keep the rate drained.
    @Test(
        "after a probe that finds the line its own, a lone get drains the probe's queue, then asks what arrived",
        arguments: [0.1, 0.02])
    func aProbeThatFindsTheLineOursDrainsItsQueue(probeQueue: Double) throws {
        // A get that starts at about its line's rate (the tests and the probe are what count here).
        var settings = DownlinkController.Settings()
        settings.initialRate = 1 << 20
        var controller = DownlinkController(settings: settings)
        controller.setPriority(.foreground)
        controller.onRoundTrip(.milliseconds(100), now: .zero)
        let line = 1e6
        var packet: UInt64 = 0
        var t = 0.0, last = 0.0, queue = 0.0
        var probing = false
        var ended: (at: Double, rate: Double)?
        var settled: Double?
        while t < 20, settled == nil {
            let now = MeshInstant.zero + .seconds(t)
            let dt = t - last
            last = t
            // Our own queue, as in the test above; after the probe, it follows the rate asked.
            queue =
                ended != nil
                ? min(0.1, max(0, queue + (controller.rate - line) / line * dt))
                : Self.ownQueue(after: queue, at: t, dt: dt, controller, probeCap: probeQueue)
            Self.deliverPiece(&controller, now: now, queue: queue, packet: &packet)
            if probing, !controller.isProbing, controller.lastProbeGain != nil, ended == nil {
                ended = (t, controller.rate)
            }
            probing = controller.isProbing
            // Just past the second close after the probe, where the drain ends.
            if let ended, t >= ended.at + 0.25 { settled = controller.rate }
            t += 1400 / line
        }
        let end = try #require(ended, "no probe judged in 20 s (\(controller.slowdowns) tests)")
        #expect(controller.slowdownsFoundAnotherFlow == 0)
        #expect(end.rate <= 0.9 * line && end.rate >= 0.45 * line, "after the probe: \(end.rate) with \(line) arriving")
        let back = try #require(settled)
        #expect(back >= line && back <= 1.15 * line, "after the drain: \(back) with \(line) arriving")
    }

    @Test func aForegroundFetchCompetesWithAQueueThatNeverDrainsAndBackgroundNever() {
        for priority in [DownlinkController.Priority.foreground, .background] {
            var controller = Self.started()
            controller.setPriority(priority)
            var packet: UInt64 = 0
            // The path's base delay shows once; then another flow holds 60–80 ms of queue.
            _ = Self.feed(&controller, from: .zero, seconds: 3, rate: 1e6, packet: &packet) { t in
                t < 0.1 ? 0 : 0.070 + 0.010 * (t.truncatingRemainder(dividingBy: 1) < 0.5 ? 1 : -1)
            }
            #expect(controller.competing == (priority == .foreground), "\(priority)")
        }
    }

    /// Pieces for `seconds` whose queue (above a 20 ms path) is `queue(t, slowingDown)`, arriving at
    /// `delivering(rate asked)`: 1 MB/s whatever is asked, unless told.
    static func feedAnswering(
        _ controller: inout DownlinkController, from start: MeshInstant, seconds: Double,
        packet: inout UInt64, delivering: (Double) -> Double = { _ in 1e6 },
        queue: (Double, Bool) -> Double
    ) -> MeshInstant {
        var t = 0.0, now = start
        while t < seconds {
            now = start + .seconds(t)
            deliverPiece(&controller, now: now, queue: queue(t, controller.isSlowingDown), packet: &packet)
            t += 1400 / delivering(controller.rate)
        }
        return now
    }

    /// A FIFO of 6 MB/s that another flow feeds at 5 MB/s: it hands out the line in proportion to
    /// what comes in, so asking more brings more.
    static func sharedLine(_ asked: Double) -> Double {
        asked + 5e6 > 6e6 ? asked * 6e6 / (asked + 5e6) : asked
    }

    /// Another flow's queue that was there before our first piece: our base delay holds the 60 ms
    /// of its trough, and we see only the 20–30 ms it swings above that, whatever we do.
    static func anotherFlowsQueue(_ t: Double, _ slowingDown: Bool) -> Double {
        t < 0.1 ? 0.060 : 0.060 + 0.025 + 0.005 * ((t * 2).truncatingRemainder(dividingBy: 1) < 0.5 ? 1 : -1)
    }

    @Test("a latecomer whose base delay holds another flow's queue slows down, sees the queue stay, and competes")
    func aLatecomerFindsAnotherFlowsQueueBySlowingDown() {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        let now = Self.feedAnswering(
            &controller, from: .zero, seconds: 6, packet: &packet, queue: Self.anotherFlowsQueue)
        #expect(controller.slowdowns >= 1)
        #expect(controller.slowdownsFoundAnotherFlow >= 1)
        #expect(controller.competing, "rate \(controller.rate) at \(now)")
    }

    /// As in simulation beside CUBIC: before the test our pieces and the other flow's share the
    /// queue (24 ms over our base, just under the target, so delay mode yields and never switches);
    /// slowed down, we see the other flow's part alone, 12 ms: under half the target.
    @Test("a latecomer that sees half the queue stay while it slows down (the other flow's part) competes")
    func aLatecomerSeeingTheOtherFlowsPartOfTheQueueCompetes() {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        let now = Self.feedAnswering(&controller, from: .zero, seconds: 6, packet: &packet) { t, slowingDown in
            t < 0.1 ? 0.060 : 0.060 + (slowingDown ? 0.012 : 0.024)
        }
        #expect(controller.slowdownsFoundAnotherFlow >= 1, "\(controller.slowdowns) slowdowns")
        #expect(controller.competing, "rate \(controller.rate) at \(now)")
    }

    /// CUBIC's queue drains for a moment after each of its losses: a first test that falls in
    /// that trough finds the queue gone. The probe after it still finds the other flow (asking
    /// more brings more), and the latecomer competes within seconds (not at the next test 10 s
    /// on, nor by yielding until the queue that never drains decides it).
    @Test("a latecomer whose first test meets the other flow's trough finds it by asking more, and competes")
    func aFirstTestInTheOtherFlowsTroughIsCaughtByTheProbe() {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        var tests = 0, wasSlowing = false
        let now = Self.feedAnswering(
            &controller, from: .zero, seconds: 4, packet: &packet,
            delivering: Self.sharedLine
        ) { t, slowingDown in
            if slowingDown, !wasSlowing { tests += 1 }
            wasSlowing = slowingDown
            guard t >= 0.1 else { return 0.060 }
            // Ours and the other flow's, 24 ms over our base; the other's part alone, 12 ms,
            // except in the first test, which falls in its trough.
            return 0.060 + (slowingDown ? (tests == 1 ? 0.001 : 0.012) : 0.024)
        }
        #expect(controller.slowdowns == 1, "\(controller.slowdowns) slowdowns")
        #expect(controller.slowdownsFoundAnotherFlow == 1)
        #expect(controller.competing, "rate \(controller.rate) at \(now)")
    }

    /// Deliveries stay at 1 MB/s (the line's share left to us) while the other flow's queue stays:
    /// the rate grows past them by a few steps of 8 datagrams per round trip, then holds. Grown
    /// up to twice what arrived (before), the excess filled the line's queue and overflowed it:
    /// 0.9-2.1% of the line's packets dropped beside CUBIC in simulation.
    @Test("a competing fetch runs no further ahead of its deliveries than a few steps of growth")
    func competingGrowthIsClockedByDeliveries() {
        var controller = DownlinkController()
        controller.setPriority(.foreground)
        controller.onRoundTrip(.milliseconds(100), now: .zero)
        var packet: UInt64 = 0
        var now = Self.feedAnswering(
            &controller, from: .zero, seconds: 6, packet: &packet, queue: Self.anotherFlowsQueue)
        #expect(controller.competing)
        // Competing's own slow start is over (a second after it began); a loss cuts the rate under
        // what arrives, and the steps from there are measured.
        #expect(!controller.competingSlowStart)
        now = Self.feed(&controller, from: now, seconds: 0.3, rate: 1e6, lossEvery: 50, packet: &packet) { _ in 0.085 }
        #expect(controller.rate < 1e6, "not cut: \(controller.rate)")
        let step = Double(controller.settings.competitiveIncrease) / 0.1  // one interval of one round trip
        var highest = 0.0
        for _ in 0..<30 {
            now = Self.feedAnswering(
                &controller, from: now, seconds: 0.1, packet: &packet, queue: Self.anotherFlowsQueue)
            if controller.competing, !controller.isSlowingDown { highest = max(highest, controller.rate) }
        }
        #expect(highest > 1e6, "it stopped growing short of what arrives: \(highest)")
        #expect(highest <= 1e6 + 5 * step, "rate \(highest) with 1 MB/s arriving (a step is \(step))")
    }

    /// The latecomer's base delay holds its own queue as well as the other flow's trough: slowed
    /// down, it sees 3 ms left, under the verdict, and takes the queue for its own. Asking a
    /// quarter more then brings about a fifth more (the queue shares the line by what comes in),
    /// which its own queue never would: it competes. (Through the emulator beside CUBIC, such
    /// latecomers yielded for 8 s of a 10–15 s get.)
    @Test(
        "a latecomer whose test misreads the other flow's queue as its own finds the flow by asking more, and competes")
    func aProbeThatBringsMoreFindsAnotherFlow() throws {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        let now = Self.feedAnswering(&controller, from: .zero, seconds: 6, packet: &packet, delivering: Self.sharedLine)
        { t, slowingDown in
            t < 0.1 ? 0.060 : 0.060 + (slowingDown ? 0.003 : 0.024)
        }
        #expect(controller.competing, "rate \(controller.rate) at \(now)")
        // One test found it, and not by the queue it saw.
        #expect(controller.slowdownsFoundAnotherFlow == 1, "\(controller.slowdowns) slowdowns")
        let lowest = try #require(controller.lastSlowdownLowest)
        #expect(lowest < controller.target * controller.settings.slowdownVerdict)
        let gain = controller.lastProbeGain ?? 0
        #expect(gain >= controller.settings.probeVerdict, "the probe brought \(gain)× what came before")
    }

    /// A latecomer beside another flow's queue, fed until it competes (bounded).
    static func competingLatecomer() -> (controller: DownlinkController, now: MeshInstant, packet: UInt64) {
        var controller = DownlinkController()
        controller.setPriority(.foreground)
        controller.onRoundTrip(.milliseconds(100), now: .zero)
        var packet: UInt64 = 0
        var now = MeshInstant.zero
        for slice in 0..<120 where !controller.competing {
            let offset = Double(slice) * 0.05
            now = Self.feedAnswering(&controller, from: .zero + .seconds(offset), seconds: 0.05, packet: &packet) {
                t, slowingDown in
                Self.anotherFlowsQueue(offset + t, slowingDown)
            }
        }
        return (controller, now, packet)
    }

    /// Once it found another flow's queue, a latecomer takes its share as a TCP that starts beside
    /// another does: multiplying its rate per round trip while what arrives follows, until the
    /// first loss (or a second); then by a few datagrams per round trip. (Added a step at a time
    /// from the delay-mode rate, it took seconds to reach its share beside CUBIC through the emulator.)
    @Test(
        "a latecomer that found another flow grows by half per round trip, within 1.5× what arrives, for a second at most"
    )
    func competingBeginsWithASlowStart() {
        var (controller, now, packet) = Self.competingLatecomer()
        #expect(controller.competing && controller.competingSlowStart)
        // The other flow gives way: what arrives follows the rate asked, its queue stays.
        let queue = { (_: Double) in 0.085 }
        let begin = controller.rate
        for _ in 0..<7 {
            let asked = controller.rate
            now = Self.feed(&controller, from: now, seconds: 0.1, rate: asked, packet: &packet, queue: queue)
            #expect(
                controller.rate <= asked * 1.5 * 1.02,
                "ran more than 1.5× ahead of what arrived: \(asked) → \(controller.rate)")
        }
        #expect(controller.competingSlowStart)
        #expect(controller.rate >= begin * 4, "grew \(begin) → \(controller.rate) in seven round trips")
        // Without a loss it still ends, a second after it began.
        for _ in 0..<5 {
            now = Self.feed(&controller, from: now, seconds: 0.1, rate: controller.rate, packet: &packet, queue: queue)
        }
        #expect(!controller.competingSlowStart && controller.competing)
    }

    @Test(
        "competing's slow start ends at the first loss: cut beside the queue, not when it drained, and at an overflow")
    func competingSlowStartEndsAtTheFirstLoss() {
        let queue = { (_: Double) in 0.085 }
        // A light loss beside the other flow's queue: cut by TCP's rule, then a step per round trip.
        var (controller, now, packet) = Self.competingLatecomer()
        now = Self.feed(&controller, from: now, seconds: 0.3, rate: controller.rate, packet: &packet, queue: queue)
        let before = controller.rate
        now = Self.feed(
            &controller, from: now, seconds: 0.2, rate: controller.rate, lossEvery: 50, packet: &packet, queue: queue)
        #expect(!controller.competingSlowStart && controller.competing)
        #expect(controller.rate < before, "no cut: \(before) → \(controller.rate)")
        let cut = controller.rate
        for _ in 0..<10 {
            now = Self.feed(&controller, from: now, seconds: 0.1, rate: controller.rate, packet: &packet, queue: queue)
        }
        let step = Double(controller.settings.competitiveIncrease) / 0.1
        #expect(
            controller.rate <= cut + 11 * step, "\(cut) → \(controller.rate) in ten round trips (a step is \(step))")

        // A loss over 5%: the overflow's cut, and the start is over too.
        (controller, now, packet) = Self.competingLatecomer()
        now = Self.feed(
            &controller, from: now, seconds: 0.2, rate: controller.rate, lossEvery: 10, packet: &packet, queue: queue)
        #expect(!controller.competingSlowStart)

        // Random loss with the queue drained (the other flow backed off): over, without a cut.
        (controller, now, packet) = Self.competingLatecomer()
        let drained = { (_: Double) in 0.061 }
        now = Self.feed(&controller, from: now, seconds: 0.1, rate: controller.rate, packet: &packet, queue: drained)
        let beforeRandom = controller.rate
        _ = Self.feed(
            &controller, from: now, seconds: 0.2, rate: controller.rate, lossEvery: 50, packet: &packet, queue: drained)
        #expect(!controller.competingSlowStart && controller.competing)
        #expect(controller.rate >= beforeRandom, "cut for random loss: \(beforeRandom) → \(controller.rate)")
    }

    /// Pieces at 1 MB/s with another flow's queue from the first of them: untrusted (no holder
    /// proven) for `untrustedFor` seconds, then trusted. Returns when the first test began, and
    /// when slow start ended.
    static func latecomerTimeline(
        untrustedFor: Double, queueFrom: Double, noQueue: ClosedRange<Double>? = nil
    )
        -> (slowStartEnded: Double?, firstTest: Double?, competing: Bool)
    {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        var slowStartEnded: Double?, firstTest: Double?
        let gap = 1400 / 1e6
        var t = 0.0
        while t < 4 {
            let now = MeshInstant.zero + .seconds(t)
            // The other flow's 20–30 ms over our base, whether we slow down or not.
            let queue =
                t < queueFrom || noQueue?.contains(t) == true
                ? 0 : 0.025 + 0.005 * ((t * 2).truncatingRemainder(dividingBy: 1) < 0.5 ? 1 : -1)
            packet += 1
            controller.onDatagram(from: holder, packetNumber: packet, carriesPiece: true)
            controller.onPiece(
                bytes: 1400,
                sentAt: UInt32(truncatingIfNeeded: (now.nanoseconds / 1000) &- UInt64((0.080 + queue) * 1e6)),
                from: holder, now: now, trusted: t >= untrustedFor)
            controller.onTick(now: now)
            if slowStartEnded == nil, !controller.slowStart { slowStartEnded = t }
            if firstTest == nil, controller.isSlowingDown { firstTest = t }
            t += gap
        }
        return (slowStartEnded, firstTest, controller.competing)
    }

    /// A queue that held slow start at its first rate, before any holder proved itself, is one that
    /// rate could hardly have built: the first test goes at once. A queue that showed only after
    /// slow start had grown may be our own, and must last a second first.
    @Test("a queue there before slow start grew is tested at once; one that came after it grew must last first")
    func aQueueThatHeldTheFirstRateIsTestedAtOnce() throws {
        let held = Self.latecomerTimeline(untrustedFor: 0.5, queueFrom: 0.003)
        var ended = try #require(held.slowStartEnded), test = try #require(held.firstTest)
        #expect(test - ended < 0.3, "slow start ended at \(ended) s, the first test began at \(test) s")
        #expect(held.competing)
        // The queue came after slow start had doubled the rate: no shortcut.
        let grown = Self.latecomerTimeline(untrustedFor: 0.5, queueFrom: 0.2)
        (ended, test) = (try #require(grown.slowStartEnded), try #require(grown.firstTest))
        #expect(test - ended >= 0.9, "slow start ended at \(ended) s, the first test began at \(test) s")
        // Held at first, but the queue went away once a holder was proven and slow start grew:
        // the queue that ends it may be our own.
        let heldThenGrown = Self.latecomerTimeline(untrustedFor: 0.5, queueFrom: 0.003, noQueue: 0.45...0.8)
        (ended, test) = (try #require(heldThenGrown.slowStartEnded), try #require(heldThenGrown.firstTest))
        #expect(ended > 0.8, "slow start ended at \(ended) s, while there was no queue")
        #expect(test - ended >= 0.9, "slow start ended at \(ended) s, the first test began at \(test) s")
    }

    @Test("a fetch that competes tests again, and stops competing once the queue it finds is its own")
    func aCompetingFetchStopsOnceTheOtherFlowIsGone() {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        var now = Self.feedAnswering(
            &controller, from: .zero, seconds: 6, packet: &packet, queue: Self.anotherFlowsQueue)
        #expect(controller.competing)
        let found = controller.slowdownsFoundAnotherFlow
        // The other flow is gone; competing by TCP's rules, we keep the queue full ourselves, and it
        // never stays drained for a second. It drains only while we slow down.
        now = Self.feedAnswering(&controller, from: now, seconds: 15, packet: &packet) { t, slowingDown in
            slowingDown ? 0.061 : 0.060 + 0.030 + 0.010 * ((t * 3).truncatingRemainder(dividingBy: 1) < 0.8 ? 1 : -1)
        }
        #expect(!controller.competing, "still competing at \(now)")
        #expect(controller.slowdownsFoundAnotherFlow == found)
    }

    @Test(
        "a lone fetch whose own queue sits at the target drains it when it slows down, does not compete, and tests less often"
    )
    func aLoneFetchAtItsTargetStaysInDelayModeAndTestsLessOften() {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        // Our own queue: at the target while we send, gone while we slow down.
        _ = Self.feedAnswering(&controller, from: .zero, seconds: 60, packet: &packet) { t, slowingDown in
            t < 0.1 || slowingDown ? 0.001 : 0.025
        }
        #expect(!controller.competing)
        #expect(controller.slowdownsFoundAnotherFlow == 0)
        // Each test was checked by asking more, which brought no more.
        let gain = controller.lastProbeGain ?? .infinity
        #expect(gain < controller.settings.probeVerdict, "the probe brought \(gain)× what came before")
        // Spaced 10, 20, 40 s after the first (a second of queue before each): 3 or 4 in a minute.
        #expect((3...4).contains(controller.slowdowns), "\(controller.slowdowns) slowdowns")
    }

    /// The same lone fetch, closer to a real line: its own 20–30 ms queue drains only at ⅞ of the
    /// line's rate, half a round trip after it slows, and every sample carries 0–10 ms of jitter.
    /// The third of the target the verdict needs (8.3 ms) must not be taken for another flow.
    @Test("a lone fetch whose own queue drains slowly and jitters is not taken for another flow")
    func aLoneFetchWithAJitteryDrainDoesNotCompete() {
        var controller = Self.started(.foreground)
        var packet: UInt64 = 0
        var slowedAt: Double?
        var noise: UInt64 = 12345
        _ = Self.feedAnswering(&controller, from: .zero, seconds: 60, packet: &packet) { t, slowingDown in
            noise = noise &* 6364136223846793005 &+ 1442695040888963407
            let jitter = Double((noise >> 33) % 1000) / 1000 * 0.010
            guard t >= 0.1 else { return 0.001 }
            // Delay mode holds the queue about the target: 20 ms and the jitter over it.
            if !slowingDown { slowedAt = nil; return 0.020 + jitter }
            let since = t - (slowedAt ?? t)
            if slowedAt == nil { slowedAt = t }
            return max(0, 0.025 - max(0, since - 0.020) * 0.875) + jitter
        }
        #expect(controller.slowdowns >= 3, "\(controller.slowdowns) slowdowns")
        #expect(controller.slowdownsFoundAnotherFlow == 0)
        #expect(!controller.competing)
    }

    @Test func backgroundReplicationNeverSlowsDownToTest() {
        var controller = Self.started()
        var packet: UInt64 = 0
        _ = Self.feedAnswering(&controller, from: .zero, seconds: 10, packet: &packet) { t, _ in t < 0.1 ? 0 : 0.030 }
        #expect(controller.slowdowns == 0)
        #expect(!controller.competing)
    }
}
