import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Path MTU discovery between whole nodes on the seeded network: a joiner replicating an
/// attachment sizes its pieces to what the holder's path carries, never larger, and survives
/// a path that shrinks under it (a black hole).
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter PathMTUSimulation
@Suite("Path MTU discovery in simulation")
struct PathMTUSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)
    static let attachAt = MeshInstant.zero + .seconds(1)

    /// Node 0 attaches `size` random bytes at 1 s; node 1 replicates them.
    static func mesh(seed: UInt64, link: LinkConditions, size: Int) -> (SimMesh, holder: SimNode, joiner: SimNode) {
        let mesh = SimMesh(seed: seed, link: link)
        var random = SplitMix64(seed: seed &+ 17)
        let bytes = random.bytes(size)
        let holder = mesh.addNode(joiningThrough: [], at: .zero)
        let joiner = mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(50))
        holder.plan(at: attachAt) { $0.attach(bytes) }
        return (mesh, holder, joiner)
    }

    @Test("a path with no limit carries 8,972-byte pieces; an Ethernet path stops at 1,472", arguments: seeds)
    func piecesFillThePath(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        for (mtu, expected) in [(nil, 8972), (1472 as Int?, 1472)] {
            let link = LinkConditions(
                delay: .milliseconds(5), jitter: .milliseconds(1), lossProbability: 0.01, mtu: mtu)
            let (mesh, holder, joiner) = Self.mesh(seed: seed, link: link, size: 3 << 20)
            mesh.simulator.run(until: .zero + .seconds(20))
            #expect(
                joiner.complete.count == 1,
                "\(replay), mtu \(String(describing: mtu)): the joiner never held the attachment")
            #expect(
                joiner.core.pathMTU.datagramSize(from: holder.id) == expected,
                "\(replay), mtu \(String(describing: mtu))")
            // Pieces went in the datagrams the path proved, never larger: only the probe of the
            // next size (4,052), up to three times, was over the MTU.
            let overMTU = mesh.simulator.statistics.dropped.mtu
            if mtu == nil {
                #expect(holder.largestDatagram == 8972, "\(replay): largest \(holder.largestDatagram)")
                #expect(overMTU == 0, "\(replay)")
            } else {
                #expect(holder.largestDatagram == 4052, "\(replay): largest \(holder.largestDatagram)")
                #expect(
                    (1...3).contains(overMTU),
                    "\(replay): \(overMTU) datagrams over the MTU, black holes \(joiner.core.pathMTU.blackHoles)")
            }
            #expect(mesh.nodeViolations() == [], "\(replay)")
        }
    }

    @Test("a member flooding probe requests draws 10 probes a second, and none of a size out of bounds")
    func probeBudget() {
        let mesh = SimMesh(seed: 5, link: LinkConditions(delay: .milliseconds(2)))
        let holder = mesh.addNode(joiningThrough: [], at: .zero)
        let flooder = mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(50))
        let floodAt = MeshInstant.zero + .seconds(2)
        var transferBefore: UInt64 = 0
        holder.plan(at: floodAt) { holder in transferBefore = holder.core.counters.sent.datagrams(.transfer) }
        flooder.plan(at: floodAt) { flooder in
            for token in 0..<100 {
                flooder.inject(
                    [.pathProbeRequest(PathProbeRequest(token: UInt32(token), size: 8972))],
                    to: holder.address, member: holder.id)
            }
            // Smaller than a probe can be, and larger than any node accepts.
            for size in [10, 60, 8973, 20_000, 65_535] {
                flooder.inject(
                    [.pathProbeRequest(PathProbeRequest(token: 7, size: size))], to: holder.address, member: holder.id)
            }
        }
        mesh.simulator.run(until: floodAt + .milliseconds(500))
        let probesSent = holder.core.counters.sent.datagrams(.transfer) - transferBefore
        #expect(probesSent == 10, "\(probesSent) probes answered to one member within a second")
        #expect(holder.core.counters.probeRequestsRefused == 95)
        #expect(holder.largestDatagram == 8972, "the probes answered are as large as asked")
        // The next second brings a new budget.
        flooder.plan(at: floodAt + .seconds(2)) { flooder in
            flooder.inject(
                [.pathProbeRequest(PathProbeRequest(token: 1, size: 1472))], to: holder.address, member: holder.id)
        }
        mesh.simulator.run(until: floodAt + .seconds(3))
        #expect(holder.core.counters.sent.datagrams(.transfer) - transferBefore == 11)
    }

    @Test("a path that shrinks to Ethernet's MTU mid-fetch is found out, and the fetch completes", arguments: seeds)
    func blackHole(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        // A slow line, so that the fetch is under way when the path shrinks.
        let link = LinkConditions(delay: .milliseconds(20), jitter: .milliseconds(2))
        let (mesh, holder, joiner) = Self.mesh(seed: seed, link: link, size: 8 << 20)
        let line = Bottleneck(megabitsPerSecond: 32, queue: .milliseconds(100))
        _ = mesh.simulator.addAccessLink(for: [joiner.address], uplink: line, downlink: line)
        var shrunkMidFetch = false
        let shrinkAt = Self.attachAt + .seconds(1)
        mesh.simulator.at(shrinkAt, "path shrinks") { simulator in
            shrunkMidFetch = joiner.complete.isEmpty && joiner.core.pathMTU.datagramSize(from: holder.id) == 8972
            simulator.defaultLink = LinkConditions(delay: .milliseconds(20), jitter: .milliseconds(2), mtu: 1472)
        }
        mesh.simulator.run(until: .zero + .seconds(60))
        #expect(shrunkMidFetch, "\(replay): the path shrank before the fetch used jumbo pieces, or after it ended")
        #expect(joiner.complete.count == 1, "\(replay): the fetch never completed after the black hole")
        #expect(joiner.core.pathMTU.blackHoles >= 1, "\(replay): the black hole went unnoticed")
        #expect(joiner.core.pathMTU.datagramSize(from: holder.id) <= 1472, "\(replay)")
        #expect(mesh.nodeViolations() == [], "\(replay)")
    }
}
