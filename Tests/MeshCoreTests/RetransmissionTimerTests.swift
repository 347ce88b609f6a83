import MeshCore
import Testing

/// RFC 6298 vectors, worked by hand: SRTT, RTTVAR and RTO after each sample, clamping,
/// backoff, and Karn's rule as `ReliableSender` applies it.
@Suite("Retransmission timer (RFC 6298)")
struct RetransmissionTimerTests {
    static func ms(_ value: Double) -> Duration { .nanoseconds(Int64(value * 1_000_000)) }

    @Test("before any sample the timeout is the initial one")
    func initialTimeout() {
        let timer = RetransmissionTimer()
        #expect(timer.smoothed == nil)
        #expect(timer.timeout == .milliseconds(200))
        #expect(RetransmissionTimer(initial: .seconds(1)).timeout == .seconds(1))
    }

    @Test("first sample: SRTT = R, RTTVAR = R/2, RTO = SRTT + max(G, 4·RTTVAR)")
    func firstSample() {
        var timer = RetransmissionTimer()
        timer.sample(.milliseconds(100))
        #expect(timer.smoothed == .milliseconds(100))
        #expect(timer.variation == .milliseconds(50))
        #expect(timer.timeout == .milliseconds(300))
    }

    @Test("later samples: RTTVAR from the old SRTT with beta 1/4, then SRTT with alpha 1/8")
    func subsequentSamples() {
        var timer = RetransmissionTimer()
        timer.sample(.milliseconds(100))
        timer.sample(.milliseconds(60))
        // RTTVAR = 3/4·50 + 1/4·|100 − 60| = 47.5; SRTT = 7/8·100 + 1/8·60 = 95; RTO = 95 + 4·47.5 = 285.
        #expect(timer.variation == Self.ms(47.5))
        #expect(timer.smoothed == .milliseconds(95))
        #expect(timer.timeout == .milliseconds(285))
        timer.sample(.milliseconds(175))
        // RTTVAR = 3/4·47.5 + 1/4·|95 − 175| = 55.625; SRTT = 7/8·95 + 1/8·175 = 105; RTO = 105 + 222.5.
        #expect(timer.variation == Self.ms(55.625))
        #expect(timer.smoothed == .milliseconds(105))
        #expect(timer.timeout == Self.ms(327.5))
    }

    @Test("the clock granularity G bounds the variance term from below")
    func granularityTerm() {
        var timer = RetransmissionTimer(minimum: .zero, granularity: .milliseconds(1))
        // A steady 10 ms path: RTTVAR decays towards zero, so RTO tends to SRTT + G.
        for _ in 0..<80 { timer.sample(.milliseconds(10)) }
        #expect(timer.smoothed == .milliseconds(10))
        #expect(timer.variation < .microseconds(250))
        #expect(timer.timeout == .milliseconds(11))
        var coarse = RetransmissionTimer(minimum: .zero, granularity: .milliseconds(50))
        coarse.sample(.milliseconds(8))  // 4·RTTVAR = 16 ms < G = 50 ms
        #expect(coarse.timeout == .milliseconds(58))
    }

    @Test("the RTO is clamped to the minimum and the maximum")
    func clamping() {
        var fast = RetransmissionTimer()
        fast.sample(.microseconds(100))  // 0.1 + max(1, 0.2) = 1.1 ms → floor of 10 ms
        #expect(fast.smoothed == .microseconds(100))
        #expect(fast.timeout == .milliseconds(10))
        var slow = RetransmissionTimer()
        slow.sample(.seconds(3))  // 3 + 4·1.5 = 9 s → ceiling of 5 s
        #expect(slow.timeout == .seconds(5))
        var custom = RetransmissionTimer(initial: .seconds(1), minimum: .milliseconds(20), maximum: .milliseconds(500))
        custom.sample(.milliseconds(1))
        #expect(custom.timeout == .milliseconds(20))
        custom.sample(.seconds(2))
        #expect(custom.timeout == .milliseconds(500))
    }

    @Test("a negative sample counts as zero")
    func negativeSample() {
        var timer = RetransmissionTimer(minimum: .zero)
        timer.sample(.milliseconds(-30))
        #expect(timer.smoothed == .zero)
        #expect(timer.variation == .zero)
        #expect(timer.timeout == .milliseconds(1))  // G
    }

    @Test("each expiry doubles the timeout up to the maximum; a new sample resets the backoff")
    func backoff() {
        var timer = RetransmissionTimer()
        timer.backOff()
        #expect(timer.timeout == .milliseconds(400), "backoff applies before any sample too")
        timer.sample(.milliseconds(100))
        #expect(timer.backoffs == 0)
        #expect(timer.timeout == .milliseconds(300))
        var seen: [Duration] = []
        for _ in 0..<8 {
            timer.backOff()
            seen.append(timer.timeout)
        }
        #expect(seen == [600, 1200, 2400, 4800, 5000, 5000, 5000, 5000].map { .milliseconds($0) })
        #expect(timer.backoffs == 5, "backoff stops counting at the maximum")
        timer.sample(.milliseconds(100))
        // RTTVAR = 3/4·50 + 0 = 37.5, SRTT = 100: RTO = 250, with no backoff left.
        #expect(timer.backoffs == 0)
        #expect(timer.timeout == .milliseconds(250))
    }

    // MARK: Karn's rule, through the sender

    @Test("a clean acknowledgement gives the sender an RTT sample")
    func senderSamplesCleanAck() {
        var sender = ReliableSender()
        let start = MeshInstant(nanoseconds: 1_000_000_000)
        sender.enqueue(messageID: 1, payload: [1, 2, 3], fragmentSize: 1000)
        #expect(sender.nextFrames(budget: 1200, now: start).count == 1)
        #expect(sender.timerDeadline == start + .milliseconds(200))
        let completed = sender.onAck(DeliveryAck(cumulative: 1, window: 1 << 20), now: start + .milliseconds(40))
        #expect(completed == [1])
        #expect(sender.timer.smoothed == .milliseconds(40))
        #expect(sender.timer.timeout == .milliseconds(120))
        #expect(sender.timerDeadline == nil, "nothing in flight, no timer")
    }

    @Test("Karn: the ack of a retransmitted chunk gives no sample and keeps the backoff")
    func karn() throws {
        var sender = ReliableSender()
        var now = MeshInstant(nanoseconds: 1_000_000_000)
        sender.enqueue(messageID: 1, payload: [1], fragmentSize: 1000)
        _ = sender.nextFrames(budget: 1200, now: now)
        now = now + .milliseconds(100)
        _ = sender.onAck(DeliveryAck(cumulative: 1, window: 1 << 20), now: now)
        #expect(sender.timer.smoothed == .milliseconds(100))
        let before = sender.timer

        // The second message's first transmission is lost; the timer (RTO 300 ms) expires.
        sender.enqueue(messageID: 2, payload: [2], fragmentSize: 1000)
        #expect(sender.nextFrames(budget: 1200, now: now) == [.data(DataChunk(tsn: 2, flags: 3, body: [2]))])
        let deadline = try #require(sender.timerDeadline)
        #expect(deadline == now + .milliseconds(300))
        sender.onTimeout(now: deadline + .milliseconds(-1))
        #expect(sender.nextFrames(budget: 1200, now: deadline + .milliseconds(-1)).isEmpty, "not yet due")
        now = deadline
        sender.onTimeout(now: now)
        #expect(sender.timer.backoffs == 1)
        #expect(sender.nextFrames(budget: 1200, now: now) == [.data(DataChunk(tsn: 2, flags: 3, body: [2]))])
        #expect(sender.retransmissions == 1)
        #expect(sender.timerDeadline == now + .milliseconds(600), "the backed-off timeout guards the retransmission")

        // Its ack comes 10 ms after the retransmission (310 ms after the first send): whichever
        // transmission it answers, it must not be measured.
        now = now + .milliseconds(10)
        #expect(sender.onAck(DeliveryAck(cumulative: 2, window: 1 << 20), now: now) == [2])
        #expect(sender.timer.smoothed == before.smoothed)
        #expect(sender.timer.variation == before.variation)
        #expect(sender.timer.backoffs == 1, "no sample, so the backoff stays (RFC 6298 §5.7)")

        // The next clean sample is taken and clears the backoff.
        sender.enqueue(messageID: 3, payload: [3], fragmentSize: 1000)
        _ = sender.nextFrames(budget: 1200, now: now)
        now = now + .milliseconds(100)
        _ = sender.onAck(DeliveryAck(cumulative: 3, window: 1 << 20), now: now)
        #expect(sender.timer.backoffs == 0)
        #expect(sender.timer.smoothed == .milliseconds(100))
        #expect(sender.timer.variation == Self.ms(37.5))
    }
}
