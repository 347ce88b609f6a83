import MeshCrypto
import Testing
@testable import MeshCore

/// What a node carries for others (`RelayService`): only when it relays and reaches the target,
/// within each pair's rate and its own, with refusals that cannot be made into a flood.
@Suite struct RelayServiceTests {
    static let a = NodeID(high: 0, low: 1)
    static let b = NodeID(high: 0, low: 2)
    static let c = NodeID(high: 0, low: 3)
    static let start = MeshInstant.zero + .seconds(100)

    @Test func aPairGetsItsBurstThenItsRateAndNoMore() {
        var settings = RelayService.Settings()
        settings.pairRate = 100_000
        settings.pairBurst = 10_000
        var relay = RelayService(settings: settings)
        var forwarded = 0
        for _ in 0..<20 where relay.admit(1000, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .forward {
            forwarded += 1
        }
        #expect(forwarded == 10, "the burst, at once")
        // A second later: the rate's worth (100 datagrams of 1,000 bytes), capped at the burst.
        var later = 0
        for _ in 0..<200 where relay.admit(1000, from: Self.a, to: Self.b, reachable: true, now: Self.start + .seconds(1)) == .forward {
            later += 1
        }
        #expect(later == 10)
        // Another pair is not held back by the first one's use.
        #expect(relay.admit(1000, from: Self.c, to: Self.b, reachable: true, now: Self.start + .seconds(1)) == .forward)
        #expect(relay.counters.forwardedDatagrams == 21)
        #expect(relay.counters.forwardedBytes == 21_000)
        #expect(relay.counters.droppedOverRate == 200)
    }

    @Test func theRelaysOwnRateCapsEveryPairTogether() {
        var settings = RelayService.Settings()
        settings.pairBurst = 10_000
        settings.totalBurst = 15_000
        settings.totalRate = 1
        var relay = RelayService(settings: settings)
        var forwarded = 0
        for pair in [(Self.a, Self.b), (Self.b, Self.a), (Self.c, Self.a)] {
            for _ in 0..<10 where relay.admit(1000, from: pair.0, to: pair.1, reachable: true, now: Self.start) == .forward {
                forwarded += 1
            }
        }
        #expect(forwarded == 15)
    }

    @Test func aRelayThatCarriesAllItCanRefusesNewPairsAndKeepsItsOwn() {
        var settings = RelayService.Settings()
        settings.totalBurst = 8000
        settings.totalRate = 1000
        var relay = RelayService(settings: settings)
        // One pair takes nearly all the relay's room.
        for _ in 0..<7 { _ = relay.admit(1000, from: Self.a, to: Self.b, reachable: true, now: Self.start) }
        #expect(relay.admit(100, from: Self.c, to: Self.b, reachable: true, now: Self.start) == .refuse(.busy, answer: true))
        // The pair it carries goes on within what is left; once room comes back, a new pair is taken.
        #expect(relay.admit(500, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .forward)
        #expect(relay.admit(100, from: Self.c, to: Self.b, reachable: true, now: Self.start + .seconds(8)) == .forward)
    }

    @Test func refusalsAreAnsweredOnceASecondPerPair() {
        var settings = RelayService.Settings()
        settings.enabled = false
        var relay = RelayService(settings: settings)
        #expect(relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start) == .refuse(.disabled, answer: true))
        #expect(relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start + .milliseconds(500))
            == .refuse(.disabled, answer: false))
        #expect(relay.admit(100, from: Self.c, to: Self.b, reachable: true, now: Self.start + .milliseconds(500))
            == .refuse(.disabled, answer: true))
        #expect(relay.admit(100, from: Self.a, to: Self.b, reachable: true, now: Self.start + .seconds(1))
            == .refuse(.disabled, answer: true))
        var open = RelayService()
        #expect(open.admit(100, from: Self.a, to: Self.b, reachable: false, now: Self.start) == .refuse(.unreachable, answer: true))
        #expect(open.counters.refused == 1 && open.counters.forwardedDatagrams == 0)
    }

    @Test func trackedPairsAreBounded() {
        var settings = RelayService.Settings()
        settings.maxPairs = 8
        var relay = RelayService(settings: settings)
        for low in 0..<100 {
            _ = relay.admit(100, from: NodeID(high: 1, low: UInt64(low)), to: Self.b, reachable: true,
                            now: Self.start + .milliseconds(low))
            _ = relay.admit(100, from: NodeID(high: 2, low: UInt64(low)), to: Self.b, reachable: false,
                            now: Self.start + .milliseconds(low))
        }
        #expect(relay.trackedPairs <= 8)
        relay.forget(Self.b)
        #expect(relay.trackedPairs == 0)
    }
}
