import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Whole-node scenarios that only the one core can run: the node the simulation drives is the
/// node that ships, so key epochs, a store that is slow or fails, busy holders and hostile
/// members are simulated with the same routing as `MeshNode`. Same workload, same invariants
/// (`expectInvariants`), same replay (`SIM_SEED=N`) as the scenarios beside them.
extension WholeNodeSimulationTests {
    /// Seeds per scenario in `make test` (`make soak` runs many more).
    static let adversitySeeds = SimulationSeeds.from(defaultCount: 3)

    /// `remover` removes `member` from `start` on, once it knows every node, as a person would
    /// after `status` shows everyone: a member that joined a moment before, still unknown to the
    /// remover, is on no roster and needs a new invite (SECURITY.md §Key epochs). Two removers
    /// that both know everyone at the same instant still remove at the same instant.
    static func remove(_ member: SimAddress, by remover: SimAddress, from start: MeshInstant, in mesh: SimMesh) {
        func attempt(_ node: SimNode) {
            if mesh.nodes.allSatisfy({ $0 == node.address || node.membership.member(mesh.node($0).id) != nil }) {
                node.removeMember(mesh.node(member).id)
            } else {
                node.plan(at: node.now + .milliseconds(500), attempt)
            }
        }
        mesh.node(remover).plan(at: start, attempt)
    }

    /// Plans `action` on `node` from `start` every `interval` until the workload ends.
    static func repeatedly(
        on node: SimNode, from start: MeshInstant, every interval: Duration,
        _ action: @escaping (SimNode) -> Void
    ) {
        var at = start
        while at < workloadEnd {
            node.plan(at: at, action)
            at = at + interval
        }
    }

    @Test(
        "a member is removed while another is offline; the offline one catches up, a third restarts on its disk",
        arguments: adversitySeeds)
    func memberRemovedWhileOneIsOffline(seed: UInt64) {
        var victim = SimAddress(0), offline = SimAddress(0), restarted = SimAddress(0)
        let mesh = Self.run(seed: seed) { mesh, random in
            // Three distinct founders other than n0, which removes. The removal comes after the
            // late joiners are in: one that starts later holds an invite of the epoch left, and
            // is (rightly) never let in.
            var others = Array(mesh.nodes[1..<5])
            victim = others.remove(at: Int(random.next() % 4))
            // Not one a late joiner joins through: that joiner would wait for it past the removal.
            let seeds = Set(mesh.nodes.dropFirst(5).flatMap { mesh.node($0).seeds })
            let candidates = others.filter { !seeds.contains($0) }
            offline = candidates[Int(random.next() % UInt64(candidates.count))]
            others.removeAll { $0 == offline }
            restarted = others[Int(random.next() % UInt64(others.count))]
            let (victim, offline, restarted) = (victim, offline, restarted)
            mesh.simulator.at(.zero + .seconds(1), "loss") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(2), lossProbability: 0.05)
            }
            // The member to be removed adds nothing in its last seconds: an attachment only it held
            // would go with it (an uploader that leaves hands its attachments over; one removed does not).
            mesh.node(victim).cancelPlans(from: .zero + .seconds(16))
            mesh.simulator.at(.zero + .seconds(16), "isolate \(offline)") { $0.isolate(offline) }
            Self.remove(victim, by: SimAddress(0), from: .zero + .seconds(20), in: mesh)
            mesh.simulator.at(.zero + .seconds(22), "crash \(restarted)") { $0.crash(restarted) }
            mesh.simulator.at(.zero + .seconds(24), "restart \(restarted)") { _ in
                mesh.restart(restarted, at: .zero + .seconds(24))
            }
            mesh.simulator.at(.zero + .seconds(27), "heal") { $0.heal() }
        }
        let replay = SimulationSeeds.replay(seed)
        Self.expectInvariants(mesh, seed)
        #expect(mesh.removed == [mesh.node(victim).id], "\(replay): removed \(mesh.removed)")
        #expect(mesh.node(offline).core.epochs.transitions.count == 1, "\(replay): \(offline) did not catch up")
        #expect(mesh.node(restarted).core.epochs.transitions.count == 1, "\(replay): \(restarted) lost the epoch")
        #expect(mesh.node(victim).sessionID != mesh.node(SimAddress(0)).sessionID, "\(replay)")
        let stale = mesh.live.reduce(0) { $0 + ($1.core.counters.dropped[.staleEpoch] ?? 0) }
        #expect(stale > 0, "\(replay): the removed member was never heard from in the old epoch")
    }

    @Test(
        "two members remove two others at the same moment, on slow disks: one epoch without either",
        arguments: adversitySeeds)
    func concurrentRemovalsOnSlowDisks(seed: UInt64) {
        var configuration = SimNode.Configuration()
        configuration.storage.delay = .milliseconds(5)...(.milliseconds(60))
        var removed: [SimAddress] = []
        let mesh = Self.run(seed: seed, configuration: configuration) { mesh, random in
            // n0 and n1 remove two of the others at once; the removed add nothing in their last
            // eight seconds: an attachment only a removed member held goes with it, and on these
            // disks, under loss, a fresh one is not always fetched by others within four.
            var others = Array(mesh.nodes[2..<5])
            removed = [others.remove(at: Int(random.next() % 3)), others.remove(at: Int(random.next() % 2))]
            for address in removed { mesh.node(address).cancelPlans(from: .zero + .seconds(12)) }
            let at = MeshInstant.zero + .seconds(20) + .milliseconds(Int64(random.next() % 20))
            for (remover, member) in zip([SimAddress(0), SimAddress(1)], removed) {
                Self.remove(member, by: remover, from: at, in: mesh)
            }
        }
        Self.expectInvariants(mesh, seed)
        #expect(
            mesh.removed == Set(removed.map { mesh.node($0).id }), "\(SimulationSeeds.replay(seed)): \(mesh.removed)")
    }

    @Test("a slow disk: every storage request takes 1–40 ms, answered in order", arguments: adversitySeeds)
    func slowStorage(seed: UInt64) {
        var configuration = SimNode.Configuration()
        configuration.storage.delay = .milliseconds(1)...(.milliseconds(40))
        let mesh = Self.run(seed: seed, configuration: configuration) { mesh, _ in
            mesh.simulator.at(.zero + .seconds(1), "loss") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(3), lossProbability: 0.1,
                    reorderProbability: 0.1)
            }
        }
        Self.expectInvariants(mesh, seed)
    }

    @Test("a disk that refuses a fifth of its writes for 20 s, then heals", arguments: adversitySeeds)
    func failingStorage(seed: UInt64) {
        var configuration = SimNode.Configuration()
        configuration.storage.delay = .milliseconds(0)...(.milliseconds(5))
        configuration.storage.writeFailureProbability = 0.2
        let mesh = Self.run(seed: seed, configuration: configuration) { mesh, _ in
            for address in mesh.nodes {
                mesh.simulator.at(.zero + .seconds(5), "disk full") { _ in
                    mesh.node(address).setStorage { $0.failingWrites = true }
                }
                mesh.simulator.at(.zero + .seconds(25), "disk freed") { _ in
                    mesh.node(address).setStorage { $0.failingWrites = false }
                }
            }
        }
        let replay = SimulationSeeds.replay(seed)
        Self.expectInvariants(mesh, seed)
        let failed = mesh.all.reduce(0) { $0 + $1.storage.failedWrites }
        #expect(failed > 0, "\(replay): no write failed")
        // A refused write refuses what it was for: adds that failed are not in anyone's journal.
        #expect(mesh.all.contains { !$0.failedCommands.isEmpty }, "\(replay): no command saw the disk refuse")
    }

    @Test("holders whose send queue fills now and then answer busy; the swarm goes on", arguments: adversitySeeds)
    func busyHolders(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, random in
            for address in mesh.nodes.prefix(5) {
                var at = MeshInstant.zero + .milliseconds(3000 + Int(random.next() % 2000))
                while at < Self.workloadEnd {
                    let until = at + .milliseconds(200 + Int(random.next() % 800))
                    mesh.node(address).plan(at: at) { $0.setWritable(false) }
                    mesh.node(address).plan(at: until) { $0.setWritable(true) }
                    at = until + .milliseconds(500 + Int(random.next() % 2500))
                }
            }
        }
        Self.expectInvariants(mesh, seed)
        let refused = mesh.all.reduce(0) { $0 + $1.core.counters.wantsRefused }
        #expect(refused > 0, "\(SimulationSeeds.replay(seed)): no want was ever refused busy")
    }

    // MARK: the fixes SimNode had missed

    @Test(
        "a holder serving bad pieces under loss: a bad chunk mixed from several holders blames none of them",
        arguments: adversitySeeds)
    func liarAmongHolders(seed: UInt64) {
        var liar = SimNode.Configuration()
        liar.storage.corruptReads = true
        let liarIndex = Int(seed % 4) + 1
        let mesh = Self.run(seed: seed, founders: [liarIndex: liar]) { mesh, _ in
            // A holder only: what it added itself nobody else could ever serve.
            mesh.node(mesh.nodes[liarIndex]).cancelPlans(from: .zero)
            mesh.simulator.at(.zero + .seconds(1), "loss") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(2), jitter: .milliseconds(4), lossProbability: 0.15,
                    reorderProbability: 0.2)
            }
        }
        let replay = SimulationSeeds.replay(seed)
        Self.expectInvariants(mesh, seed)
        #expect(mesh.all.reduce(0) { $0 + $1.core.counters.chunksRejected } > 0, "\(replay): the liar was never heard")
    }

    @Test(
        "a joiner between one liar and one honest holder, under loss, fetches without a failure: a mixed bad chunk blames nobody",
        // Seed 39 as well: the liar is the only holder the joiner knows of for a while, and
        // answers every ask for the manifest at once with a bad one. Seed 35: the joiner meets
        // the uploader only after the liar's bad manifest, before hearing it holds anything.
        arguments: adversitySeeds + [35, 39])
    func mixedBadChunks(seed: UInt64) {
        var liar = SimNode.Configuration()
        liar.storage.corruptReads = true
        let lossy = LinkConditions(
            delay: .milliseconds(2), jitter: .milliseconds(4), lossProbability: 0.15,
            reorderProbability: 0.2)
        let mesh = SimMesh(seed: seed, link: lossy)
        let uploader = mesh.addNode(joiningThrough: [], at: .zero)
        let holder = mesh.addNode(
            joiningThrough: [uploader.address], at: .zero + .milliseconds(50), configuration: liar)
        uploader.plan(at: .zero + .seconds(1)) { $0.attach(patternBytes(4096 * 100, salt: UInt8(seed % 251))) }
        // The joiner comes once the liar holds it whole and both holders said so.
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(500)) { _ in
            holder.complete.first.map { uploader.core.holders(of: $0).count == 2 } == true
        }
        let replay = SimulationSeeds.replay(seed)
        #expect(holder.complete.count == 1, "\(replay): the liar never held the attachment")
        let joiner = mesh.addNode(joiningThrough: [uploader.address], at: mesh.simulator.now + .milliseconds(100))
        mesh.simulator.run(for: .seconds(60), checkEvery: .seconds(1)) { _ in joiner.complete.count == 1 }
        #expect(joiner.complete.count == 1, "\(replay): the joiner never got the attachment")
        #expect(
            joiner.core.counters.fetchesFailed == 0, "\(replay): \(joiner.core.counters.fetchesFailed) fetches failed")
        // Every chunk the liar serves is bad, so the joiner must have rejected some once the liar
        // served it anything. Now and then (seeds 116 and 196 of 200) the joiner has fetched
        // everything from the honest uploader before the liar's claims reach it through the
        // loss: then nothing was tested, and nothing failed.
        let liarServed = holder.core.counters.chunksServed
        #expect(
            liarServed == 0 || joiner.core.counters.chunksRejected > 0,
            "\(replay): the liar served \(liarServed) chunks and the joiner rejected none")
        #expect(mesh.chunkViolations().isEmpty, "\(replay)")
    }

    @Test("a member wanting pieces of a few bytes gets none: every holder answers not held", arguments: adversitySeeds)
    func tinyPieceWants(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, _ in
            Self.repeatedly(on: mesh.node(SimAddress(4)), from: .zero + .seconds(6), every: .seconds(2)) { node in
                for holder in mesh.nodes.prefix(4) {
                    let member = mesh.node(holder).id
                    for digest in node.store.chunks.keys.sorted().prefix(3) {
                        node.inject([.chunkWant(ChunkWant(digest: digest, pieceSize: 64))], to: holder, member: member)
                    }
                }
            }
        }
        Self.expectInvariants(mesh, seed)
        let refused = mesh.nodes.prefix(4).reduce(0) { $0 + mesh.node($1).core.counters.wantsMisshapen }
        #expect(refused > 0, "\(SimulationSeeds.replay(seed)): no holder refused a want of 64-byte pieces")
    }

    @Test(
        "membership frames in pairwise datagrams are not membership's: a forged death there changes nothing",
        arguments: adversitySeeds)
    func membershipFramesInPairwiseDatagrams(seed: UInt64) {
        let mesh = Self.run(seed: seed) { mesh, _ in
            Self.repeatedly(on: mesh.node(SimAddress(4)), from: .zero + .seconds(5), every: .seconds(1)) { node in
                for accused in mesh.nodes.prefix(4) {
                    let id = mesh.node(accused).id
                    guard let incarnation = node.membership.member(id)?.incarnation else { continue }
                    for target in mesh.nodes.prefix(4) where target != accused {
                        node.inject(
                            [.dead(Accusation(member: id, incarnation: incarnation, accuser: node.id))],
                            to: target, member: mesh.node(target).id)
                    }
                }
            }
        }
        Self.expectInvariants(mesh, seed)
        let deaths = mesh.deaths
        #expect(deaths.isEmpty, "\(SimulationSeeds.replay(seed)): \(deaths.count) deaths on a calm network")
    }

    @Test(
        "a member flooded with wants, whose every datagram waits 1.5 s behind the flood, is never declared dead while it talks",
        arguments: adversitySeeds)
    func floodedMemberIsNotDeclaredDead(seed: UInt64) {
        let victim = SimAddress(0)
        let mesh = Self.run(seed: seed) { mesh, _ in
            // Node 4 asks the victim for every chunk it holds, whole, 40 wants every 100 ms.
            Self.repeatedly(on: mesh.node(SimAddress(4)), from: .zero + .seconds(5), every: .milliseconds(100)) {
                node in
                let target = mesh.node(victim)
                for digest in target.store.chunks.keys.sorted().prefix(40) {
                    node.inject(
                        [.chunkWant(ChunkWant(digest: digest, pieceSize: 1_000))], to: victim, member: target.id)
                }
            }
            // What a loaded machine does to a flooded member: its answers, probe acks
            // included, leave late, while the others' datagrams reach it at once.
            mesh.simulator.at(.zero + .seconds(5), "the victim's datagrams wait behind the flood") { simulator in
                for other in mesh.nodes where other != victim {
                    simulator.setLink(from: victim, to: other, LinkConditions(delay: .milliseconds(1_500)))
                }
            }
        }
        Self.expectInvariants(mesh, seed)
        let victimID = mesh.node(victim).id
        // The first 1.5 s of the stall are silence, so a suspicion is fair; but the victim talks
        // again before any timeout ends (held open to the maximum), and its refutation comes.
        let deaths = mesh.all.filter { $0.address != victim }.flatMap { observer in
            observer.membershipChanges.filter { $0.member == victimID && $0.status == .dead }
        }
        let first = deaths.first.map { "\($0.time)" } ?? "-"
        #expect(
            deaths.isEmpty,
            "\(SimulationSeeds.replay(seed)): the victim was declared dead \(deaths.count) times, first at \(first)")
        let served = mesh.node(victim).core.counters.chunksServed
        #expect(served > 0, "\(SimulationSeeds.replay(seed)): the flood was not served at all")
    }

    @Test(
        "two members add an attachment and leave a moment later, under 10% loss: nothing is stranded",
        arguments: adversitySeeds)
    func uploadersLeaveAtOnce(seed: UInt64) {
        var leavers: [SimNode] = []
        let mesh = Self.run(seed: seed) { mesh, random in
            mesh.simulator.at(.zero + .seconds(1), "loss") { simulator in
                simulator.defaultLink = LinkConditions(
                    delay: .milliseconds(3), jitter: .milliseconds(2), lossProbability: 0.1)
            }
            // After the late joiners are in (they join through a founder by 18 s).
            for (index, at) in [(3, 20_000), (4, 22_000)] {
                let node = mesh.node(SimAddress(index))
                let time = MeshInstant.zero + .milliseconds(at + Int(random.next() % 500))
                let size = 20_000 + Int(random.next() % 30_000)
                let bytes = random.bytes(size)
                node.cancelPlans(from: time)
                node.plan(at: time) { $0.attach(bytes) }
                node.plan(at: time + .milliseconds(1)) { $0.leave() }
                leavers.append(node)
            }
        }
        Self.expectInvariants(mesh, seed)
        let replay = SimulationSeeds.replay(seed)
        for leaver in leavers {
            #expect(leaver.core.phase == .stopped, "\(replay): \(leaver.address) never left")
            #expect(leaver.leaveReports.first?.unavailable == [], "\(replay): \(leaver.address) stranded attachments")
        }
    }
}
