import MeshCrypto
import Testing
@testable import MeshCore

/// Careful resume, driven through a closed loop: what the controller asks arrives a round trip
/// later through a bottleneck of a given capacity and buffer. A start from idle over paths
/// measured before jumps only after a round trip of reconnaissance, to at most half the saved
/// rate, and retreats at the first loss or queue; expired knowledge, or another round trip,
/// brings no jump.
@Suite struct DownlinkCarefulResumeTests {
    static let holder = NodeID(high: 2, low: 2)

    /// A bottleneck ahead of the controller: the rate asked a round trip ago enters a queue that
    /// drains at `capacity`; what leaves arrives as 1,400-byte pieces stamped with the queue's
    /// delay; what would queue past `buffer` seconds is dropped (its packet numbers skipped).
    struct Line {
        var capacity: Double
        var buffer = 0.2
        var roundTrip = 0.05
        var queued = 0.0
        var credit = 0.0
        var packet: UInt64 = 0
        var asked: [Double] = []
        var dropped = 0
        var highestQueue = 0.0

        init(capacity: Double, buffer: Double = 0.2, roundTrip: Double = 0.05) {
            self.capacity = capacity
            self.buffer = buffer
            self.roundTrip = roundTrip
        }

        /// `seconds` of a fetch (or of silence when not `fetching`), in steps of a millisecond.
        @discardableResult
        mutating func run(
            _ controller: inout DownlinkController, from start: MeshInstant, seconds: Double,
            fetching: Bool = true
        ) -> MeshInstant {
            let step = 0.001, lag = Int(roundTrip / step)
            var now = start
            for index in 0..<Int((seconds / step).rounded()) {
                now = start + .seconds(Double(index) * step)
                asked.append(fetching ? controller.rate : 0)
                queued += asked.count > lag ? asked[asked.count - 1 - lag] * step : 0
                let out = min(queued, capacity * step)
                queued -= out
                var lost = 0
                if queued > capacity * buffer {
                    lost = Int(((queued - capacity * buffer) / 1400).rounded(.up))
                    queued = max(0, queued - Double(lost) * 1400)
                    dropped += lost
                }
                credit += out
                let delay = roundTrip / 2 + queued / capacity
                highestQueue = max(highestQueue, queued / capacity)
                while credit >= 1400 {
                    credit -= 1400
                    packet += 1 + UInt64(lost)
                    lost = 0
                    let sentAt = UInt32(truncatingIfNeeded: (now.nanoseconds / 1000) &- UInt64(delay * 1e6))
                    controller.onDatagram(from: holder, packetNumber: packet, carriesPiece: true)
                    controller.onPiece(bytes: 1400, sentAt: sentAt, from: holder, now: now)
                }
                controller.onTick(now: now)
            }
            return now + .seconds(step)
        }
    }

    static func saved(
        rate: Double, roundTrip: Duration = .milliseconds(50),
        at: MeshInstant = .zero
    ) -> SavedPathCapacity {
        SavedPathCapacity(rate: rate, roundTrip: roundTrip, savedAt: at)
    }

    /// A foreground controller offered `saved` and the round trip, its first round-trip sample in.
    static func offered(
        _ saved: SavedPathCapacity?, roundTrip: Duration = .milliseconds(50),
        now: MeshInstant = .zero
    ) -> DownlinkController {
        var controller = DownlinkController()
        controller.setPriority(.foreground)
        controller.offerResume(saved, probedRoundTrip: roundTrip, now: now)
        controller.onRoundTrip(roundTrip, now: now)
        return controller
    }

    @Test("with nothing known, the first rate is the initial window over the probed round trip, before any piece")
    func theFirstRateFollowsTheProbedRoundTrip() {
        var controller = DownlinkController()
        controller.offerResume(nil, probedRoundTrip: .milliseconds(50), now: .zero)
        // RFC 6928's ten datagrams per round trip are the floor; the window is 16.
        #expect(controller.rate >= 10 * 1400 / 0.05)
        #expect(abs(controller.rate - Double(controller.settings.initialWindow) / 0.05) < 1)
        #expect(controller.resumePhase == nil)
    }

    @Test("a resume jumps only after a round trip of reconnaissance, to at most half the saved rate, and validates")
    func jumpsAfterReconnaissanceToHalfTheSavedRate() {
        var controller = Self.offered(Self.saved(rate: 10e6))
        var line = Line(capacity: 12e6)
        let start = controller.rate
        var now = line.run(&controller, from: .zero, seconds: 0.08)
        #expect(controller.resumePhase == .reconnaissance)
        #expect(controller.rate == start, "moved before the reconnaissance ended: \(controller.rate)")
        now = line.run(&controller, from: now, seconds: 0.04)
        guard case .unvalidated(let jump) = controller.resumePhase else {
            Issue.record("no jump after the reconnaissance: \(String(describing: controller.resumePhase))")
            return
        }
        #expect(jump <= 10e6 * 0.5 && jump >= 10e6 * 0.49)
        #expect(controller.rate == jump)
        line.run(&controller, from: now, seconds: 1)
        #expect(controller.resumePhase == nil && controller.resumeJumps == 1 && controller.resumeRetreats == 0)
        #expect(controller.rate >= 5e6, "validated, it went on from the jump: \(controller.rate)")
        #expect(line.dropped == 0)
    }

    @Test("a line whose capacity dropped since: the first loss after the jump retreats below what arrives")
    func retreatsOnTheFirstLoss() {
        var controller = Self.offered(Self.saved(rate: 10e6))
        // A shallow buffer (10 ms): the jump, 5 MB/s into 1.5, overflows it as its queue shows.
        var line = Line(capacity: 1.5e6, buffer: 0.01)
        var now = line.run(&controller, from: .zero, seconds: 0.1)
        var lowest = Double.infinity
        while controller.resumeRetreats == 0, now < .zero + .seconds(1) {
            now = line.run(&controller, from: now, seconds: 0.001)
        }
        #expect(controller.resumeJumps == 1 && controller.resumeRetreats == 1)
        #expect(controller.resumePhase == nil && !controller.slowStart)
        for _ in 0..<1000 {
            now = line.run(&controller, from: now, seconds: 0.001)
            lowest = min(lowest, controller.rate)
        }
        #expect(controller.resumeRetreats == 1, "retreated more than once")
        #expect(lowest <= 1.5e6 * 0.75, "the retreat stayed over the line: \(lowest)")
        // What overflowed is at most the jump's excess over two round trips.
        #expect(Double(line.dropped * 1400) <= (5e6 - 1.5e6) * 0.1, "\(line.dropped) datagrams dropped")
    }

    @Test("a queue that grows after the jump retreats at once, before the buffer overflows")
    func retreatsOnQueueGrowth() {
        var controller = Self.offered(Self.saved(rate: 10e6))
        var line = Line(capacity: 3e6, buffer: 0.3)
        line.run(&controller, from: .zero, seconds: 1.5)
        #expect(controller.resumeJumps == 1 && controller.resumeRetreats == 1)
        #expect(line.dropped == 0)
        // The jump ran 2 MB/s over the line for about two round trips, then half of what arrived drained it.
        #expect(line.highestQueue < 0.15, "queue \(line.highestQueue) s")
        // Drained: what stands at the end is delay mode's own, at most the target (25 ms).
        #expect(line.queued <= 0.03 * line.capacity, "the retreat left a queue: \(line.queued / line.capacity) s")
    }

    @Test("saved knowledge past its lifetime brings no resume")
    func expiredKnowledgeIsNotUsed() {
        let lifetime = DownlinkController.Settings().resumeLifetime
        let now = MeshInstant.zero + lifetime + .seconds(1)
        var controller = Self.offered(Self.saved(rate: 10e6), now: now)
        var line = Line(capacity: 12e6)
        line.run(&controller, from: now, seconds: 0.5)
        #expect(controller.resumeJumps == 0 && controller.resumePhase == nil)
        // Just inside it, the same offer resumes.
        var fresh = Self.offered(Self.saved(rate: 10e6, at: .zero + .seconds(2)), now: now)
        var freshLine = Line(capacity: 12e6)
        freshLine.run(&fresh, from: now, seconds: 0.5)
        #expect(fresh.resumeJumps == 1)
    }

    @Test(
        "a round trip unlike the saved one (longer than twice, shorter than half) brings no jump",
        arguments: [150, 20])
    func anotherRoundTripBringsNoJump(milliseconds: Int) {
        let roundTrip = Duration.milliseconds(milliseconds)
        var controller = Self.offered(Self.saved(rate: 10e6), roundTrip: roundTrip)
        var line = Line(capacity: 12e6, roundTrip: Double(milliseconds) / 1000)
        #expect(controller.resumePhase == nil)
        // The phase begins with the first piece, a round trip after the first want.
        let first = line.run(&controller, from: .zero, seconds: line.roundTrip + 0.01)
        #expect(controller.resumePhase == .reconnaissance)
        line.run(&controller, from: first, seconds: 0.5)
        #expect(controller.resumeJumps == 0 && controller.resumePhase == nil)
    }

    @Test("after a pause the next fetch starts from the initial window, not the rate it had, unless resumed")
    func aPauseStartsOverFromTheInitialWindow() {
        var controller = Self.offered(nil)
        var line = Line(capacity: 12e6)
        var now = line.run(&controller, from: .zero, seconds: 1.5)
        #expect(controller.rate >= 6e6)
        now = line.run(&controller, from: now, seconds: 2, fetching: false)
        guard let saved = controller.capacityToSave(now: now) else {
            Issue.record("nothing to save after a fetch")
            return
        }
        #expect(saved.rate <= 12e6 * 1.05 && saved.rate >= 6e6, "\(saved.rate)")
        var unknown = controller
        unknown.offerResume(nil, probedRoundTrip: .milliseconds(50), now: now)
        #expect(unknown.rate <= Double(unknown.settings.initialWindow) / 0.05 + 1)
        controller.offerResume(saved, probedRoundTrip: .milliseconds(50), now: now)
        line.run(&controller, from: now, seconds: 0.07)
        #expect(controller.resumePhase == .reconnaissance)
    }
}

/// The node's store of what fetches reached: a path that changed (address, relay, boot) finds
/// nothing, and what expired is gone.
@Suite struct SavedPathCapacitiesTests {
    static let member = NodeID(high: 3, low: 3)
    static let relay = NodeID(high: 4, low: 4)

    @Test func aChangedPathFindsNothing() {
        let address = PeerAddress(ipv4: [192, 0, 2, 1], port: 7000)
        let moved = PeerAddress(ipv4: [192, 0, 2, 2], port: 7000)
        let path = SavedPathCapacities.HolderPath(member: Self.member, address: address, relay: nil, boot: 1)
        var store = SavedPathCapacities()
        let saved = SavedPathCapacity(rate: 1e6, roundTrip: .milliseconds(50), savedAt: .zero)
        store.save(saved, for: .init([path]))
        let lifetime = Duration.seconds(600)
        #expect(store.capacity(for: .init([path]), lifetime: lifetime, now: .zero + .seconds(1)) == saved)
        var other = path
        other.address = moved
        #expect(store.capacity(for: .init([other]), lifetime: lifetime, now: .zero) == nil)
        other = path
        other.relay = Self.relay
        #expect(store.capacity(for: .init([other]), lifetime: lifetime, now: .zero) == nil)
        other = path
        other.boot = 2
        #expect(store.capacity(for: .init([other]), lifetime: lifetime, now: .zero) == nil)
        #expect(store.capacity(for: .init([path]), lifetime: lifetime, now: .zero + lifetime) == nil)
        store.forgetExpired(lifetime: lifetime, now: .zero + lifetime)
        #expect(store.count == 0)
    }

    @Test func theStoreIsBounded() {
        var store = SavedPathCapacities()
        for index in 0..<(SavedPathCapacities.capacity + 5) {
            let path = SavedPathCapacities.HolderPath(
                member: NodeID(high: 9, low: UInt64(index)), address: nil,
                relay: nil, boot: 0)
            store.save(
                SavedPathCapacity(rate: 1, roundTrip: .milliseconds(1), savedAt: .zero + .seconds(index)),
                for: .init([path]))
        }
        #expect(store.count == SavedPathCapacities.capacity)
        let last = NodeID(high: 9, low: UInt64(SavedPathCapacities.capacity + 4))
        let newest = SavedPathCapacities.HolderPath(member: last, address: nil, relay: nil, boot: 0)
        #expect(store.capacity(for: .init([newest]), lifetime: .seconds(600), now: .zero) != nil)
    }
}
