import Foundation
import GroupMesh
import MeshCore
import MeshTestKit
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// The messenger, with nodes in this process on loopback: round trip of a reliable
/// 1 KiB message beside a raw UDP ping-pong over the same kind of NIO datagram channel, and
/// acknowledged and unreliable message rates.
enum MessengerScenario {
    static func run(quick: Bool) async throws -> [BenchResult] {
        let sessions = try await makeCluster(count: 5)
        let results: Result<[BenchResult], any Error>
        do { results = .success(try await measure(sessions, quick: quick)) } catch { results = .failure(error) }
        // Each node gone before the process removes its data dir at exit (a leave not awaited
        // still saved its members into a directory already removed).
        for session in sessions { await session.leave() }
        return try results.get()
    }

    private static func measure(_ sessions: [MeshSession], quick: Bool) async throws -> [BenchResult] {
        let body = Data(repeating: 0x5a, count: 1024)
        let a = Messenger(session: sessions[0])
        let b = await sessions[1].localParticipant

        // Every figure is the median of `runs` runs.
        let runs = 3
        var p50s: [Double] = [], p99s: [Double] = [], rawP50s: [Double] = [], rawP99s: [Double] = []
        var deliveryRates: [Double] = [], unreliableRates: [Double] = []
        let received = await Messenger(session: sessions[1]).messages(of: Data.self)
        // Counted under a lock, not through an actor: a reader that falls behind holds the node
        // (flow control), and the figures are the messenger's, not this counter's.
        let counter = NIOLockedValueBox(0)
        let countTask = Task { for await _ in received { counter.withLockedValue { $0 += 1 } } }
        defer { countTask.cancel() }
        for _ in 0..<runs {
            // Round trip: send until acknowledged, one at a time, interleaved with raw ping-pongs
            // so both see the same machine at the same moment.
            let samples = quick ? 300 : 1000
            var rtts: [Double] = []
            var raw: [Double] = []
            let pinger = try await RawPingPong(size: 1024)
            for _ in 0..<samples {
                raw.append(try await pinger.roundTrip())
                let start = ContinuousClock.now
                try await a.send(body, to: .only([b]))
                rtts.append((ContinuousClock.now - start).milliseconds)
            }
            pinger.close()
            p50s.append(percentile(rtts, 0.5))
            p99s.append(percentile(rtts, 0.99))
            rawP50s.append(percentile(raw, 0.5))
            rawP99s.append(percentile(raw, 0.99))

            // Acknowledged messages to 4 peers, many in flight.
            let window = quick ? Duration.seconds(1) : Duration.seconds(2)
            deliveryRates.append(try await acknowledgedRate(messenger: a, body: body, peers: 4, window: window))

            // Unreliable: as fast as possible to one peer, counted at the receiver.
            let unreliable = Messenger(session: sessions[0], deliveryMode: .unreliable)
            try await Task.sleep(for: .milliseconds(200))
            let before = counter.withLockedValue { $0 }
            let start = ContinuousClock.now
            while ContinuousClock.now - start < window {
                for _ in 0..<64 { try await unreliable.send(body, to: .only([b])) }
            }
            try await Task.sleep(for: .milliseconds(200))
            unreliableRates.append(Double(counter.withLockedValue { $0 } - before) / (window.milliseconds / 1000))
        }
        let deliveries = median(deliveryRates)

        return [
            BenchResult(
                scenario: "reliable 1 KiB round trip p50", figure: median(p50s), unit: "ms",
                baselineName: "raw UDP ping-pong p50", baseline: median(rawP50s), goal: "≤ 2.5× baseline"),
            BenchResult(
                scenario: "reliable 1 KiB round trip p99", figure: median(p99s), unit: "ms",
                baselineName: "raw UDP ping-pong p99", baseline: median(rawP99s), goal: "≤ 3× baseline"),
            BenchResult(
                scenario: "acknowledged 1 KiB to 4 peers", figure: deliveries, unit: "deliveries/s",
                baselineName: "goal", baseline: 50_000, goal: "≥ 50,000/s"),
            BenchResult(
                scenario: "unreliable 1 KiB to 1 peer", figure: median(unreliableRates), unit: "messages/s",
                baselineName: "acknowledged rate", baseline: deliveries, goal: "-"),
        ]
    }

    actor Counter {
        var value = 0
        func add(_ n: Int = 1) { value += n }
    }

    static func makeCluster(count: Int) async throws -> [MeshSession] {
        var sessions: [MeshSession] = []
        for index in 0..<count {
            var configuration = NodeConfiguration(
                dataDirectory: DataDirectory(path: NodeProcess.makeTemporaryDirectory("bench\(index)")))
            configuration.listenHost = "127.0.0.1"
            configuration.listenPort = 0
            configuration.controlSocket = false
            configuration.invite = sessions.isEmpty ? nil : await sessions[0].invite()
            sessions.append(try await MeshSession.join(configuration))
        }
        let deadline = ContinuousClock.now + .seconds(30)
        for session in sessions {
            while await session.activeParticipants.count < count {
                guard ContinuousClock.now < deadline else {
                    var seen: [Int] = []
                    for session in sessions { seen.append(await session.activeParticipants.count) }
                    throw NodeProcessError.timeout("a cluster of \(count) within 30 s: each sees \(seen) active")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        return sessions
    }

    static func acknowledgedRate(messenger: Messenger, body: Data, peers: Int, window: Duration) async throws -> Double
    {
        let counter = Counter()
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<128 {
                group.addTask {
                    while ContinuousClock.now - start < window {
                        try await messenger.send(body)
                        await counter.add(peers)
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = (ContinuousClock.now - start).milliseconds / 1000
        return Double(await counter.value) / elapsed
    }

    /// A datagram echoed by a second NIO datagram channel: the floor any protocol over this
    /// socket setup can reach.
    final class RawPingPong: Sendable {
        let echo: any Channel
        let client: any Channel
        let pinger = Pinger()
        let target: SocketAddress
        let payload: ByteBuffer

        init(size: Int) async throws {
            let group = MultiThreadedEventLoopGroup.singleton
            echo = try await DatagramBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Echo()) }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            let pinger = self.pinger
            client = try await DatagramBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(pinger) }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            target = echo.localAddress!  // safe: a bound UDP channel has an address
            payload = ByteBuffer(repeating: 0x5a, count: size)
        }

        func roundTrip() async throws -> Double {
            let start = ContinuousClock.now
            let reply = client.eventLoop.makePromise(of: Void.self)
            let pinger = self.pinger
            try await client.eventLoop.submit { pinger.waiting = reply }.get()
            try await client.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: payload)).get()
            try await reply.futureResult.get()
            return (ContinuousClock.now - start).milliseconds
        }

        func close() {
            client.close(promise: nil)
            echo.close(promise: nil)
        }
    }

    final class Echo: ChannelInboundHandler, Sendable {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        typealias OutboundOut = AddressedEnvelope<ByteBuffer>
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            context.writeAndFlush(data, promise: nil)
        }
    }

    final class Pinger: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        var waiting: EventLoopPromise<Void>?
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            waiting?.succeed()
            waiting = nil
        }
    }
}
