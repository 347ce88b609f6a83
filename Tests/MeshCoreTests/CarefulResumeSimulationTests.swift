import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Careful resume on a simulated line, over seeds: three holders, a lazy joiner behind a 50 Mbit/s
/// line (80 ms, a 100 ms queue) that `get`s one attachment and then, after a pause, another of the
/// same size from the same holders. The second starts from what the first reached (after a round
/// trip that confirms the path): it finishes sooner, without more loss at the line. Where the line
/// lost most of its capacity between the two, the jump meets a queue and retreats: the line's
/// drops stay bounded.
@Suite("Careful resume") struct CarefulResumeSimulationTests {
    struct Load {
        var seconds: Double
        var dropped: Int
        var offered: Int
        var finished: Bool
        var dropShare: Double { Double(dropped) / Double(max(1, offered)) }
    }

    struct Outcome {
        var first: Load
        var second: Load
        var jumps: UInt64
        var retreats: UInt64
        var saved: Int
    }

    static let size = 4 << 20

    /// Runs both loads; before the second, the line drops to `secondMegabits` if given.
    static func run(seed: UInt64, megabits: Double = 50, secondMegabits: Double? = nil) -> Outcome {
        var configuration = SimNode.Configuration()
        configuration.settings.chunkSize = Manifest.defaultChunkSize
        let conditions = LinkConditions(delay: .milliseconds(40), lossProbability: 0, mtu: 1472)
        let mesh = SimMesh(seed: seed, link: conditions, configuration: configuration)
        let first = mesh.addNode(joiningThrough: [], at: .zero)
        let holders =
            [first]
            + (1...2).map {
                mesh.addNode(joiningThrough: [first.address], at: .zero + .milliseconds(10 * $0))
            }
        let files = [
            HomeLineExperiment.file(size: size, seed: seed),
            HomeLineExperiment.file(size: size, seed: seed + 1000),
        ]
        first.plan(at: .zero + .seconds(1)) { node in files.forEach { node.attach($0) } }
        _ = mesh.simulator.run(until: .zero + .seconds(120), checkEvery: .milliseconds(100)) { _ in
            holders.allSatisfy { $0.complete.count == 2 }
        }
        var joining = configuration
        joining.settings.lazy = true
        let start = mesh.simulator.now
        let joiner = mesh.addNode(joiningThrough: [first.address], at: start, configuration: joining)
        mesh.simulator.setBottlenecks(
            of: joiner.address, uplink: nil,
            downlink: Bottleneck(megabitsPerSecond: megabits, queue: .milliseconds(100)))
        let ids = first.core.attachments.map(\.content).sorted()
        // Joined, and the membership probes have measured the holders' round trips.
        mesh.simulator.run(until: start + .seconds(10))
        _ = mesh.simulator.run(until: start + .seconds(40), checkEvery: .milliseconds(5)) { _ in
            ids.allSatisfy { joiner.journal.state.hasContent($0) }
        }
        let firstLoad = load(ids[0], on: joiner, in: mesh)
        // A pause (the downlink starts from idle again), and the line as it is now.
        mesh.simulator.run(until: mesh.simulator.now + .seconds(3))
        if let secondMegabits {
            let line = Bottleneck(megabitsPerSecond: secondMegabits, queue: .milliseconds(100))
            mesh.simulator.setBottlenecks(of: joiner.address, uplink: nil, downlink: line)
        }
        let saved = joiner.core.savedPaths.count
        let secondLoad = load(ids[1], on: joiner, in: mesh)
        return Outcome(
            first: firstLoad, second: secondLoad, jumps: joiner.core.downlink.resumeJumps,
            retreats: joiner.core.downlink.resumeRetreats, saved: saved)
    }

    static func load(_ id: SHA256Digest, on joiner: SimNode, in mesh: SimMesh) -> Load {
        let before = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let start = mesh.simulator.now + .milliseconds(1)
        joiner.plan(at: start) { _ = $0.load(id) }
        let done = mesh.simulator.run(until: start + .seconds(60), checkEvery: .milliseconds(5)) { _ in
            joiner.complete.contains(id)
        }
        let after = mesh.simulator.bottleneckStatistics(of: joiner.address).downlink ?? .init()
        let dropped = after.dropped - before.dropped
        return Load(
            seconds: (mesh.simulator.now - start).milliseconds / 1000, dropped: Int(dropped),
            offered: Int(dropped + after.forwarded - before.forwarded), finished: done == .satisfied)
    }

    @Test(
        "a second get over a measured path resumes: it finishes sooner than the first, without more loss at the line",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func aSecondFetchResumes(seed: UInt64) {
        let outcome = Self.run(seed: seed)
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome.first.finished && outcome.second.finished, "\(replay)")
        #expect(outcome.saved == 1, "\(replay): nothing saved after the first get")
        #expect(outcome.jumps == 1 && outcome.retreats == 0, "\(replay): \(outcome)")
        #expect(outcome.second.seconds < outcome.first.seconds * 0.95, "\(replay): \(outcome)")
        #expect(outcome.second.dropped <= outcome.first.dropped, "\(replay): \(outcome)")
    }

    @Test(
        "on a line whose capacity dropped since, the jump retreats and the line's drops stay bounded",
        arguments: SimulationSeeds.from(defaultCount: 2))
    func aJumpIntoALineThatShrankRetreats(seed: UInt64) {
        // 50 Mbit/s measured, 10 left: the jump (half the rate reached) is over twice the line.
        let outcome = Self.run(seed: seed, secondMegabits: 10)
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome.first.finished && outcome.second.finished, "\(replay)")
        #expect(outcome.jumps == 1 && outcome.retreats == 1, "\(replay): \(outcome)")
        #expect(outcome.second.dropShare <= 0.02, "\(replay): \(outcome)")
    }
}
