import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// An upload to a mesh, whole nodes on the seeded network: the uploader seeds (each chunk goes
/// out about once, and the members pass it on), also when some members are slow.
@Suite("Upload to a mesh in simulation")
struct UploadFanOutSimulationTests {
    struct Outcome {
        var finished: Bool
        /// The uploader's piece bytes ÷ the file.
        var uploaderCopies: Double
        var secondCopies: UInt64
        var refusals: UInt64
    }

    /// An uploader behind a 20 Mbit/s uplink; 6 members with 20 Mbit/s uplinks, of which 2
    /// behind 2 Mbit/s downlinks and 4 behind 20 Mbit/s; 4 MiB in 64 KiB chunks.
    static func upload(seed: UInt64) -> Outcome {
        var configuration = SimNode.Configuration()
        configuration.settings.chunkSize = 65_536
        let mesh = SimMesh(
            seed: seed, link: LinkConditions(delay: .milliseconds(5), jitter: .milliseconds(1)),
            configuration: configuration)
        let uploader = mesh.addNode(joiningThrough: [], at: .zero)
        let members = (1...6).map {
            mesh.addNode(joiningThrough: [uploader.address], at: .zero + .milliseconds(10 * $0))
        }
        mesh.simulator.setBottlenecks(
            of: uploader.address, uplink: Bottleneck(megabitsPerSecond: 20, queue: .milliseconds(50)),
            downlink: nil)
        for (index, member) in members.enumerated() {
            mesh.simulator.setBottlenecks(
                of: member.address, uplink: Bottleneck(megabitsPerSecond: 20, queue: .milliseconds(50)),
                downlink: Bottleneck(megabitsPerSecond: index % 3 == 0 ? 2 : 20, queue: .milliseconds(50)))
        }
        let size = 4 << 20
        uploader.plan(at: .zero + .seconds(1)) { $0.attach(HomeLineExperiment.file(size: size, seed: seed)) }
        let done = mesh.simulator.run(until: .zero + .seconds(300), checkEvery: .milliseconds(100)) { _ in
            members.allSatisfy { !$0.complete.isEmpty }
        }
        let counters = uploader.core.counters
        return Outcome(
            finished: done == .satisfied, uploaderCopies: Double(counters.chunkPayloadBytesSent) / Double(size),
            secondCopies: counters.seedingSecondCopies, refusals: counters.seedingRefusals)
    }

    /// Before, a copy paced for a slow member was still queued when the seeding interval ran
    /// out, and went to a second member too; and once any member held the file whole, the
    /// uploader served everything it was asked. The same three seeds then sent 1.41–1.47× (mean
    /// 1.44; 1.6–2.1× with 9 members, 16 MiB in 256 KiB chunks); with the seed's rules 1.08–1.26
    /// (mean 1.16), where a slow member that waited for room at the holders came back to the seed
    /// after its 5 s grace; now that it hears "left to others" and waits for them, 1.05–1.14 (mean
    /// 1.08). The rest is pieces lost at the slow lines' small queues and sent again, and second
    /// copies of chunks a slow member hoarded past the patience.
    @Test("an uploader to 6 members, 2 of them slow, sends the file about once: ≤ 1.2× on average over the seeds")
    func uploaderSendsAboutOneCopy() {
        let seeds = SimulationSeeds.from(defaultCount: 3)
        var copies: [Double] = []
        for seed in seeds {
            let outcome = Self.upload(seed: seed)
            #expect(outcome.finished, "\(SimulationSeeds.replay(seed)): not every member got the file")
            copies.append(outcome.uploaderCopies)
            print(
                "\(SimulationSeeds.replay(seed)): uploader sent \(outcome.uploaderCopies)× the file, "
                    + "\(outcome.secondCopies) second copies, \(outcome.refusals) wants left to others")
        }
        let mean = copies.reduce(0, +) / Double(max(1, copies.count))
        #expect(mean <= 1.2, "seeds \(seeds): the uploader sent \(copies)× the file")
    }
}
