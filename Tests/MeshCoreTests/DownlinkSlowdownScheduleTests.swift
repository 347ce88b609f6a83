import MeshCrypto
import Testing
@testable import MeshCore

/// `DownlinkController.SlowdownSchedule`: when the next test of whose queue it is goes.
@Suite struct DownlinkSlowdownScheduleTests {
    static let start = MeshInstant(nanoseconds: 1_000_000_000)

    @Test("a test is due once the queue lasted a second, and starts the wait over")
    func aTestWaitsForALastingQueue() {
        var schedule = DownlinkController.SlowdownSchedule(settings: .init())
        let due1 = schedule.due(queued: true, now: Self.start)
        #expect(!due1)
        let due2 = schedule.due(queued: true, now: Self.start + .milliseconds(900))
        #expect(!due2)
        let due3 = schedule.due(queued: true, now: Self.start + .seconds(1))
        #expect(due3)
        #expect(schedule.queuedSince == nil)
        // A queue that fell starts the wait over too.
        let due4 = schedule.due(queued: true, now: Self.start + .seconds(2))
        #expect(!due4)
        let due5 = schedule.due(queued: false, now: Self.start + .milliseconds(2500))
        #expect(!due5)
        let due6 = schedule.due(queued: true, now: Self.start + .seconds(3))
        #expect(!due6)
    }

    @Test("the first own-queue verdict repeats at once; confirmed ones space out, doubling up to the limit")
    func ownQueueVerdictsSpaceOut() {
        var schedule = DownlinkController.SlowdownSchedule(settings: .init())
        var now = Self.start
        schedule.foundOwnQueue(now: now)
        #expect(schedule.nextAt == now && schedule.atOnceUntil == now + .seconds(2))
        let due7 = schedule.due(queued: true, now: now + .milliseconds(100))
        #expect(due7, "the repeat waited for the queue to last")
        var spacings: [Duration] = []
        for _ in 0..<6 {
            now = now + .seconds(60)
            schedule.foundOwnQueue(now: now)
            spacings.append(schedule.spacing)
            #expect(schedule.nextAt == now + schedule.spacing)
        }
        #expect(spacings == [.seconds(10), .seconds(20), .seconds(40), .seconds(40), .seconds(40), .seconds(40)])
        // Another flow's queue starts the spacing over, and the next own verdict repeats at once.
        schedule.foundAnotherFlow(now: now)
        #expect(schedule.spacing == .seconds(5) && schedule.nextAt == now + .seconds(10))
        schedule.foundOwnQueue(now: now)
        #expect(schedule.nextAt == now && schedule.spacing == .seconds(5))
    }

    @Test("a confirmed verdict (a probe agreed) spaces out at once; no verdict waits one spacing")
    func confirmedAndNoVerdicts() {
        var schedule = DownlinkController.SlowdownSchedule(settings: .init())
        schedule.foundOwnQueue(now: Self.start, confirmed: true)
        #expect(schedule.spacing == .seconds(10) && schedule.nextAt == Self.start + .seconds(10))
        schedule.noVerdict(now: Self.start)
        #expect(schedule.nextAt == Self.start + .seconds(10) && schedule.spacing == .seconds(10))
        schedule.testAtOnce(until: Self.start + .seconds(20))
        let due8 = schedule.due(queued: true, now: Self.start + .seconds(9))
        #expect(!due8, "at once, but not before the spacing")
        let due9 = schedule.due(queued: true, now: Self.start + .seconds(10))
        #expect(due9)
    }
}
