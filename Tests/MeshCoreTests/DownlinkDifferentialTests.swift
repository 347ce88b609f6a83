import Foundation
import MeshCrypto
import MeshTestKit
import Testing
@testable import MeshCore

/// Temporary, for the reshaping of `DownlinkController` only: the reshaped controller and a frozen
/// copy of the one before it are driven by the same long seeded sequences of inputs from a crude
/// line model (a bottleneck with its own queue, another flow's queue that comes and goes, random
/// loss and overflow, unproven holders, pauses, priority changes, lying packet numbers), and
/// everything they show must be equal after every step.
@Suite struct DownlinkDifferentialTests {
    /// Everything either controller shows, and what the last call returned.
    struct Snapshot: Equatable, CustomStringConvertible {
        var values: [String]
        var description: String { values.joined(separator: " ") }
    }

    static func snapshot(_ c: DownlinkController, returned: Bool?) -> Snapshot {
        Snapshot(values: [
            "rate=\(c.rate)", "budget=\(c.inFlightBudget)", "slowStart=\(c.slowStart)", "competing=\(c.competing)",
            "competingSlowStart=\(c.competingSlowStart)", "slowingDown=\(c.isSlowingDown)", "probing=\(c.isProbing)",
            "priority=\(c.priority)", "roundTrip=\(String(describing: c.roundTrip))", "target=\(c.target)",
            "lossy=\(c.isLossyLine)", "cap=\(String(describing: c.backgroundCap))", "queue=\(c.queueingDelay)",
            "last=\(c.lastInterval)", "backoffs=\(c.lossBackoffs)", "slowdowns=\(c.slowdowns)",
            "found=\(c.slowdownsFoundAnotherFlow)", "lowest=\(String(describing: c.lastSlowdownLowest))",
            "probeGain=\(String(describing: c.lastProbeGain))",
            "unproven=\(String(describing: c.lastUnprovenQueue))", "interval=\(c.interval)",
            "assumed=\(c.assumedRoundTrip)", "deadline=\(String(describing: c.nextDeadline))",
            "returned=\(String(describing: returned))",
        ])
    }

    static func snapshot(_ c: LegacyDownlinkController, returned: Bool?) -> Snapshot {
        Snapshot(values: [
            "rate=\(c.rate)", "budget=\(c.inFlightBudget)", "slowStart=\(c.slowStart)", "competing=\(c.competing)",
            "competingSlowStart=\(c.competingSlowStart)", "slowingDown=\(c.isSlowingDown)", "probing=\(c.isProbing)",
            "priority=\(c.priority)", "roundTrip=\(String(describing: c.roundTrip))", "target=\(c.target)",
            "lossy=\(c.isLossyLine)", "cap=\(String(describing: c.backgroundCap))", "queue=\(c.queueingDelay)",
            "last=\(c.lastInterval)", "backoffs=\(c.lossBackoffs)", "slowdowns=\(c.slowdowns)",
            "found=\(c.slowdownsFoundAnotherFlow)", "lowest=\(String(describing: c.lastSlowdownLowest))",
            "probeGain=\(String(describing: c.lastProbeGain))",
            "unproven=\(String(describing: c.lastUnprovenQueue))", "interval=\(c.interval)",
            "assumed=\(c.assumedRoundTrip)", "deadline=\(String(describing: c.nextDeadline))",
            "returned=\(String(describing: returned))",
        ])
    }

    /// The two controllers side by side; every call goes to both and is compared.
    struct Pair {
        var new: DownlinkController
        var old: LegacyDownlinkController
        var steps = 0
        var mismatch: String?
        /// Steps seen in each phase, to show the inputs reached them all.
        var seen: [String: Int] = [:]

        init(settings: DownlinkController.Settings) {
            new = DownlinkController(settings: settings)
            old = LegacyDownlinkController(settings: settings)
        }

        mutating func check(_ what: String, new returnedNew: Bool?, old returnedOld: Bool?) {
            steps += 1
            let a = DownlinkDifferentialTests.snapshot(new, returned: returnedNew)
            let b = DownlinkDifferentialTests.snapshot(old, returned: returnedOld)
            if a != b, mismatch == nil {
                let diff = zip(a.values, b.values).filter { $0 != $1 }.map { "new \($0) old \($1)" }
                mismatch = "step \(steps) (\(what)): " + diff.joined(separator: "; ")
            }
            for (name, on) in [("slowStart", old.slowStart), ("competing", old.competing),
                               ("competingSlowStart", old.competingSlowStart), ("slowdown", old.isSlowingDown),
                               ("probe", old.isProbing), ("lossy", old.isLossyLine), ("cap", old.backgroundCap != nil),
                               ("backoff", old.lossBackoffs > 0), ("unproven", old.lastUnprovenQueue != nil),
                               ("foundAnother", old.slowdownsFoundAnotherFlow > 0), ("probeGain", old.lastProbeGain != nil)]
            where on { seen[name, default: 0] += 1 }
        }

        mutating func datagram(_ holder: NodeID, _ number: UInt64, piece: Bool) {
            new.onDatagram(from: holder, packetNumber: number, carriesPiece: piece)
            old.onDatagram(from: holder, packetNumber: number, carriesPiece: piece)
            check("datagram", new: nil, old: nil)
        }

        mutating func piece(_ bytes: Int, sentAt: UInt32, from holder: NodeID, now: MeshInstant, trusted: Bool) {
            let a = new.onPiece(bytes: bytes, sentAt: sentAt, from: holder, now: now, trusted: trusted)
            let b = old.onPiece(bytes: bytes, sentAt: sentAt, from: holder, now: now, trusted: trusted)
            check("piece", new: a, old: b)
        }

        mutating func roundTrip(_ sample: Duration, now: MeshInstant) {
            let a = new.onRoundTrip(sample, now: now)
            let b = old.onRoundTrip(sample, now: now)
            check("roundTrip", new: a, old: b)
        }

        mutating func tick(now: MeshInstant) {
            new.onTick(now: now)
            old.onTick(now: now)
            check("tick", new: nil, old: nil)
        }

        mutating func priority(_ priority: DownlinkController.Priority) {
            new.setPriority(priority)
            old.setPriority(priority)
            check("priority", new: nil, old: nil)
        }

        mutating func remove(_ holder: NodeID) {
            new.removeHolder(holder)
            old.removeHolder(holder)
            check("remove", new: nil, old: nil)
        }

        /// Ticks at every deadline up to `now`, as the node's timer does.
        mutating func advance(to now: MeshInstant) {
            var guardCount = 0
            while let deadline = old.nextDeadline, deadline <= now, guardCount < 100 {
                tick(now: deadline)
                guardCount += 1
            }
        }
    }

    /// One seeded run: a line of random capacity and path, regimes changing every few seconds.
    static func run(seed: UInt64, seconds: Double) -> Pair {
        var rng = SeededGenerator(seed: seed)
        var settings = DownlinkController.Settings()
        if rng.chance(0.3) { settings.minimumInterval = .milliseconds(5 + Int(rng.next(below: 30))) }
        if rng.chance(0.2) { settings.probeGain = 1 }
        var pair = Pair(settings: settings)
        let holders = (0..<3).map { NodeID(high: seed, low: UInt64($0) + 1) }
        let offsets = holders.map { _ in UInt32(truncatingIfNeeded: rng.next()) }
        var packets = holders.map { _ in UInt64(rng.next(below: 1 << 40)) }
        let provenAt = holders.map { _ in rng.chance(0.3) ? 0 : rng.nextDouble() * 4 }
        var now = MeshInstant(nanoseconds: rng.next(below: 1 << 40))
        let startedAt = now
        var capacity = 1e5 * (1 + rng.nextDouble() * 150)
        var oneWay = 0.001 + rng.nextDouble() * 0.08
        var lossRate = 0.0
        var otherFlow = false
        var queue = 0.0
        let queueLimit = 0.03 + rng.nextDouble() * 0.12
        var asked: [(at: Double, rate: Double)] = []
        var nextRegime = 0.0, nextRoundTrip = 0.0
        if rng.chance(0.7) { pair.priority(rng.chance(0.6) ? .foreground : .background) }
        while pair.mismatch == nil {
            let t = Double(now.nanoseconds - startedAt.nanoseconds) / 1e9
            guard t < seconds else { break }
            if t >= nextRegime {
                nextRegime = t + 0.5 + rng.nextDouble() * 6
                if rng.chance(0.4) { otherFlow.toggle() }
                if rng.chance(0.3) { lossRate = [0, 0, 0.002, 0.005, 0.02, 0.08][Int(rng.next(below: 6))] }
                if rng.chance(0.15) { capacity = 1e5 * (1 + rng.nextDouble() * 150) }
                if rng.chance(0.1) { oneWay = 0.001 + rng.nextDouble() * 0.08 }
                if rng.chance(0.3) { pair.priority(rng.chance(0.6) ? .foreground : .background) }
                if rng.chance(0.08) { pair.remove(holders[Int(rng.next(below: 3))]) }
                if rng.chance(0.1) {
                    // A pause: the node's timer still fires at every deadline.
                    let gap = 0.2 + rng.nextDouble() * 4
                    let resume = now + .seconds(gap)
                    pair.advance(to: resume)
                    now = resume
                    queue = 0
                    continue
                }
            }
            let rtt = 2 * oneWay + queue
            // What the holders send: the rate asked about a round trip ago.
            asked.append((t, pair.old.rate))
            while asked.count > 1, asked[1].at <= t - rtt { asked.removeFirst() }
            let sending = asked[0].rate
            let available = otherFlow ? capacity * sending / (sending + capacity * 0.8) : capacity
            let arriving = queue > 0 ? available : min(sending, available)
            let bytes = max(200, min(64_000, Int(arriving * 0.002)))
            let dt = Double(bytes) / max(arriving, 1000)
            queue = min(queueLimit, max(0, queue + (sending - available) / capacity * dt))
            let overflowing = queue >= queueLimit && sending > available
            let otherQueue = otherFlow ? 0.01 + 0.04 * abs(sin(t * 1.7)) : 0
            now = now + .seconds(dt)
            pair.advance(to: now)
            if rng.chance(0.01) { pair.tick(now: now) }
            if t >= nextRoundTrip {
                nextRoundTrip = t + 0.01 + rng.nextDouble() * 0.1
                let sample = rng.chance(0.02) ? .zero : Duration.seconds(rtt + otherQueue + rng.nextDouble() * 0.005)
                pair.roundTrip(sample, now: now)
            }
            let index = Int(rng.next(below: 3))
            let holder = holders[index]
            let lost = rng.chance(lossRate) || (overflowing && rng.chance(0.3))
            packets[index] += lost ? 1 + rng.next(below: 3) : 1
            if rng.chance(0.003) { packets[index] += 2000 + rng.next(below: 5000) }
            let late = rng.chance(0.01) && packets[index] > 3
            let number = late ? packets[index] - 2 : packets[index]
            let carries = !rng.chance(0.05)
            pair.datagram(holder, number, piece: carries)
            guard carries else { continue }
            let delay = oneWay + queue + otherQueue + rng.nextDouble() * 0.002
            let ours = UInt32(truncatingIfNeeded: now.nanoseconds / 1000)
            let sentAt = ours &- UInt32(delay * 1e6) &+ offsets[index]
            let trusted = t >= provenAt[index] && !rng.chance(0.02)
            pair.piece(bytes, sentAt: sentAt, from: holder, now: now, trusted: trusted)
        }
        return pair
    }

    @Test("the reshaped controller shows exactly what the one before it did, step by step, for many seeds")
    func sameInputsSameOutputs() {
        var steps = 0
        var seen: [String: Int] = [:]
        for seed in SimulationSeeds.from(defaultCount: 40) {
            let pair = Self.run(seed: seed, seconds: 40)
            steps += pair.steps
            seen.merge(pair.seen, uniquingKeysWith: +)
            #expect(pair.mismatch == nil, "\(SimulationSeeds.replay(seed)): \(pair.mismatch ?? "")")
            if pair.mismatch != nil { break }
        }
        print("downlink differential: \(steps) steps; phases seen: \(seen.sorted { $0.key < $1.key })")
        for phase in ["slowStart", "competing", "competingSlowStart", "slowdown", "probe", "lossy", "cap", "backoff",
                      "unproven", "foundAnother", "probeGain"] {
            #expect(seen[phase, default: 0] > 0, "no step reached \(phase)")
        }
    }
}
