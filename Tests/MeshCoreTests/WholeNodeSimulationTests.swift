import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Whole nodes (membership, messenger, journal and chunk transfer together, real sealed
/// datagrams) on the seeded network, under one kind of adversity per test, then healed.
/// Workload per run: five founders and one or two late joiners; members attach small chunked
/// attachments, remove some, send reliable messages (to everyone or a few) and unreliable ones.
/// After every run: every reliable message delivered once, in order, or reported failed to its
/// sender; journals equal on all live members; every stored chunk matches its hash; every live
/// member holds every attachment; after healing no live member is dead in anyone's view.
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter WholeNodeSimulation
/// `SIM_SEEDS=N` runs N seeds per test (`make soak SEEDS=N`).
@Suite("Whole nodes in simulation")
struct WholeNodeSimulationTests {
    static let calm = LinkConditions(delay: .milliseconds(2), jitter: .milliseconds(1))
    /// Faults are lifted here; the workload has ended a few seconds before.
    static let healAt = MeshInstant.zero + .seconds(30)
    static let workloadEnd = MeshInstant.zero + .seconds(26)
    /// Seeds per test in `make test`.
    static let seeds = SimulationSeeds.from(defaultCount: 4)

    // MARK: scenarios

    @Test("loss up to 30%, duplication, reordering, corruption", arguments: seeds)
    func lossyLinks(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, _ in
            let loss = [0.1, 0.2, 0.3][Int(seed % 3)]
            mesh.simulator.at(.zero + .seconds(1), "faults") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(3),
                    lossProbability: loss, duplicationProbability: 0.05,
                    reorderProbability: 0.2, reorderDelay: .milliseconds(30),
                    corruptionProbability: 0.02)
            }
        }
        Self.expectInvariants(mesh, seed)
        #expect(
            mesh.simulator.statistics.dropped.loss > 0 && mesh.simulator.statistics.corrupted > 0,
            "\(SimulationSeeds.replay(seed)): the faults did not happen")
    }

    @Test("an MTU below the datagram size for 27 s: what is over it is dropped", arguments: seeds)
    func mtuLimit(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, random in
            let mtu = 400 + Int(random.next() % 500)
            mesh.simulator.at(.zero + .seconds(3), "mtu \(mtu)") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(2),
                    lossProbability: 0.05, mtu: mtu)
            }
        }
        Self.expectInvariants(mesh, seed)
        #expect(mesh.simulator.statistics.dropped.mtu > 0, "\(SimulationSeeds.replay(seed)): nothing was over the MTU")
    }

    @Test("asymmetric links: 25–35% loss one way, 0–5% the other", arguments: seeds)
    func asymmetricLinks(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, random in
            var links: [(SimAddress, SimAddress, LinkConditions)] = []
            for first in mesh.nodes {
                for second in mesh.nodes where first < second {
                    let bad = 0.25 + Double(random.next() % 11) / 100
                    let good = Double(random.next() % 6) / 100
                    let (lossy, clean) = random.next() % 2 == 0 ? (first, second) : (second, first)
                    links.append(
                        (
                            lossy, clean,
                            LinkConditions(
                                delay: .milliseconds(3), jitter: .milliseconds(2),
                                lossProbability: bad, reorderProbability: 0.1)
                        ))
                    links.append((clean, lossy, LinkConditions(delay: .milliseconds(1), lossProbability: good)))
                }
            }
            mesh.simulator.at(.zero + .seconds(1), "asymmetric links") { simulator in
                for (from, to, conditions) in links { simulator.setLink(from: from, to: to, conditions) }
            }
        }
        Self.expectInvariants(mesh, seed)
    }

    @Test("a partition that heals after 24 s", arguments: seeds)
    func partitionHeals(seed: UInt64) {
        var split: [SimAddress] = []
        let mesh = Self.run(seed: seed) { mesh, random in
            // Two or three founders on one side; everyone else (late joiners too) on the other.
            let first = Int(random.next() % 5)
            split = (0..<(2 + Int(random.next() % 2))).map { mesh.nodes[(first + $0) % 5] }
            mesh.simulator.at(.zero + .seconds(6), "partition") { [split] simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(2), lossProbability: 0.05)
                simulator.partition([split])
            }
        }
        Self.expectInvariants(mesh, seed)
        #expect(mesh.simulator.statistics.dropped.partition > 0, "\(SimulationSeeds.replay(seed)): \(split)")
        // The partition lasted long enough for each side to declare the other dead.
        let deaths = mesh.deaths
        #expect(!deaths.isEmpty, "\(SimulationSeeds.replay(seed)): nobody was ever declared dead")
    }

    @Test("clock jumps forward of 1–30 s on some nodes", arguments: seeds)
    func clockJumps(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, random in
            mesh.simulator.at(.zero + .seconds(1), "faults") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(3),
                    lossProbability: 0.1, reorderProbability: 0.1)
            }
            for _ in 0..<3 {
                let node = mesh.nodes[Int(random.next() % UInt64(mesh.nodes.count))]
                let at = MeshInstant.zero + .milliseconds(3000 + Int(random.next() % 24_000))
                let jump = Duration.milliseconds(1000 + Int(random.next() % 29_000))
                mesh.simulator.at(at, "jump \(node)") { $0.jumpClock(of: node, by: jump) }
            }
        }
        Self.expectInvariants(mesh, seed)
        #expect(mesh.nodes.contains { mesh.simulator.clockOffset(of: $0) > .zero }, "\(SimulationSeeds.replay(seed))")
    }

    @Test(
        "everything at once: loss, corruption, MTU, asymmetry, a partition and a clock jump",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func storm(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, random in
            let stormy = LinkConditions(
                delay: .milliseconds(2), jitter: .milliseconds(4), lossProbability: 0.15,
                duplicationProbability: 0.05, reorderProbability: 0.2,
                reorderDelay: .milliseconds(40), corruptionProbability: 0.02, mtu: 1100)
            let victim = mesh.nodes[Int(random.next() % 5)]
            let oneWay = mesh.nodes[Int(random.next() % 5)]
            mesh.simulator.at(.zero + .seconds(1), "storm") { simulator in
                simulator.defaultLink = stormy
                for other in mesh.nodes where other != oneWay {
                    var worse = stormy
                    worse.lossProbability = 0.3
                    simulator.setLink(from: oneWay, to: other, worse)
                }
            }
            mesh.simulator.at(.zero + .seconds(10), "isolate \(victim)") { $0.isolate(victim) }
            mesh.simulator.at(.zero + .seconds(22), "heal") { $0.heal() }
            mesh.simulator.at(.zero + .seconds(15), "jump \(oneWay)") { $0.jumpClock(of: oneWay, by: .seconds(8)) }
        }
        Self.expectInvariants(mesh, seed)
    }

    @Test("a seed replays exactly")
    func replaysExactly() {
        let seed = SimulationSeeds.from(defaultCount: 1)[0]
        let faults: (SimMesh, inout SplitMix64) -> Void = { mesh, _ in
            mesh.simulator.at(.zero + .seconds(1)) { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(3), lossProbability: 0.2,
                    duplicationProbability: 0.05, reorderProbability: 0.2,
                    corruptionProbability: 0.02)
            }
        }
        let first = Self.run(seed: seed, trace: .digest, faults: faults)
        let second = Self.run(seed: seed, trace: .digest, faults: faults)
        #expect(first.simulator.traceDigest == second.simulator.traceDigest, "\(SimulationSeeds.replay(seed))")
        #expect(first.simulator.eventsProcessed == second.simulator.eventsProcessed)
        #expect(first.simulator.now == second.simulator.now)
    }

    // MARK: the run

    /// Five founders joining through node 0, one or two late joiners, the workload, the test's
    /// faults (scheduled by `faults`), everything healed at `healAt`, then run until every
    /// invariant holds (at most 90 s more).
    static func run(
        seed: UInt64, configuration: SimNode.Configuration = .init(),
        founders: [Int: SimNode.Configuration] = [:], trace: SimTraceOptions = [],
        faults: (SimMesh, inout SplitMix64) -> Void
    ) -> SimMesh {
        let mesh = SimMesh(seed: seed, link: calm, configuration: configuration, trace: trace)
        var random = SplitMix64(seed: seed &* 0x2545_F491_4F6C_DD1D &+ 17)
        for index in 0..<5 {
            mesh.addNode(
                joiningThrough: index == 0 ? [] : [SimAddress(0)], at: .zero + .milliseconds(50 * index),
                configuration: founders[index])
        }
        for _ in 0..<(1 + Int(random.next() % 2)) {
            let through = SimAddress(Int(random.next() % 5))
            mesh.addNode(joiningThrough: [through], at: .zero + .milliseconds(10_000 + Int(random.next() % 8000)))
        }
        for address in mesh.nodes { planWorkload(for: mesh.node(address), random: &random) }
        faults(mesh, &random)
        mesh.simulator.at(healAt, "heal") { simulator in
            simulator.defaultLink = calm
            simulator.resetAllLinks()
            simulator.heal()
        }
        mesh.simulator.run(until: healAt)
        mesh.simulator.run(for: .seconds(90), checkEvery: .seconds(1)) { _ in mesh.settled }
        return mesh
    }

    /// From two seconds after the node starts until `workloadEnd`, every 0.5–2 s: attach (a third
    /// of the time; sometimes bytes another member may attach too), remove, a reliable message
    /// to everyone or to some, or an unreliable one.
    static func planWorkload(for node: SimNode, random: inout SplitMix64) {
        let index = node.address.index
        var time = node.now + .milliseconds(2000 + Int(random.next() % 1000))
        var sequence = 0
        while time < workloadEnd {
            let roll = random.next() % 100
            let size = Int(random.next() % 16_000) + 1
            let pick = random.next()
            switch roll {
            case ..<25:
                var bytes = [UInt8](repeating: 0, count: size)
                for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: random.next()) }
                let metadata = Array("n\(index) at \(time)".utf8)
                node.plan(at: time) { $0.attach(bytes, metadata: metadata) }
            case ..<33:
                // The same bytes as other members may add: the same attachment, added twice.
                let shared = patternBytes(4096 * Int(1 + pick % 3), salt: UInt8(pick % 3))
                node.plan(at: time) { $0.attach(shared) }
            case ..<45:
                node.plan(at: time) { $0.removeAttachment(pick: pick) }
            case ..<75:
                let body = numberedPayload(from: index, sequence: sequence, size: 8 + size % 3000)
                node.plan(at: time) { $0.sendMessage(body, mode: .reliable) }
            case ..<87:
                let body = numberedPayload(from: index, sequence: sequence, size: 8 + size % 600)
                node.plan(at: time) { node in
                    let some = node.activeMemberIDs.enumerated().filter { pick >> UInt64($0.offset % 64) & 1 == 1 }.map(
                        \.element)
                    node.sendMessage(body, to: some, mode: .reliable)
                }
            default:
                let body = numberedPayload(from: index, sequence: sequence, size: 8 + size % 2500)
                node.plan(at: time) { $0.sendMessage(body, mode: .unreliable) }
            }
            sequence += 1
            time = time + .milliseconds(500 + Int(random.next() % 1500))
        }
    }

    /// Each invariant on its own, so a failure says which; every message names the seed.
    static func expectInvariants(_ mesh: SimMesh, _ seed: UInt64, sourceLocation: SourceLocation = #_sourceLocation) {
        let replay = SimulationSeeds.replay(seed)
        func expectEmpty(_ violations: [String], _ what: String) {
            #expect(
                violations.isEmpty,
                "\(replay): \(what) at \(mesh.simulator.now): \(violations.prefix(8).joined(separator: "; "))",
                sourceLocation: sourceLocation)
        }
        expectEmpty(mesh.deliveryViolations(), "reliable delivery")
        expectEmpty(mesh.journalViolations(), "journals differ")
        expectEmpty(mesh.chunkViolations(), "bad chunks stored")
        expectEmpty(mesh.replicationViolations(), "attachments not replicated")
        expectEmpty(mesh.leakViolations(), "removed attachments left behind")
        expectEmpty(mesh.viewViolations(), "members dead after healing")
        expectEmpty(mesh.nodeViolations(), "node")
        expectEmpty(mesh.epochViolations(), "key epochs")
        // The run did something: messages went out and attachments were made.
        let sent = mesh.all.reduce(0) { $0 + $1.sentMessages.count }
        let made = mesh.all.reduce(0) { $0 + $1.created.count }
        #expect(
            sent > 10 && made > 5, "\(replay): \(sent) reliable sends, \(made) journal operations",
            sourceLocation: sourceLocation)
    }
}
