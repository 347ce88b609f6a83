@testable import GroupMesh
import MeshCore
import Metrics
import MetricsTestKit
import Testing

/// `NodeMetrics` turns the node's running totals into swift-metrics figures once a second.
@Suite("node metrics")
struct NodeMetricsTests {
    typealias Name = GroupMeshMetricNames
    static func at(_ seconds: Int) -> MeshInstant { .zero + .seconds(seconds) }

    @Test("counters grow by what the totals grew, never go back, and carry their closed labels")
    func countersFollowTotals() throws {
        let backend = TestMetrics()
        var metrics = NodeMetrics(factory: backend)
        var reading = NodeMetrics.Reading()
        reading.counters.sent.count(.membership, datagrams: 5, bytes: 500)
        reading.counters.sent.count(.transfer, datagrams: 3, bytes: 3_000)
        reading.counters.dropped[.auth] = 2
        reading.retransmissions = 4
        reading.counters.seedingRefusals = 9
        reading.counters.seedingSecondCopies = 1
        reading.counters.pacesRetold = 2
        metrics.publish(reading, now: Self.at(1))
        #expect(backend.counterTotal(label: Name.seedingRefusals) == 9)
        #expect(backend.counterTotal(label: Name.seedingSecondCopies) == 1)
        #expect(backend.counterTotal(label: Name.pacesRetold) == 2)
        #expect(backend.counterTotal(label: Name.datagramsSent, dimensions: [("kind", "membership")]) == 5)
        #expect(backend.counterTotal(label: Name.bytesSent, dimensions: [("kind", "transfer")]) == 3_000)
        #expect(backend.counterTotal(label: Name.drops, dimensions: [("reason", "auth")]) == 2)
        #expect(backend.counterTotal(label: Name.drops, dimensions: [("reason", "replay")]) == 0)

        reading.counters.sent.count(.membership, datagrams: 2, bytes: 200)
        reading.retransmissions = 3  // a total that went back (it must not): nothing is taken away
        metrics.publish(reading, now: Self.at(2))
        #expect(backend.counterTotal(label: Name.datagramsSent, dimensions: [("kind", "membership")]) == 7)
        #expect(backend.counterTotal(label: Name.retransmissions) == 4)
        reading.retransmissions = 6
        metrics.publish(reading, now: Self.at(3))
        #expect(backend.counterTotal(label: Name.retransmissions) == 6)
        let increments = try backend.expectCounter(Name.datagramsSent, [("kind", "membership")]).values
        #expect(increments == [5, 2], "a publication with nothing new increments nothing")
    }

    @Test("gauges hold members and attachments by state, the store, and the fetch rate of the last second")
    func gauges() throws {
        let backend = TestMetrics()
        var metrics = NodeMetrics(factory: backend, dimensions: [("node", "a")])
        var reading = NodeMetrics.Reading()
        reading.members = [.alive: 3, .suspect: 1]
        reading.attachments = [.available: 2]
        reading.storeBytes = 1_000
        reading.storeFreeBytes = 5_000
        metrics.publish(reading, now: Self.at(10))
        #expect(try backend.expectGauge(Name.members, [("state", "alive"), ("node", "a")]).lastValue == 3)
        #expect(try backend.expectGauge(Name.members, [("state", "dead"), ("node", "a")]).lastValue == 0)
        #expect(try backend.expectGauge(Name.attachments, [("state", "unavailable"), ("node", "a")]).lastValue == 0)
        #expect(try backend.expectGauge(Name.storeFreeBytes, [("node", "a")]).lastValue == 5_000)
        #expect(throws: (any Error).self, "no rate before a second reading") {
            try backend.expectGauge(Name.fetchThroughput, [("node", "a")])
        }
        reading.counters.chunkPayloadBytesFetched = 4 << 20
        metrics.publish(reading, now: Self.at(12))
        #expect(try backend.expectGauge(Name.fetchThroughput, [("node", "a")]).lastValue == Double(2 << 20))
    }

    @Test("each probe round trip is recorded once, in nanoseconds")
    func roundTrips() throws {
        let backend = TestMetrics()
        var metrics = NodeMetrics(factory: backend)
        var reading = NodeMetrics.Reading()
        reading.membership.roundTrips.record(.milliseconds(2))
        reading.membership.roundTrips.record(.milliseconds(3))
        metrics.publish(reading, now: Self.at(1))
        metrics.publish(reading, now: Self.at(2))
        reading.membership.roundTrips.record(.microseconds(500))
        metrics.publish(reading, now: Self.at(3))
        #expect(try backend.expectTimer(Name.probeRoundTrip).values == [2_000_000, 3_000_000, 500_000])
    }

    @Test("every metric published has help text and a Prometheus-style name")
    func names() {
        let backend = TestMetrics()
        var metrics = NodeMetrics(factory: backend)
        var reading = NodeMetrics.Reading()
        reading.kernelReceiveDrops = 0
        reading.storeFreeBytes = 0
        reading.membership.roundTrips.record(.milliseconds(1))
        metrics.publish(reading, now: Self.at(1))
        metrics.publish(reading, now: Self.at(2))
        let labels = Set(backend.counters.map(\.label) + backend.recorders.map(\.label) + backend.timers.map(\.label))
        #expect(labels.count == Name.help.count, "published \(labels.sorted()), described \(Name.help.keys.sorted())")
        for label in labels {
            #expect(Name.help[label] != nil, "\(label) has no help text")
            #expect(
                label.hasPrefix("groupmesh_") && label.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "_" },
                "\(label)")
        }
        for label in backend.counters.map(\.label) { #expect(label.hasSuffix("_total"), "\(label)") }
    }
}
