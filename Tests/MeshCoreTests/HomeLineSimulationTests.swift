import MeshCore
import MeshTestKit
import Testing

/// The whole node's congestion control on a home line, over seeds: three holders
/// outside, a joiner behind a 20 Mbit/s line with a 100 ms queue, and a CUBIC download through
/// the same line. Replication yields to it; a `get` competes without taking the line; neither
/// overflows the queue nor makes the holders send much more than the file.
@Suite("Home line") struct HomeLineSimulationTests {
    static let line = HomeLineExperiment.Line(
        name: "20 Mbit/s, 40 ms", megabitsPerSecond: 20,
        roundTrip: .milliseconds(40), loss: 0)
    static let size = 8 << 20

    @Test(
        "replication beside a TCP download yields: the download keeps ≥ 80% of the line",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func replicationYields(seed: UInt64) {
        let outcome = HomeLineExperiment.run(
            size: Self.size, line: Self.line, mode: .replication, competitor: true, seed: seed)
        #expect(outcome.finished, "seed \(seed): the joiner did not finish")
        #expect(outcome.competitorRate >= 0.8 * Self.line.bytesPerSecond, "seed \(seed): \(outcome)")
        Self.expectPolite(outcome, seed: seed)
    }

    @Test(
        "a get beside a TCP download competes: the download keeps ≥ 40%, the fetch gets a share",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func getCompetes(seed: UInt64) {
        let outcome = HomeLineExperiment.run(size: Self.size, line: Self.line, mode: .get, competitor: true, seed: seed)
        #expect(outcome.finished, "seed \(seed): the joiner did not finish")
        #expect(outcome.competitorRate >= 0.4 * Self.line.bytesPerSecond, "seed \(seed): \(outcome)")
        #expect(outcome.fetchRate >= 0.1 * Self.line.bytesPerSecond, "seed \(seed): \(outcome)")
        Self.expectPolite(outcome, seed: seed)
    }

    @Test(
        "1% random loss does not collapse a get: ≥ 0.8× its rate without loss",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func randomLossIsNotCongestion(seed: UInt64) {
        // 16 MiB: the rate is what counts here, not the start (slower under loss: the first chunk
        // of each holder must verify before its pieces feed the controller).
        let clean = HomeLineExperiment.run(
            size: 2 * Self.size, line: Self.line, mode: .get, competitor: false, seed: seed)
        var lossy = Self.line
        lossy.loss = 0.01
        let outcome = HomeLineExperiment.run(
            size: 2 * Self.size, line: lossy, mode: .get, competitor: false, seed: seed)
        #expect(clean.finished && outcome.finished, "seed \(seed)")
        #expect(outcome.fetchRate >= 0.8 * clean.fetchRate, "seed \(seed): \(outcome.fetchRate) vs \(clean.fetchRate)")
        Self.expectPolite(clean, seed: seed)
    }

    static let lossyLine = HomeLineExperiment.Line(
        name: "10 Mbit/s, 80 ms, 0.5% loss", megabitsPerSecond: 10,
        roundTrip: .milliseconds(80), loss: 0.005)

    /// A TCP held down by random loss grows into the line's spare room between its losses and
    /// shows no queue to yield to until it is short already: on a line that loses at random,
    /// replication leaves about half of the line free even alone; a get, which someone waits
    /// for, takes most of it.
    @Test(
        "on a line that loses at random, replication alone takes about half of it, a get most of it",
        arguments: SimulationSeeds.from(defaultCount: 1))
    func replicationLeavesRoomOnALossyLine(seed: UInt64) {
        let line = Self.lossyLine.bytesPerSecond
        let replication = HomeLineExperiment.run(
            size: Self.size, line: Self.lossyLine, mode: .replication, competitor: false, seed: seed)
        let get = HomeLineExperiment.run(
            size: Self.size, line: Self.lossyLine, mode: .get, competitor: false, seed: seed)
        #expect(replication.finished && get.finished, "seed \(seed)")
        #expect(
            replication.fetchRate >= 0.3 * line && replication.fetchRate <= 0.6 * line,
            "seed \(seed): replication took \(replication.fetchRate / line) of the line")
        #expect(get.fetchRate >= 0.65 * line, "seed \(seed): a get took \(get.fetchRate / line) of the line")
        Self.expectPolite(replication, seed: seed)
        Self.expectPolite(get, seed: seed)
    }

    /// Until the first holder proves itself (a whole chunk verified: about two seconds on this
    /// line) only slow start's hold stands between its overshoot and the line's queue. Growing to
    /// 3× what arrived, a get's start beside a TCP download raised the line's queue to 48 ms on
    /// average over 36 seeds (over 45 ms with 22 of them); 26 ms since it grows to 2× once a small
    /// queue shows. Pooled over the seeds: one seed's start depends on where the TCP's cycle is.
    /// The uploader among the holders leaves every chunk to the other two (they fetched it). Told
    /// "busy", the joiner kept a want out to it and so a third of its pace, which it never sent
    /// (slow start grows only once 85% of the rate arrives), and these 8 seeds peaked at 21 ms on
    /// average (the first 4, the test's seeds then, at 14). Told "left to others", the joiner
    /// paces the two that send, slow start doubles as meant, and the peaks are 12–76 ms, 34 on
    /// average (with all three holders serving, 33): the start's overshoot is the controller's,
    /// to work on. Eight seeds: four gave means of 14–39 ms as the code around them changed.
    @Test(
        "a get's start on a line that loses at random, beside a TCP download, overshoots into the line's queue by 40 ms at most on average"
    )
    func aGetsStartOvershootsLittle() {
        var peaks: [(seed: UInt64, peak: Duration)] = []
        for seed in SimulationSeeds.from(defaultCount: 8) {
            var startedAt: MeshInstant?
            var highest = Duration.zero
            // Only the first 3 s count: the run stops there (the rest would change nothing).
            _ = HomeLineExperiment.run(
                size: Self.size, line: Self.lossyLine, mode: .get, competitor: true,
                seed: seed,
                trace: { sim, joiner, _, _ in
                    if startedAt == nil, joiner.core.downlink.lastInterval.closedAt > .zero { startedAt = sim.now }
                    guard let start = startedAt, sim.now < start + .seconds(3) else { return }
                    highest = max(highest, sim.downlinkQueueDelay(of: joiner.address) ?? .zero)
                },
                stop: { sim in startedAt.map { sim.now >= $0 + .seconds(3) } ?? false })
            #expect(startedAt != nil, "seed \(seed): the get never started")
            peaks.append((seed, highest))
        }
        let mean = peaks.map { $0.peak.milliseconds }.reduce(0, +) / Double(max(1, peaks.count))
        #expect(mean <= 40, "the line's highest queue in a get's first 3 s, per seed: \(peaks)")
    }

    /// What the controller did is in the joiner's debug log, one `downlink` line per interval:
    /// most intervals close at their deadline (a tick), not at a piece, and were left out
    /// (two lines for an 11 s fetch through the emulator).
    @Test("at debug level, a fetching node logs every control interval")
    func everyIntervalIsLogged() {
        var configuration = SimNode.Configuration()
        configuration.settings.chunkSize = Manifest.defaultChunkSize
        let mesh = SimMesh(seed: 1, link: LinkConditions(delay: .milliseconds(20)), configuration: configuration)
        let holder = mesh.addNode(joiningThrough: [], at: .zero)
        let bytes = HomeLineExperiment.file(size: Self.size, seed: 1)
        holder.plan(at: .zero + .seconds(1)) { $0.attach(bytes) }
        var debug = configuration
        debug.settings.logLevel = .debug
        let joiner = mesh.addNode(joiningThrough: [holder.address], at: .zero + .seconds(2), configuration: debug)
        mesh.simulator.addAccessLink(
            for: [joiner.address], uplink: nil,
            downlink: Bottleneck(megabitsPerSecond: 20, queue: .milliseconds(100)))
        let done = mesh.simulator.run(until: .zero + .seconds(60), checkEvery: .milliseconds(50)) { _ in
            !joiner.complete.isEmpty
        }
        #expect(done == .satisfied, "the joiner did not finish")
        // 8 MiB at 20 Mbit/s: over 3 s of 40 ms intervals, some 80.
        let lines = joiner.logged["downlink"] ?? 0
        #expect(lines >= 40, "\(lines) downlink lines")
    }

    /// Holders' bytes: ≤ 1.1×, as in `make bench`. (1.2 while the end game asked the last 4
    /// chunks of a second holder at once: an 8 MiB file paid relatively more for it.)
    static func expectPolite(_ outcome: HomeLineExperiment.Outcome, seed: UInt64) {
        #expect(outcome.dropShare <= 0.02, "seed \(seed): the line's queue dropped \(outcome.dropShare * 100)%")
        #expect(
            outcome.holderBytesPerFileByte <= 1.1,
            "seed \(seed): holders sent \(outcome.holderBytesPerFileByte)× the file")
    }
}
