import CoreMetrics
import MeshCore

/// The node's figures through swift-metrics, for whatever backend the process bootstrapped
/// (`groupmesh run --metrics` serves them to Prometheus). The datagram path counts in plain
/// integers (`NodeCounters`); once a second the shell reads them and this turns their growth
/// into counter increments, so a backend costs nothing per datagram and the core stays free of
/// it. Without a backend (swift-metrics' no-op factory) the node publishes nothing.
struct NodeMetrics {
    /// What the node counted and holds, read at one moment.
    struct Reading {
        var counters = NodeCounters()
        var membership = MembershipCounters()
        var retransmissions: UInt64 = 0
        var requestTimeouts: UInt64 = 0
        var sendErrors: UInt64 = 0
        var kernelReceiveDrops: UInt64?
        var members: [MemberStatus: Int] = [:]
        var attachments: [AttachmentAvailability.State: Int] = [:]
        var storeBytes: UInt64 = 0
        var storeFreeBytes: UInt64?
        var localHealth = 0
        var keyEpoch = 0
        var eventHandlers = EventHandlers.Counters()
    }

    /// A counter fed from a running total: increments by its growth, never goes back.
    private struct Feed {
        let counter: Counter
        var last: UInt64 = 0

        mutating func publish(_ total: UInt64) {
            if total > last { counter.increment(by: total - last) }
            last = max(last, total)
        }
    }

    private let factory: any MetricsFactory
    private let dimensions: [(String, String)]
    private var feeds: [String: Feed] = [:]
    private var gauges: [String: Gauge] = [:]
    private let roundTrips: CoreMetrics.Timer
    private var roundTripsSeen: UInt64 = 0
    private var lastFetchedBytes: UInt64 = 0
    private var lastPublishedAt: MeshInstant?

    /// Label names the metrics use themselves (and Prometheus's histograms): not for `dimensions`.
    static let reservedLabels: Set<String> = ["kind", "reason", "state", "outcome", "le", "quantile"]

    /// Whether a backend was bootstrapped: without one there is nothing to gather for.
    var isReporting: Bool { !(factory is NOOPMetricsHandler) }

    /// `dimensions` are added to every metric (to tell apart several nodes in one process); the
    /// caller leaves out `reservedLabels`.
    init(factory: any MetricsFactory = MetricsSystem.factory, dimensions: [(String, String)] = []) {
        self.factory = factory
        self.dimensions = dimensions
        roundTrips = Timer(label: GroupMeshMetricNames.probeRoundTrip, dimensions: dimensions, factory: factory)
    }

    mutating func publish(_ reading: Reading, now: MeshInstant) {
        typealias Name = GroupMeshMetricNames
        let counters = reading.counters
        for kind in TrafficKind.allCases {
            let label = [("kind", kind.description)]
            feed(Name.datagramsSent, label, counters.sent.datagrams(kind))
            feed(Name.datagramsReceived, label, counters.received.datagrams(kind))
            feed(Name.bytesSent, label, counters.sent.bytes(kind))
            feed(Name.bytesReceived, label, counters.received.bytes(kind))
        }
        for reason in DropReason.allCases {
            feed(Name.drops, [("reason", reason.rawValue)], counters.dropped[reason] ?? 0)
        }
        if let kernel = reading.kernelReceiveDrops { feed(Name.kernelDrops, [], kernel) }
        feed(Name.sendErrors, [], reading.sendErrors)
        feed(Name.retransmissions, [], reading.retransmissions)
        feed(Name.reliableMessages, [("outcome", "delivered")], counters.reliableDelivered)
        feed(Name.reliableMessages, [("outcome", "unconfirmed")], counters.reliableUnconfirmed)
        feed(Name.suspicions, [], reading.membership.suspicionsRaised)
        feed(Name.refutations, [], reading.membership.refutations)
        feed(Name.chunksFetched, [], counters.chunksFetched)
        feed(Name.chunksServed, [], counters.chunksServed)
        feed(Name.chunksRejected, [], counters.chunksRejected)
        feed(Name.fetchedBytes, [], counters.chunkPayloadBytesFetched)
        feed(Name.servedBytes, [], counters.chunkPayloadBytesSent)
        feed(Name.fetchesFailed, [], counters.fetchesFailed)
        feed(Name.requestTimeouts, [], reading.requestTimeouts)
        feed(Name.pacesRetold, [], counters.pacesRetold)
        feed(Name.seedingRefusals, [], counters.seedingRefusals)
        feed(Name.seedingSecondCopies, [], counters.seedingSecondCopies)
        let handlers = reading.eventHandlers
        feed(
            Name.eventHandlerRuns, [("outcome", "ok")],
            handlers.run - min(handlers.run, handlers.failed + handlers.timedOut))
        feed(Name.eventHandlerRuns, [("outcome", "failed")], handlers.failed)
        feed(Name.eventHandlerRuns, [("outcome", "timed_out")], handlers.timedOut)
        feed(Name.eventHandlerRuns, [("outcome", "dropped")], handlers.dropped)

        for status in MemberStatus.allCases {
            gauge(Name.members, [("state", status.rawValue)], Double(reading.members[status] ?? 0))
        }
        for state in AttachmentAvailability.State.allCases {
            gauge(Name.attachments, [("state", state.rawValue)], Double(reading.attachments[state] ?? 0))
        }
        gauge(Name.storeBytes, [], Double(reading.storeBytes))
        if let free = reading.storeFreeBytes { gauge(Name.storeFreeBytes, [], Double(free)) }
        gauge(Name.localHealth, [], Double(reading.localHealth))
        gauge(Name.keyEpoch, [], Double(reading.keyEpoch))

        // Throughput over the time since the last publication (none at the first).
        let fetched = counters.chunkPayloadBytesFetched
        if let last = lastPublishedAt, now > last {
            let seconds = Double((now - last).nanosecondsClamped) / 1e9
            // The total never goes back; a new run starts a new NodeMetrics.
            gauge(Name.fetchThroughput, [], Double(fetched - min(fetched, lastFetchedBytes)) / seconds)
        }
        lastFetchedBytes = fetched
        lastPublishedAt = now

        let (samples, _) = reading.membership.roundTrips.samples(after: roundTripsSeen)
        for rtt in samples { roundTrips.recordNanoseconds(rtt.nanosecondsClamped) }
        roundTripsSeen = reading.membership.roundTrips.count
    }

    private mutating func feed(_ name: String, _ labels: [(String, String)], _ total: UInt64) {
        let key = Self.key(name, labels)
        if feeds[key] == nil {
            feeds[key] = Feed(counter: Counter(label: name, dimensions: labels + dimensions, factory: factory))
        }
        feeds[key]?.publish(total)
    }

    private mutating func gauge(_ name: String, _ labels: [(String, String)], _ value: Double) {
        let key = Self.key(name, labels)
        let gauge = gauges[key] ?? Gauge(label: name, dimensions: labels + dimensions, factory: factory)
        gauges[key] = gauge
        gauge.record(value)
    }

    private static func key(_ name: String, _ labels: [(String, String)]) -> String {
        labels.reduce(name) { $0 + "|" + $1.0 + "=" + $1.1 }
    }
}
