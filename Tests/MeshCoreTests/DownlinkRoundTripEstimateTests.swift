import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.RoundTripEstimate`, `DeliveryRates` and `SlowdownSchedule`: the small
/// estimators without controller tests of their own.
@Suite struct DownlinkRoundTripEstimateTests {
    @Test("a round trip is never zero; a lower sample replaces it at once, a higher one once it is old")
    func theLowestSampleLately() {
        var estimate = DownlinkController.RoundTripEstimate(history: .seconds(10))
        let start = MeshInstant(nanoseconds: 1_000_000_000)
        let taken1 = estimate.add(.zero, now: start)
        #expect(!taken1 && estimate.value == nil)
        let taken2 = estimate.add(.milliseconds(40), now: start)
        #expect(taken2 && estimate.value == .milliseconds(40))
        let taken3 = estimate.add(.milliseconds(60), now: start + .seconds(9))
        #expect(!taken3)
        let taken4 = estimate.add(.milliseconds(30), now: start + .seconds(9))
        #expect(taken4 && estimate.value == .milliseconds(30))
        let taken5 = estimate.add(.milliseconds(60), now: start + .seconds(19))
        #expect(taken5 && estimate.value == .milliseconds(60))
    }
}
