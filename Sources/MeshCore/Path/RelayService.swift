import MeshCrypto

/// What this node does as a relay (PROTOCOL.md §1d): which `relayForward`s it carries on, at
/// what rate per pair, and what it counted. It only ever sees sealed datagrams of two members
/// and their sizes; it decides from who sent, to whom, and how much.
public struct RelayService: Sendable {
    public struct Settings: Sendable, Equatable {
        /// `--no-relay`: refuse every forward (and say so in our record).
        public var enabled = true
        /// Bytes per second one pair (one direction) may have carried, and the burst above it:
        /// one pair cannot take the relay's whole link.
        public var pairRate = 4 << 20
        public var pairBurst = 512 << 10
        /// Bytes per second carried for everyone together.
        public var totalRate = 32 << 20
        public var totalBurst = 2 << 20
        /// Refusals sent per pair: a sender learns it at once, a flood of forwards gets few answers.
        /// (A new pair is refused, `busy`, while less than a quarter of `totalBurst` is left.)
        public var refusalInterval: Duration = .seconds(1)
        /// Pairs whose rate is tracked; the longest idle is forgotten past this (a full bucket).
        public var maxPairs = 1024

        public init() {}
    }

    public enum Verdict: Sendable, Equatable {
        case forward
        /// Over the pair's or the relay's rate: dropped, like a full queue would.
        case drop
        /// Not carried, and the sender told why (unless it was told within `refusalInterval`).
        case refuse(RelayRefusal.Reason, answer: Bool)
    }

    public struct Counters: Sendable, Equatable {
        public var forwardedDatagrams: UInt64 = 0
        public var forwardedBytes: UInt64 = 0
        public var droppedOverRate: UInt64 = 0
        public var refused: UInt64 = 0

        public init() {}
    }

    struct Pair: Hashable {
        var from: NodeID
        var to: NodeID
    }

    /// Bytes that may go now, filled at `rate` up to `burst` (a token bucket).
    struct Bucket {
        var level: Double
        var at: MeshInstant

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

    public let settings: Settings
    public private(set) var counters = Counters()
    private var buckets: [Pair: Bucket] = [:]
    private var total: Bucket?
    private var refusedAt: [Pair: MeshInstant] = [:]

    public init(settings: Settings = .init()) {
        self.settings = settings
    }

    /// `from` asks us to carry `bytes` to `to`; `reachable` says whether we reach `to` on a path
    /// of our own (not through another relay: relays are never chained).
    public mutating func admit(_ bytes: Int, from: NodeID, to: NodeID, reachable: Bool, now: MeshInstant) -> Verdict {
        let pair = Pair(from: from, to: to)
        guard settings.enabled else { return refuse(pair, .disabled, now: now) }
        guard reachable else { return refuse(pair, .unreachable, now: now) }
        var all = total ?? Bucket(level: Double(settings.totalBurst), at: now)
        if buckets[pair] == nil {
            // A new pair while the pairs we carry use (nearly) all we carry: it goes to a relay
            // with room, instead of taking a share of ours by losses.
            all.refill(rate: settings.totalRate, burst: settings.totalBurst, now: now)
            total = all
            if all.level < Double(settings.totalBurst) / 4 { return refuse(pair, .busy, now: now) }
            if buckets.count >= settings.maxPairs, let idle = buckets.min(by: { $0.value.at < $1.value.at }) {
                buckets[idle.key] = nil
            }
        }
        var bucket = buckets[pair] ?? Bucket(level: Double(settings.pairBurst), at: now)
        defer { buckets[pair] = bucket; total = all }
        // The pair's own bucket first: an over-rate pair does not spend everyone's.
        guard bucket.take(bytes, rate: settings.pairRate, burst: settings.pairBurst, now: now) else {
            counters.droppedOverRate += 1
            return .drop
        }
        guard all.take(bytes, rate: settings.totalRate, burst: settings.totalBurst, now: now) else {
            bucket.level += Double(bytes)
            counters.droppedOverRate += 1
            return .drop
        }
        counters.forwardedDatagrams += 1
        counters.forwardedBytes += UInt64(bytes)
        return .forward
    }

    /// Not carried: the sender is told why, at most once per `refusalInterval` per pair.
    private mutating func refuse(_ pair: Pair, _ reason: RelayRefusal.Reason, now: MeshInstant) -> Verdict {
        counters.refused += 1
        let answer = refusedAt[pair].map { now >= $0 + settings.refusalInterval } ?? true
        if answer {
            if refusedAt.count >= settings.maxPairs { refusedAt = refusedAt.filter { now < $0.value + settings.refusalInterval } }
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
    public mutating func forget(_ member: NodeID) {
        buckets = buckets.filter { $0.key.from != member && $0.key.to != member }
        refusedAt = refusedAt.filter { $0.key.from != member && $0.key.to != member }
    }
}
