import MeshCrypto
import Testing
@testable import MeshCore

/// What a node carries for others (`RelayService`): only when it relays and reaches the target,
/// within its budget (the owner's, or twice what its links were measured to carry), shared among
/// the active pairs, yielding to its own transfers, with refusals that cannot be made into a flood.
@Suite struct RelayServiceTests {
    static let a = NodeID(high: 0, low: 1)
    static let b = NodeID(high: 0, low: 2)
    static let c = NodeID(high: 0, low: 3)
    static let start = MeshInstant.zero + .seconds(100)

    static let mebibyte = 1 << 20

    /// The owner's budget of `rate`, bursts of `burst` whatever the rate, no floor per pair.
    static func owned(_ rate: Int, burst: Int) -> RelayService.Settings {
        var settings = RelayService.Settings()
        settings.budget = rate
        settings.minimumBurst = burst
        settings.burstTime = .zero
        settings.minimumPairRate = 1
        return settings
    }

    /// `bytes` of own transfers sent (and received) by `at`, as the node's counters say.
    static func own(sent: Int, received: Int = 0) -> RelayService.OwnTraffic {
        RelayService.OwnTraffic(sent: UInt64(sent), received: UInt64(received))
    }

    /// Within a percent: the measured capacity decays a little at every interval.
    static func near(_ value: Int, _ expected: Int) -> Bool {
        abs(Double(value) - Double(expected)) <= Double(expected) / 100
    }

    @Test func aPairGetsItsBurstThenTheBudgetsRateAndNoMore() {
        var relay = RelayService(settings: Self.owned(100_000, burst: 10_000))
        var forwarded = 0
        for _ in 0..<20 where relay.admit(1000, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .forward
        {
            forwarded += 1
        }
        #expect(forwarded == 10, "the burst, at once")
        // A second later: the rate's worth (100 datagrams of 1,000 bytes), capped at the burst.
        var later = 0
        for _ in 0..<200
        where relay.admit(1000, from: Self.a, to: Self.b, reachable: true, now: Self.start + .seconds(1)) == .forward {
            later += 1
        }
        #expect(later == 10)
        #expect(relay.counters.forwardedDatagrams == 20)
        #expect(relay.counters.forwardedBytes == 20_000)
        #expect(relay.counters.droppedOverRate == 200)
    }

    @Test func theRelaysBudgetCapsEveryPairTogether() {
        var relay = RelayService(settings: Self.owned(1, burst: 15_000))
        var forwarded = 0
        for pair in [(Self.a, Self.b), (Self.b, Self.a), (Self.c, Self.a)] {
            for _ in 0..<10
            where relay.admit(1000, from: pair.0, to: pair.1, reachable: true, now: Self.start) == .forward {
                forwarded += 1
            }
        }
        #expect(forwarded == 15)
    }

    @Test func aRelayThatCarriesAllItCanRefusesNewPairsAndKeepsItsOwn() {
        var relay = RelayService(settings: Self.owned(1000, burst: 8000))
        // One pair takes nearly all the relay's room.
        for _ in 0..<7 { _ = relay.admit(1000, from: Self.a, to: Self.b, reachable: true, now: Self.start) }
        #expect(
            relay.admit(100, from: Self.c, to: Self.b, reachable: true, now: Self.start) == .refuse(.busy, answer: true)
        )
        // The pair it carries goes on within what is left; once room comes back, a new pair is taken.
        #expect(relay.admit(500, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .forward)
        #expect(relay.admit(100, from: Self.c, to: Self.b, reachable: true, now: Self.start + .seconds(8)) == .forward)
    }

    @Test func activePairsShareTheBudgetAndAnIdleOneGivesItsShareBack() {
        var relay = RelayService(settings: Self.owned(100_000, burst: 1000))
        #expect(relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .forward)
        #expect(relay.currentBudget.perPair == 100_000, "one pair: the whole budget")
        #expect(relay.admit(100, from: Self.b, to: Self.a, reachable: true, now: Self.start) == .forward)
        #expect(relay.currentBudget.perPair == 50_000, "each direction is a pair of its own")
        #expect(relay.admit(100, from: Self.c, to: Self.a, reachable: true, now: Self.start) == .forward)
        #expect(relay.currentBudget.perPair == 33_333 && relay.currentBudget.total == 100_000)
        // Only a→b goes on; past `pairActive` the others' shares come back at the next interval.
        relay.observe(Self.own(sent: 0), now: Self.start)
        for step in 1...6 {
            let now = Self.start + .milliseconds(500 * step)
            _ = relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: now)
            relay.observe(Self.own(sent: 0), now: now)
        }
        #expect(relay.currentBudget.activePairs == 1)
        #expect(relay.currentBudget.perPair == 100_000)
    }

    @Test func aPairThatAsksLittleLeavesTheRestToTheOthers() {
        // Water filling: 12 among asks of 1, 2 and two without bound (each a quarter would be 3).
        #expect(RelayService.fairShare(of: 12, demands: [1, 2], unknown: 2) == 4.5)
        #expect(RelayService.fairShare(of: 12, demands: [1, 5, 9], unknown: 0) == 6)
        #expect(
            RelayService.fairShare(of: 12, demands: [1, 2], unknown: 0) == 11,
            "the larger may take all the other leaves")
        #expect(RelayService.fairShare(of: 12, demands: [], unknown: 0) == 12)
        // A fetch through the relay: its pieces one way, its wants (a trickle) the other.
        var relay = RelayService(settings: Self.owned(10 * Self.mebibyte, burst: 64 << 10))
        relay.observe(Self.own(sent: 0), now: Self.start)
        for millisecond in 0...500 {
            let now = Self.start + .milliseconds(millisecond)
            for _ in 0..<4 { _ = relay.admit(1277, from: Self.a, to: Self.b, reachable: true, now: now) }
            if millisecond % 10 == 0 { _ = relay.admit(100, from: Self.b, to: Self.a, reachable: true, now: now) }
            relay.observe(Self.own(sent: 0), now: now)
        }
        #expect(relay.currentBudget.activePairs == 2)
        #expect(
            relay.currentBudget.perPair > 9 * Self.mebibyte,
            "the wants leave the pieces nearly all: \(relay.currentBudget)")
    }

    @Test func withoutASettingTheBudgetIsTwiceTheMeasuredCapacityWithinItsBounds() {
        var relay = RelayService()
        let floor = RelayService.Settings().minimumBudget
        #expect(relay.currentBudget.total == floor, "nothing measured yet: the floor")
        #expect(relay.currentBudget.capacity == 0 && !relay.currentBudget.fromSetting)
        // Our own fetch brought 10 MiB in half a second: the links carry 20 MiB/s.
        relay.observe(Self.own(sent: 0), now: Self.start)
        relay.observe(Self.own(sent: 0, received: 10 * Self.mebibyte), now: Self.start + .milliseconds(500))
        #expect(relay.currentBudget.capacity == 20 * Self.mebibyte)
        // Once our own transfers stop, the pairs may have twice that.
        relay.observe(Self.own(sent: 0, received: 10 * Self.mebibyte), now: Self.start + .seconds(1))
        #expect(!relay.currentBudget.yielding)
        #expect(Self.near(relay.currentBudget.total, 40 * Self.mebibyte), "\(relay.currentBudget)")
        // A node that measured a fast line stops at the ceiling.
        var fast = RelayService()
        fast.observe(Self.own(sent: 0), now: Self.start)
        fast.observe(Self.own(sent: 1 << 30), now: Self.start + .milliseconds(500))
        fast.observe(Self.own(sent: 1 << 30), now: Self.start + .seconds(1))
        #expect(fast.currentBudget.total == RelayService.Settings().maximumBudget)
    }

    @Test func theOwnersSettingWinsOverTheMeasurement() {
        var settings = RelayService.Settings()
        settings.budget = 3 * Self.mebibyte
        var relay = RelayService(settings: settings)
        relay.observe(Self.own(sent: 0), now: Self.start)
        relay.observe(Self.own(sent: 50 * Self.mebibyte), now: Self.start + .milliseconds(500))
        relay.observe(Self.own(sent: 50 * Self.mebibyte), now: Self.start + .seconds(1))
        #expect(relay.currentBudget.total == 3 * Self.mebibyte && relay.currentBudget.fromSetting)
        #expect(Self.near(relay.currentBudget.capacity, 100 * Self.mebibyte), "still measured, for status")
    }

    @Test func pairsYieldToTheRelaysOwnTransfersButAreNeverStarved() {
        var relay = RelayService()
        let floor = RelayService.Settings().minimumPairRate
        // Measured at 20 MiB/s by our own transfers, which now take 15 MiB/s of it.
        relay.observe(Self.own(sent: 0), now: Self.start)
        relay.observe(Self.own(sent: 10 * Self.mebibyte), now: Self.start + .milliseconds(500))
        relay.observe(Self.own(sent: 10 * Self.mebibyte), now: Self.start + .seconds(1))
        relay.observe(Self.own(sent: 17_920 * 1024), now: Self.start + .milliseconds(1500))
        #expect(relay.currentBudget.yielding && relay.currentBudget.ownRate == 15 * Self.mebibyte)
        #expect(Self.near(relay.currentBudget.total, 5 * Self.mebibyte), "what the line leaves beside our own")
        // Our own transfers fill the line: the pairs keep their floor each.
        let busy = Self.start + .milliseconds(1500)
        #expect(relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: busy) == .forward)
        #expect(relay.admit(100, from: Self.b, to: Self.a, reachable: true, now: busy) == .forward)
        relay.observe(Self.own(sent: 28_160 * 1024), now: Self.start + .seconds(2))
        #expect(relay.currentBudget.total == 2 * floor && relay.currentBudget.perPair >= floor)
        // Our own transfers end: the pairs have the whole budget again.
        relay.observe(Self.own(sent: 28_160 * 1024), now: Self.start + .milliseconds(2500))
        #expect(!relay.currentBudget.yielding && Self.near(relay.currentBudget.total, 40 * Self.mebibyte))
        // With the owner's setting under what the line leaves, the setting holds.
        var settings = RelayService.Settings()
        settings.budget = 2 * Self.mebibyte
        var owned = RelayService(settings: settings)
        owned.observe(Self.own(sent: 0), now: Self.start)
        owned.observe(Self.own(sent: 10 * Self.mebibyte), now: Self.start + .milliseconds(500))
        owned.observe(Self.own(sent: 12_800 * 1024), now: Self.start + .seconds(1))
        #expect(
            owned.currentBudget.yielding && owned.currentBudget.total == 2 * Self.mebibyte,
            "\(owned.currentBudget)")
    }

    @Test func burstsScaleWithTheRate() {
        let relay = RelayService()
        let settings = relay.settings
        #expect(relay.burst(100 * Self.mebibyte) == 100 * Self.mebibyte / 4, "a quarter of a second")
        #expect(relay.burst(Self.mebibyte) == settings.minimumBurst)
        #expect(relay.burst(0) == 0, "no rate, no burst: a budget of nothing carries nothing")
        var nothing = RelayService(settings: Self.owned(0, burst: 1000))
        #expect(nothing.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .drop)
    }

    @Test func carriedTrafficThatFillsTheBudgetRaisesIt() {
        // A pair offers 12 MiB/s to a relay that measured nothing (8 MiB/s): within two
        // intervals what it carried is the measurement, and the budget grows past the offer.
        var relay = RelayService()
        let perMillisecond = 12 * Self.mebibyte / 1000
        var offered = 0, carried = 0
        for millisecond in 0..<3000 {
            let now = Self.start + .milliseconds(millisecond)
            relay.observe(Self.own(sent: 0), now: now)
            var left = perMillisecond
            while left > 0 {
                let size = min(1277, left)
                left -= size
                let verdict = relay.admit(size, from: Self.a, to: Self.b, reachable: true, now: now)
                if millisecond >= 2000 {
                    offered += size
                    if verdict == .forward { carried += size }
                }
            }
        }
        #expect(relay.currentBudget.total > 12 * Self.mebibyte, "\(relay.currentBudget)")
        #expect(carried == offered, "the last second carried whole: \(carried) of \(offered)")
    }

    @Test func theMeasuredCapacityIsForgottenByHalfEachHalfLife() {
        var relay = RelayService()
        relay.observe(Self.own(sent: 0), now: Self.start)
        relay.observe(Self.own(sent: 50 * Self.mebibyte), now: Self.start + .milliseconds(500))
        let halfLife = relay.settings.capacityHalfLife
        var now = Self.start + .milliseconds(500)
        while now < Self.start + .milliseconds(500) + halfLife {
            now = now + .milliseconds(500)
            relay.observe(Self.own(sent: 50 * Self.mebibyte), now: now)
        }
        let share = Double(relay.currentBudget.capacity) / Double(100 * Self.mebibyte)
        #expect(share > 0.45 && share < 0.55, "\(share)")
    }

    @Test func refusalsAreAnsweredOnceASecondPerPair() {
        var settings = RelayService.Settings()
        settings.enabled = false
        var relay = RelayService(settings: settings)
        #expect(
            relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start)
                == .refuse(.disabled, answer: true))
        #expect(
            relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start + .milliseconds(500))
                == .refuse(.disabled, answer: false))
        #expect(
            relay.admit(100, from: Self.c, to: Self.b, reachable: true, now: Self.start + .milliseconds(500))
                == .refuse(.disabled, answer: true))
        #expect(
            relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start + .seconds(1))
                == .refuse(.disabled, answer: true))
        var open = RelayService()
        #expect(
            open.admit(100, from: Self.a, to: Self.b, reachable: false, now: Self.start)
                == .refuse(.unreachable, answer: true))
        #expect(open.counters.refused == 1 && open.counters.forwardedDatagrams == 0)
    }

    @Test func trackedPairsAreBounded() {
        var settings = RelayService.Settings()
        settings.maxPairs = 8
        var relay = RelayService(settings: settings)
        for low in 0..<100 {
            _ = relay.admit(
                100, from: NodeID(high: 1, low: UInt64(low)), to: Self.b, reachable: true,
                now: Self.start + .milliseconds(low))
            _ = relay.admit(
                100, from: NodeID(high: 2, low: UInt64(low)), to: Self.b, reachable: false,
                now: Self.start + .milliseconds(low))
        }
        #expect(relay.trackedPairs <= 8)
        relay.forget(Self.b)
        #expect(relay.trackedPairs == 0)
    }
}
