import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.LineRate`: the line's rate, from intervals that showed it full.
@Suite struct DownlinkLineRateTests {
    @Test("a rate counts once two intervals were seen, the more of them, and only until the refresh is due")
    func aMeasurementNeedsTwoIntervalsAndExpires() {
        var line = DownlinkController.LineRate(refresh: .seconds(30))
        let start = MeshInstant(nanoseconds: 1_000_000_000)
        line.measure(arrived: 1e6, now: start)
        #expect(line.rate(now: start) == nil)
        line.measure(arrived: 1.2e6, now: start + .milliseconds(50))
        #expect(line.rate(now: start + .seconds(1)) == 1.2e6)
        #expect(line.rate(now: nil) == 1.2e6)
        // Complete: later intervals do not move it until the refresh is due.
        line.measure(arrived: 0.3e6, now: start + .seconds(10))
        #expect(line.rate(now: start + .seconds(10)) == 1.2e6)
        #expect(line.rate(now: start + .seconds(31)) == nil)
        // Then a new measurement begins, from scratch.
        line.measure(arrived: 0.5e6, now: start + .seconds(31))
        #expect(line.rate(now: nil) == nil)
        line.measure(arrived: 0.4e6, now: start + .seconds(32))
        #expect(line.rate(now: start + .seconds(32)) == 0.5e6)
    }
}

extension DownlinkControllerTests {
    /// A TCP held down by random loss reaches four fifths of a home line between its losses and
    /// builds no queue to yield to until it is short already: on such a line, replication leaves
    /// it room, half of what the line gave when last measured (with a queue, every 30 s).
    @Test(
        "on a line that loses at random, replication asks at most half of what the line gave with a queue; a get is not capped"
    )
    func replicationOnALossyLineLeavesRoom() throws {
        var packet: UInt64 = 0
        // Slow start ends on a queue with 1 MB/s arriving: the line's rate.
        var (controller, now) = Self.outOfSlowStart(queue: 0.03, packet: &packet)
        #expect(controller.backgroundCap == nil, "capped before the line lost anything")
        now = Self.feed(&controller, from: now, seconds: 3, rate: 1e6, lossEvery: 200, packet: &packet) { _ in 0 }
        #expect(controller.isLossyLine)
        let cap = try #require(controller.backgroundCap)
        #expect(abs(cap - 0.5e6) < 0.05e6, "cap \(cap)")
        #expect(controller.rate <= 0.5e6 * 1.05, "rate \(controller.rate) over the cap")
        // A get on the same line is not capped, and grows with the room.
        var get = controller
        get.setPriority(.foreground)
        #expect(get.backgroundCap == nil)
        _ = Self.feed(&get, from: now, seconds: 1, rate: 1e6, lossEvery: 200, packet: &packet) { _ in 0 }
        #expect(get.rate > 0.6e6, "a get held at \(get.rate)")
        // Under the cap nothing is measured; once it is 30 s old the cap lifts, the rate grows
        // until a queue shows, and what arrives then is the line's rate from there on.
        now = Self.feed(&controller, from: now, seconds: 26, rate: 0.5e6, lossEvery: 200, packet: &packet) { _ in 0 }
        #expect(controller.rate <= 0.5e6 * 1.05, "rate \(controller.rate) over the cap")
        now = Self.feed(&controller, from: now, seconds: 2, rate: 0.5e6, lossEvery: 200, packet: &packet) { _ in 0 }
        #expect(controller.rate > 0.5e6 * 1.05, "the cap did not lift: \(controller.rate)")
        _ = Self.feed(&controller, from: now, seconds: 1, rate: 0.8e6, lossEvery: 200, packet: &packet) { _ in 0.008 }
        let measured = controller.backgroundCap ?? 0
        #expect(abs(measured - 0.4e6) < 0.05e6, "cap \(measured) after the line gave 0.8 MB/s")
        #expect(controller.rate <= measured * 1.05)
    }
}
