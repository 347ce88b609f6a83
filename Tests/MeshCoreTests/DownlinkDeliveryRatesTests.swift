import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.DeliveryRates`: what arrived lately, and the rates it answers to.
@Suite struct DownlinkDeliveryRatesTests {
    @Test("deliveries answer to the rate asked two closes ago; the recent rate is the more of the last two")
    func deliveriesAnswerToTheOlderRate() {
        var rates = DownlinkController.DeliveryRates(rate: 100)
        #expect(rates.asked.older == 100 && rates.asked.newer == 100)
        rates.asked(200)
        rates.asked(300)
        #expect(rates.asked.older == 200 && rates.asked.newer == 300)
        rates.record(50)
        rates.record(40)
        #expect(rates.last == 40 && rates.previous == 50 && rates.recent == 50)
        rates.forget()
        #expect(rates.last == 0 && rates.previous == 0 && rates.asked.newer == 300)
    }
}
