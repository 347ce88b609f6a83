import MeshCrypto

/// What this node does as a relay (PROTOCOL.md §1d): which `relayForward`s it carries on, at
/// what rate per pair, and what it counted. It only ever sees sealed datagrams of two members
/// and their sizes; it decides from who sent, to whom, and how much. How much it carries in all
/// follows what its links were measured to carry (or its owner's budget), shared among the
/// pairs it carries, and shrinks while the node's own transfers use its links.
package struct RelayService: Sendable {
    package struct Settings: Sendable, Equatable {
        /// `--no-relay`: refuse every forward (and say so in our record).
        package var enabled = true
        /// The owner's budget (`--relay-budget`): bytes per second carried for all pairs together.
        /// Nil: `headroom` times what this node's links were measured to carry (`capacity`),
        /// within `minimumBudget...maximumBudget`. Zero carries nothing (every forward dropped).
        package var budget: Int?
        /// Until the links were measured, and never less without the owner's budget: a relay that
        /// never transferred anything itself must still carry enough to be measured by it.
        package var minimumBudget = 8 << 20
        package var maximumBudget = 1 << 30
        /// The budget is this many times the measured capacity: carried traffic that fills it is
        /// itself a measurement, so the budget grows until the links (and the pairs' congestion
        /// control, which meets their queue) stop the growth.
        package var headroom = 2.0
        /// Rates (own transfers up and down, what was carried) are measured over intervals of
        /// this; the best is kept as the capacity and forgotten by half every `capacityHalfLife`.
        package var measureInterval: Duration = .milliseconds(500)
        package var capacityHalfLife: Duration = .seconds(600)
        /// Own transfers over this rate (up or down) make the relay yield: the pairs share what the
        /// capacity leaves beside them, at least `minimumPairRate` each.
        package var ownTrafficActive = 64 << 10
        package var minimumPairRate = 256 << 10
        /// Each bucket's burst is its rate over this, at least `minimumBurst`. A pair's controller
        /// meets the budget as a policer (loss, no queue), and the shorter the burst, the more
        /// often its clumps are cut and the further under the budget it settles (PROTOCOL.md §1d).
        package var burstTime: Duration = .milliseconds(250)
        package var minimumBurst = 256 << 10
        /// A pair shares the budget while it forwarded within this.
        package var pairActive: Duration = .seconds(1)
        /// Refusals sent per pair: a sender learns it at once, a flood of forwards gets few answers.
        /// (A new pair is refused, `busy`, while less than a quarter of the total burst is left.)
        package var refusalInterval: Duration = .seconds(1)
        /// Pairs whose rate is tracked; the longest idle is forgotten past this (a full bucket).
        package var maxPairs = 1024

        package init() {}
    }

    package enum Verdict: Sendable, Equatable {
        case forward
        /// Over the pair's or the relay's rate: dropped, like a full queue would.
        case drop
        /// Not carried, and the sender told why (unless it was told within `refusalInterval`).
        case refuse(RelayRefusal.Reason, answer: Bool)
    }

    package struct Counters: Sendable, Equatable {
        package var forwardedDatagrams: UInt64 = 0
        package var forwardedBytes: UInt64 = 0
        package var droppedOverRate: UInt64 = 0
        package var refused: UInt64 = 0

        package init() {}
    }

    /// What the relay allows now, and what it is based on (for status and tests).
    package struct Budget: Sendable, Equatable {
        /// Bytes per second for all pairs together, and for each active pair.
        package var total: Int
        package var perPair: Int
        package var activePairs: Int
        /// The best rate measured on this node's links (own transfers up or down, or carried).
        package var capacity: Int
        /// The node's own transfers in the last interval, the larger direction; whether the relay
        /// yields to them now.
        package var ownRate: Int
        package var yielding: Bool
        /// Whether `total` is the owner's setting (before yielding), not the measured capacity's.
        package var fromSetting: Bool
    }

    /// Bytes this node sent and received for its own transfers (cumulative counters).
    package struct OwnTraffic: Sendable, Equatable {
        package var sent: UInt64
        package var received: UInt64

        package init(sent: UInt64, received: UInt64) {
            self.sent = sent
            self.received = received
        }
    }

    struct Pair: Hashable {
        var from: NodeID
        var to: NodeID
    }

    /// Bytes that may go now, filled at `rate` up to `burst` (a token bucket).
    struct Bucket {
        var level: Double
        var at: MeshInstant
        /// Bytes carried in the interval being measured (pair buckets only).
        var carried = 0

        mutating func refill(rate: Int, burst: Int, now: MeshInstant) {
            let elapsed = max(0, (now - at).milliseconds / 1000)
            level = min(Double(burst), level + elapsed * Double(rate))
            at = now
        }

        mutating func take(_ bytes: Int, rate: Int, burst: Int, now: MeshInstant) -> Bool {
            refill(rate: rate, burst: burst, now: now)
            guard level >= Double(bytes) else { return false }
            level -= Double(bytes)
            return true
        }
    }

    /// The interval being measured: when it began and the counters then.
    private struct Interval {
        var start: MeshInstant
        var own: OwnTraffic
        var carried: UInt64
    }

    package let settings: Settings
    package private(set) var counters = Counters()
    private var buckets: [Pair: Bucket] = [:]
    private var total: Bucket?
    private var refusedAt: [Pair: MeshInstant] = [:]
    private var interval: Interval?
    /// The best rate measured, decaying (bytes per second).
    private var capacity = 0.0
    /// The own traffic of the last closed interval, and when it closed.
    private var ownRate = 0.0
    private var ownRateAt = MeshInstant.zero
    /// What each pair that forwarded within `pairActive` carried in the last interval, times the
    /// headroom (room to grow), ascending; and pairs started since, whose demand is not known
    /// yet. Counted when an interval closes (new pairs at once): the share per pair, without a
    /// walk of every pair per datagram.
    private var demands: [Double] = []
    private var newPairs = 0
    private var activePairs: Int { demands.count + newPairs }
    /// The rates in force, recomputed when an interval closes or a pair starts.
    private var rates: Budget

    package init(settings: Settings = .init()) {
        self.settings = settings
        rates = Budget(
            total: 0, perPair: 0, activePairs: 0, capacity: 0, ownRate: 0, yielding: false,
            fromSetting: false)
        rates = budget(now: .zero)
    }

    /// The budget as it stands (the rates `admit` applies).
    package var currentBudget: Budget { rates }

    /// The node's own transfer counters at `now`: when an interval of `measureInterval` has
    /// passed, its rates are measured (own up and down, carried) and the budget recomputed.
    package mutating func observe(_ own: OwnTraffic, now: MeshInstant) {
        guard let open = interval else {
            interval = Interval(start: now, own: own, carried: counters.forwardedBytes)
            return
        }
        let elapsed = (now - open.start).milliseconds / 1000
        guard now >= open.start + settings.measureInterval, elapsed > 0 else { return }
        func rate(_ to: UInt64, _ from: UInt64) -> Double { to >= from ? Double(to - from) / elapsed : 0 }
        let up = rate(own.sent, open.own.sent), down = rate(own.received, open.own.received)
        let carried = rate(counters.forwardedBytes, open.carried)
        // Forgotten by half per half-life (linear per interval: intervals are short beside it).
        let halfLife = max(1, settings.capacityHalfLife.milliseconds / 1000)
        capacity *= max(0, 1 - 0.693 * elapsed / halfLife)
        capacity = max(capacity, up, down, carried)
        ownRate = max(up, down)
        ownRateAt = now
        demands = buckets.values.filter { now - $0.at <= settings.pairActive }
            .map { Double($0.carried) / elapsed * settings.headroom }.sorted()
        newPairs = 0
        buckets = buckets.mapValues { bucket in
            var bucket = bucket
            bucket.carried = 0
            return bucket
        }
        interval = Interval(start: now, own: own, carried: counters.forwardedBytes)
        rates = budget(now: now)
    }

    /// What the relay allows at `now` for all pairs and for each (see `Settings`); `admit`
    /// applies it as it stood when the last interval closed or a pair started.
    package func budget(now: MeshInstant) -> Budget {
        let measured = Int(min(capacity, Double(Int.max / 4)))
        // Own traffic of an interval long gone says nothing of now.
        let own = now <= ownRateAt + settings.measureInterval * 2 ? Int(ownRate) : 0
        let yielding = own > settings.ownTrafficActive
        var total: Int
        if let owner = settings.budget {
            total = max(0, owner)
        } else {
            let grown = Double(measured) * settings.headroom
            total = Int(min(Double(settings.maximumBudget), max(Double(settings.minimumBudget), grown)))
        }
        let pairs = max(1, activePairs)
        if yielding, total > 0 {
            // What the links carried at best, less what our own transfers take of it now; never
            // so little that a pair starves (its congestion control needs deliveries to measure).
            let line = max(measured, own)
            let floor = min(total, settings.minimumPairRate * pairs)
            total = max(floor, min(total, line - own))
        }
        let share = Self.fairShare(of: Double(total), demands: demands, unknown: newPairs)
        let perPair = total == 0 ? 0 : max(Int(share), total / pairs, min(total, settings.minimumPairRate))
        return Budget(
            total: total, perPair: perPair, activePairs: activePairs, capacity: measured, ownRate: own,
            yielding: yielding, fromSetting: settings.budget != nil)
    }

    /// Max-min fairness (water filling): the rate each pair may have so that pairs that ask less
    /// (`demands`, ascending) have what they ask and the rest share what they leave equally;
    /// `unknown` pairs ask without bound. With every pair under its share, the one that asks most
    /// may have all the others leave (the reverse direction of a fetch, its wants, asks little).
    static func fairShare(of total: Double, demands: [Double], unknown: Int) -> Double {
        let count = demands.count + unknown
        guard count > 0 else { return total }
        var remaining = total
        for (index, demand) in demands.enumerated() {
            let share = remaining / Double(count - index)
            if demand >= share { return share }
            remaining -= demand
        }
        if unknown > 0 { return remaining / Double(unknown) }
        return remaining + (demands.last ?? 0)
    }

    /// A bucket's burst at `rate`: `burstTime` of it, at least `minimumBurst` (none at no rate).
    func burst(_ rate: Int) -> Int {
        guard rate > 0 else { return 0 }
        return max(settings.minimumBurst, Int(Double(rate) * settings.burstTime.milliseconds / 1000))
    }

    /// `from` asks us to carry `bytes` to `to`; `reachable` says whether we reach `to` on a path
    /// of our own (not through another relay: relays are never chained).
    package mutating func admit(_ bytes: Int, from: NodeID, to: NodeID, reachable: Bool, now: MeshInstant) -> Verdict {
        let pair = Pair(from: from, to: to)
        guard settings.enabled else { return refuse(pair, .disabled, now: now) }
        guard reachable else { return refuse(pair, .unreachable, now: now) }
        let totalBurst = burst(rates.total)
        var all = total ?? Bucket(level: Double(totalBurst), at: now)
        if buckets[pair] == nil {
            // A new pair while the pairs we carry use (nearly) all we carry: it goes to a relay
            // with room, instead of taking a share of ours by losses.
            all.refill(rate: rates.total, burst: totalBurst, now: now)
            total = all
            if all.level < Double(totalBurst) / 4, totalBurst > 0 { return refuse(pair, .busy, now: now) }
            if buckets.count >= settings.maxPairs, let idle = buckets.min(by: { $0.value.at < $1.value.at }) {
                buckets[idle.key] = nil
            }
            // Its share at once: the pairs already carried give way from now on.
            newPairs += 1
            rates = budget(now: now)
        }
        let pairBurst = burst(rates.perPair)
        var bucket = buckets[pair] ?? Bucket(level: Double(pairBurst), at: now)
        defer { buckets[pair] = bucket; total = all }
        // The pair's own bucket first: an over-rate pair does not spend everyone's.
        guard bucket.take(bytes, rate: rates.perPair, burst: pairBurst, now: now) else {
            counters.droppedOverRate += 1
            return .drop
        }
        guard all.take(bytes, rate: rates.total, burst: burst(rates.total), now: now) else {
            bucket.level += Double(bytes)
            counters.droppedOverRate += 1
            return .drop
        }
        bucket.carried += bytes
        counters.forwardedDatagrams += 1
        counters.forwardedBytes += UInt64(bytes)
        return .forward
    }

    /// Not carried: the sender is told why, at most once per `refusalInterval` per pair.
    private mutating func refuse(_ pair: Pair, _ reason: RelayRefusal.Reason, now: MeshInstant) -> Verdict {
        counters.refused += 1
        let answer = refusedAt[pair].map { now >= $0 + settings.refusalInterval } ?? true
        if answer {
            if refusedAt.count >= settings.maxPairs {
                refusedAt = refusedAt.filter { now < $0.value + settings.refusalInterval }
            }
            if refusedAt.count >= settings.maxPairs, let oldest = refusedAt.min(by: { $0.value < $1.value }) {
                refusedAt[oldest.key] = nil
            }
            refusedAt[pair] = now
        }
        return .refuse(reason, answer: answer)
    }

    /// Pairs whose rate or refusals are tracked now.
    var trackedPairs: Int { max(buckets.count, refusedAt.count) }

    /// A member gone: its pairs are forgotten.
    package mutating func forget(_ member: NodeID) {
        buckets = buckets.filter { $0.key.from != member && $0.key.to != member }
        refusedAt = refusedAt.filter { $0.key.from != member && $0.key.to != member }
    }
}
