import CoreMetrics
import Foundation
import GroupMesh
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus

/// `run --metrics HOST:PORT`: the node's swift-metrics figures in Prometheus's text format at
/// `http://HOST:PORT/metrics`. Off by default; the figures say how busy the node is and how
/// many members it has, so bind it to loopback or a private interface.
final class MetricsExporter: Sendable {
    private let channel: any Channel
    /// The address actually bound (port 0 picks a free one).
    let boundAddress: String

    private init(channel: any Channel, boundAddress: String) {
        self.channel = channel
        self.boundAddress = boundAddress
    }

    /// Connections served at once; a newcomer past that takes the place of the one that has
    /// waited longest for a request (idle, or sending one byte by byte).
    static let maxConnections = 16
    /// A connection's next request must be whole within this of its connect or its previous
    /// answer: a client that dribbles bytes (slowloris) or idles is closed, whatever it sends.
    static let requestDeadline = TimeAmount.seconds(10)

    /// Binds the HTTP listener and makes swift-metrics report to it (once per process).
    static func start(_ address: ListenAddress) async throws(GroupMeshError) -> MetricsExporter {
        let registry = PrometheusCollectorRegistry()
        let connections = MetricsConnections(limit: Self.maxConnections)
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                // A few scrapers at a time: a client that holds connections open must not use up
                // the descriptors the node needs for its sockets and its store.
                connections.admit(channel)
                channel.closeFuture.whenComplete { _ in connections.remove(channel) }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(
                        MetricsHTTPHandler(registry: registry, connections: connections))
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.bind(host: address.host, port: address.port).get()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            throw .bindFailed(
                address: "\(address) (--metrics)",
                reason: "the port is in use; choose another, or port 0 for any free one")
        } catch {
            throw .bindFailed(address: "\(address) (--metrics)", reason: "\(error)")
        }
        let bound =
            channel.localAddress.flatMap { $0.port }.map { MeshAddress.join(address.host, $0) }
            ?? address.description
        MetricsSystem.bootstrap(HelpfulPrometheusFactory(registry: registry))
        return MetricsExporter(channel: channel, boundAddress: bound)
    }

    func stop() async {
        try? await channel.close()
    }
}

/// swift-prometheus's factory leaves out `# HELP` (swift-metrics has no place for it), which
/// `promtool check metrics` and people reading the page both want: this one adds each metric's
/// help text from `GroupMeshMetricNames.help`, and round trips get buckets from 0.5 ms to 5 s.
struct HelpfulPrometheusFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry

    static let roundTripBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
        .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .milliseconds(2500), .seconds(5),
    ]
    static let valueBuckets: [Double] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000]

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: GroupMeshMetricNames.help[label] ?? label)
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard aggregate else { return registry.makeGauge(descriptor: descriptor(label), labels: dimensions) }
        return registry.makeValueHistogram(
            descriptor: descriptor(label), labels: dimensions, buckets: Self.valueBuckets)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        registry.makeDurationHistogram(
            descriptor: descriptor(label), labels: dimensions, buckets: Self.roundTripBuckets)
    }

    func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
        if let histogram = handler as? ValueHistogram { registry.unregisterValueHistogram(histogram) }
    }

    func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { registry.unregisterDurationHistogram(histogram) }
    }
}

/// GET (or HEAD) /metrics: the exposition; anything else: 404 or 405, in one line.
/// The exporter's open connections, each with when the wait for its next request began: the
/// newcomer past the limit closes the one that has waited longest (never one being answered).
final class MetricsConnections: @unchecked Sendable {
    private let limit: Int
    private let lock = NSLock()
    private var waiting: [ObjectIdentifier: (channel: any Channel, since: NIODeadline)] = [:]

    init(limit: Int) { self.limit = limit }

    func admit(_ channel: any Channel) {
        let evicted: (any Channel)? = lock.withLock {
            var evicted: (any Channel)?
            if waiting.count >= limit, let oldest = waiting.min(by: { $0.value.since < $1.value.since }) {
                evicted = oldest.value.channel
                waiting[oldest.key] = nil
            }
            waiting[ObjectIdentifier(channel)] = (channel, .now())
            return evicted
        }
        evicted?.close(promise: nil)
    }

    /// Its answer went out: the wait for the next request starts now.
    func answered(_ channel: any Channel) {
        lock.withLock {
            if waiting[ObjectIdentifier(channel)] != nil { waiting[ObjectIdentifier(channel)]?.since = .now() }
        }
    }

    func remove(_ channel: any Channel) {
        _ = lock.withLock { waiting.removeValue(forKey: ObjectIdentifier(channel)) }
    }
}

private final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let registry: PrometheusCollectorRegistry
    private let connections: MetricsConnections
    private var head: HTTPRequestHead?
    private var deadline: Scheduled<Void>?

    init(registry: PrometheusCollectorRegistry, connections: MetricsConnections) {
        self.registry = registry
        self.connections = connections
    }

    func handlerAdded(context: ChannelHandlerContext) { armDeadline(context: context) }

    func handlerRemoved(context: ChannelHandlerContext) { deadline?.cancel() }

    /// The next request must be whole by `requestDeadline` from now.
    private func armDeadline(context: ChannelHandlerContext) {
        deadline?.cancel()
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: MetricsExporter.requestDeadline) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head):
            self.head = head
        case .body:
            break
        case .end:
            guard let head else { return }
            self.head = nil
            // A client that does not read its answers gets no more of them: they would pile up
            // in the node's memory (one pipelining requests and never reading grew it by GBs).
            guard context.channel.isWritable else { return context.close(promise: nil) }
            respond(to: head, context: context)
            connections.answered(context.channel)
            armDeadline(context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let status: HTTPResponseStatus
        let body: [UInt8]
        var headers = HTTPHeaders()
        if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            headers.add(name: "Allow", value: "GET, HEAD")
            body = Array("only GET and HEAD are served here\n".utf8)
        } else if path != "/metrics" {
            status = .notFound
            body = Array("not found: this node serves its metrics at /metrics\n".utf8)
        } else {
            status = .ok
            body = registry.emitToBuffer()
        }
        headers.add(
            name: "Content-Type",
            value: status == .ok
                ? "text/plain; version=0.0.4; charset=utf-8"
                : "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.count)")
        let keepAlive = head.isKeepAlive
        headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
            promise: nil)
        if head.method != .HEAD {
            context.write(
                wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            let channel = context.channel
            written.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
