import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// A graceful leave strands nothing (PROTOCOL.md §6, leaving): a member that adds an attachment
/// and leaves at once, before anyone else holds it, first has another live member take it, so
/// a member that joins after it is gone still loads it. The other members are `--lazy` here:
/// nothing but the handover makes them fetch.
///
/// Invariant: an attachment is unavailable only when the leave said so (nobody alive to take
/// it, or `leave --now`), or when every member that held it whole crashed.
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter LeaveHandover
@Suite("Leave handover in simulation")
struct LeaveHandoverSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 4)
    static let addAt = MeshInstant.zero + .seconds(3)

    static var lazy: SimNode.Configuration {
        var configuration = SimNode.Configuration()
        configuration.settings.lazy = true
        return configuration
    }

    /// The uploader (node 0) and two lazy members; node 0 adds `size` random bytes at 3 s and
    /// leaves a millisecond after the add is in its journal.
    static func mesh(seed: UInt64, size: Int, link: LinkConditions, waiting: Bool = true) -> (SimMesh, [UInt8]) {
        let mesh = SimMesh(seed: seed, link: link, configuration: lazy)
        var random = SplitMix64(seed: seed &+ 99)
        let bytes = random.bytes(size)
        let uploader = mesh.addNode(joiningThrough: [], at: .zero, configuration: .init())
        mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(50))
        mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(100))
        uploader.plan(at: addAt) { $0.attach(bytes) }
        uploader.plan(at: addAt + .milliseconds(1)) { $0.leave(waitingForReplication: waiting) }
        return (mesh, bytes)
    }

    /// A member that joins after the uploader left and loads every attachment.
    static func lateJoiner(_ mesh: SimMesh, at time: MeshInstant) -> SimNode {
        mesh.addNode(joiningThrough: [SimAddress(1), SimAddress(2)], at: time, configuration: .init())
    }

    @Test("add then leave at once, under loss: the late joiner loads it after the uploader left", arguments: seeds)
    func addThenLeave(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let loss = [0.05, 0.1, 0.15][Int(seed % 3)]
        let link = LinkConditions(
            delay: .milliseconds(5), jitter: .milliseconds(3), lossProbability: loss,
            duplicationProbability: 0.02, reorderProbability: 0.1)
        let (mesh, _) = Self.mesh(seed: seed, size: 40_000 + Int(seed % 7) * 9_000, link: link)
        let joiner = Self.lateJoiner(mesh, at: .zero + .seconds(40))
        mesh.simulator.run(until: .zero + .seconds(40))
        let uploader = mesh.node(SimAddress(0))
        #expect(uploader.core.phase == .stopped, "\(replay): the uploader never left")
        #expect(uploader.leaveReports.count == 1, "\(replay): \(uploader.failedCommands)")
        let report = uploader.leaveReports.first
        #expect(report?.unavailable == [], "\(replay): the leave stranded \(report?.unavailable ?? [])")
        #expect(report?.handedOver.count == 1, "\(replay): \(String(describing: report))")
        mesh.simulator.run(for: .seconds(60), checkEvery: .seconds(1)) { _ in
            !joiner.journal.state.attachments.isEmpty && joiner.complete.count == joiner.journal.state.attachments.count
        }
        #expect(joiner.journal.state.attachments.count == 1, "\(replay): the joiner never heard of the attachment")
        #expect(joiner.complete.count == 1, "\(replay): the late joiner could not load what the uploader left behind")
        expectClean(mesh, replay)
    }

    @Test("the member asked to take it crashes mid-handover: another is asked", arguments: seeds)
    func receiverDies(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let link = LinkConditions(delay: .milliseconds(5), jitter: .milliseconds(2), lossProbability: 0.05)
        // 400 chunks of 4 KiB: the first member asked is still fetching when it crashes.
        let (mesh, _) = Self.mesh(seed: seed, size: 1_600_000, link: link)
        var crashed: SimAddress?
        // The first member seen fetching crashes, part-way.
        func watch(_ simulator: Simulator) {
            guard crashed == nil else { return }
            for address in [SimAddress(1), SimAddress(2)] {
                let node = mesh.node(address)
                if let held = node.core.fetches.values.first?.held, held > 20 {
                    crashed = address
                    simulator.crash(address)
                    return
                }
            }
            simulator.after(.milliseconds(20), "watch") { watch($0) }
        }
        mesh.simulator.at(Self.addAt, "watch") { watch($0) }
        let joiner = Self.lateJoiner(mesh, at: .zero + .seconds(45))
        mesh.simulator.run(until: .zero + .seconds(45))
        let uploader = mesh.node(SimAddress(0))
        #expect(crashed != nil, "\(replay): nobody fetched, or fetching never passed 20 chunks")
        #expect(uploader.core.phase == .stopped, "\(replay): the uploader never left")
        let report = uploader.leaveReports.first
        #expect(report?.unavailable == [], "\(replay): the leave stranded \(report?.unavailable ?? [])")
        let survivor = [SimAddress(1), SimAddress(2)].first { $0 != crashed }.map(mesh.node)
        #expect(survivor?.complete.count == 1, "\(replay): the member that stayed does not hold it")
        mesh.simulator.run(for: .seconds(60), checkEvery: .seconds(1)) { _ in joiner.complete.count == 1 }
        #expect(joiner.complete.count == 1, "\(replay): the late joiner could not load it")
    }

    @Test("leave --now, and a leave with nobody else alive, say what becomes unavailable", arguments: seeds.prefix(2))
    func leavesThatStrand(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, _) = Self.mesh(
            seed: seed, size: 20_000, link: LinkConditions(delay: .milliseconds(2)), waiting: false)
        mesh.simulator.run(until: .zero + .seconds(10))
        let report = mesh.node(SimAddress(0)).leaveReports.first
        #expect(report?.unavailable.count == 1 && report?.alone == false, "\(replay): \(String(describing: report))")
        #expect(mesh.node(SimAddress(1)).complete.isEmpty, "\(replay): a lazy member fetched without being asked")

        // Alone: the two others crash first.
        let alone = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2)), configuration: Self.lazy)
        let uploader = alone.addNode(joiningThrough: [], at: .zero, configuration: .init())
        alone.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(50))
        uploader.plan(at: Self.addAt) { $0.attach([1, 2, 3]) }
        alone.simulator.at(Self.addAt + .milliseconds(500), "crash") { $0.crash(SimAddress(1)) }
        uploader.plan(at: Self.addAt + .seconds(8)) { $0.leave() }
        alone.simulator.run(until: .zero + .seconds(20))
        let lonely = uploader.leaveReports.first
        #expect(lonely?.alone == true && lonely?.unavailable.count == 1, "\(replay): \(String(describing: lonely))")
        #expect(uploader.core.phase == .stopped, "\(replay)")
    }

    @Test(
        "a second leave during the handover waits with the first; --now then cuts it short", arguments: seeds.prefix(2))
    func leavesDuringHandover(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        // A slow link: 400 chunks take a while, so the handover is still under way.
        let link = LinkConditions(delay: .milliseconds(40), jitter: .milliseconds(5), lossProbability: 0.02)
        let (mesh, _) = Self.mesh(seed: seed, size: 1_600_000, link: link)
        let uploader = mesh.node(SimAddress(0))
        uploader.plan(at: Self.addAt + .milliseconds(300)) { $0.leave() }
        mesh.simulator.run(until: Self.addAt + .milliseconds(400))
        #expect(uploader.core.leaveProgress(now: uploader.now) != nil, "\(replay): no handover under way")
        #expect(uploader.leaveReports.isEmpty, "\(replay): a leave completed during the handover")
        uploader.plan(at: Self.addAt + .milliseconds(500)) { $0.leave(waitingForReplication: false) }
        mesh.simulator.run(until: Self.addAt + .milliseconds(600))
        #expect(uploader.leaveReports.count == 3, "\(replay): \(uploader.leaveReports.count) leaves completed")
        #expect(Set(uploader.leaveReports.map(\.unavailable)).count == 1, "\(replay): one report for all three")
        #expect(uploader.leaveReports.first?.unavailable.count == 1, "\(replay): cut short, it is unavailable")
        #expect(uploader.core.phase == .stopped, "\(replay)")
    }

    @Test(
        "reliable messages sent a moment before a leave, under loss: the leave waits for their acknowledgements, every member gets them, each send completes as sent",
        arguments: seeds)
    func leaveWaitsForItsMessages(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        // Up to 20% each way: at 30%, a message and its ack get through together half the time,
        // and some seeds (2 to 4 in 100) need more than the drain's 5 s for every ack.
        let loss = [0.1, 0.2, 0.15][Int(seed % 3)]
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(20), jitter: .milliseconds(5)))
        let sender = mesh.addNode(joiningThrough: [], at: .zero)
        for index in 1...3 { mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(50 * index)) }
        let sendAt = MeshInstant.zero + .seconds(5)
        mesh.simulator.at(.zero + .milliseconds(4_999), "loss") { simulator in
            simulator.defaultLink = LinkConditions(
                delay: .milliseconds(20), jitter: .milliseconds(5), lossProbability: loss)
        }
        let bodies = (0..<5).map { index in Array("before leaving \(index)".utf8) }
        for (index, body) in bodies.enumerated() {
            sender.plan(at: sendAt + .milliseconds(index)) { $0.sendMessage(body, mode: .reliable) }
        }
        // Before any acknowledgement can come back (a round trip is 40 ms).
        sender.plan(at: sendAt + .milliseconds(10)) { $0.leave() }
        mesh.simulator.run(until: sendAt + .seconds(20))
        let gone = mesh.node(SimAddress(0))
        #expect(gone.core.phase == .stopped, "\(replay): the sender never left")
        #expect(gone.leaveReports.count == 1, "\(replay): \(gone.failedCommands)")
        #expect(gone.sentMessages.count == bodies.count, "\(replay)")
        for message in gone.sentMessages {
            #expect(
                gone.completions[message.request] == [:],
                "\(replay): a send before the leave ended \(String(describing: gone.completions[message.request]))")
        }
        for member in (1...3).map({ mesh.node(SimAddress($0)) }) {
            let heard = member.reliableReceived[gone.id] ?? []
            #expect(heard == bodies, "\(replay): \(member.address) heard \(heard.count) of \(bodies.count)")
        }
        expectClean(mesh, replay)
    }

    @Test(
        "a leave that waited its bound reports each send per member: delivered to the reachable, not acknowledged by the cut-off"
    )
    func leaveReportsUnacknowledgedSendsPerMember() {
        let mesh = SimMesh(seed: 5, link: LinkConditions(delay: .milliseconds(10)))
        let sender = mesh.addNode(joiningThrough: [], at: .zero)
        let reachable = mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(50))
        let cutOff = mesh.addNode(joiningThrough: [SimAddress(0)], at: .zero + .milliseconds(100))
        mesh.simulator.run(until: .zero + .seconds(5), checkEvery: .milliseconds(100)) { _ in
            mesh.all.allSatisfy { $0.activeMemberIDs.count == 2 }
        }
        // Nothing of the sender's reaches one member, whose own datagrams still come: it stays
        // alive in the sender's view, and never acknowledges.
        mesh.simulator.setLink(from: sender.address, to: cutOff.address, LinkConditions(lossProbability: 1))
        sender.plan(at: mesh.simulator.now + .milliseconds(20)) {
            $0.sendMessage(Array("last words".utf8), mode: .reliable)
            $0.leave()
        }
        mesh.simulator.run(for: .seconds(12), checkEvery: .milliseconds(100)) { _ in sender.core.phase == .stopped }
        #expect(sender.core.phase == .stopped, "the sender never left")
        let request = sender.sentMessages.last?.request
        #expect(
            request.flatMap { sender.completions[$0] } == [cutOff.id: .timedOut],
            "the send ended \(String(describing: request.flatMap { sender.completions[$0] }))")
        #expect(reachable.reliableReceived[sender.id] == [Array("last words".utf8)])
        #expect(sender.violations.isEmpty, "\(sender.violations)")
    }

    func expectClean(_ mesh: SimMesh, _ replay: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let problems = mesh.nodeViolations() + mesh.chunkViolations() + mesh.journalViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(6))", sourceLocation: sourceLocation)
    }
}
