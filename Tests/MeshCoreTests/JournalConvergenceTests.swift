import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// A journal instance as a simulated process. Each datagram carries one `JournalMessage`:
/// the sender's id, an 8-byte checksum standing in for the AEAD tag (so corrupted datagrams
/// are dropped, as sealing would drop them), then `JournalMessage.encoded`. Local adds and
/// removes come from a script of (time, command) fixed when the node is made.
final class JournalProcess: SimulatedProcess {
    enum Command: Sendable {
        case add(SHA256Digest, metadata: [UInt8])
        case remove(SHA256Digest)
    }

    static let syncTimer: UInt64 = 1
    static let scriptTimer: UInt64 = 2

    private(set) var instance: JournalInstance
    /// Every member this node knows, by address.
    let peers: [SimAddress: NodeID]
    private let addresses: [NodeID: SimAddress]
    private var script: [(time: MeshInstant, command: Command)]
    /// Operations this node made (its adds and removes), in order.
    private(set) var created: [JournalOperation] = []
    private(set) var rejected = 0
    /// Operations this node sends to everyone at start and on every sync tick, outside its
    /// instance (for forgery tests): the instance itself would never hold them.
    var forge: ((JournalState) -> [JournalOperation])?
    private(set) var forged: [JournalOperation] = []

    init(instance: JournalInstance, peers: [SimAddress: NodeID], script: [(time: MeshInstant, command: Command)] = []) {
        self.instance = instance
        self.peers = peers
        self.addresses = Dictionary(uniqueKeysWithValues: peers.map { ($0.value, $0.key) })
        self.script = script.sorted { $0.time < $1.time }
    }

    var id: NodeID { instance.localID }

    func start(now: MeshInstant, context: inout SimContext) {
        var directives: [JournalInstance.Directive] = []
        for (_, peer) in peers.sorted(by: { $0.key < $1.key }) where peer != id {
            directives += instance.memberJoined(peer)
        }
        perform(directives, context: &context)
        scheduleScript(context: &context)
        sendForgeries(context: &context)
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard let (from, payload) = SimEnvelope.open(datagram),
            let message = try? JournalMessage(decoding: Array(payload))
        else {
            rejected += 1
            return
        }
        perform(instance.onMessage(message, from: from), context: &context)
    }

    func timerFired(_ timer: UInt64, now: MeshInstant, context: inout SimContext) {
        switch timer {
        case Self.scriptTimer:
            while let next = script.first, next.time <= now {
                script.removeFirst()
                let directives: [JournalInstance.Directive]
                switch next.command {
                case let .add(attachment, metadata):
                    directives = instance.add(attachment, size: 1024, chunkCount: 1, metadata: metadata)
                case let .remove(attachment):
                    directives = instance.remove(attachment) ?? []  // absent here: nothing to do
                }
                for case let .applied(operations) in directives { created += operations }
                perform(directives, context: &context)
            }
            scheduleScript(context: &context)
        default:
            perform(instance.onTick(now: now), context: &context)
            sendForgeries(context: &context)
        }
    }

    private func scheduleScript(context: inout SimContext) {
        if let next = script.first { context.schedule(timer: Self.scriptTimer, at: next.time) }
    }

    private func sendForgeries(context: inout SimContext) {
        guard let forge else { return }
        let operations = forge(instance.state)
        guard !operations.isEmpty else { return }
        forged += operations
        let datagram = Self.envelope(from: id, .operations(operations))
        for (address, peer) in peers.sorted(by: { $0.key < $1.key }) where peer != id {
            context.send(datagram, to: address)
        }
    }

    private func perform(_ directives: [JournalInstance.Directive], context: inout SimContext) {
        for directive in directives {
            if case let .send(to, message) = directive, let address = addresses[to] {
                context.send(Self.envelope(from: id, message), to: address)
            }
        }
        context.schedule(timer: Self.syncTimer, at: instance.nextDeadline)
    }

    static func envelope(from sender: NodeID, _ message: JournalMessage) -> [UInt8] {
        SimEnvelope.seal(from: sender, payload: message.encoded)
    }
}

/// The journal on the seeded simulated network: every member ends with the same attachment
/// set, the one the operations made, however the network mangled them on the way.
/// Replay a failing seed with `SIM_SEED=N swift test --filter JournalConvergenceTests`.
@Suite("Journal convergence in simulation")
struct JournalConvergenceTests {
    static let lossy = LinkConditions(
        delay: .milliseconds(2), jitter: .milliseconds(5), lossProbability: 0.2,
        duplicationProbability: 0.05, reorderProbability: 0.2,
        reorderDelay: .milliseconds(60), corruptionProbability: 0.01)
    /// The heal: no more loss or corruption; duplication and reordering stay.
    static let healed = LinkConditions(
        delay: .milliseconds(2), jitter: .milliseconds(5),
        duplicationProbability: 0.05, reorderProbability: 0.2,
        reorderDelay: .milliseconds(60))
    static let syncInterval = Duration.milliseconds(200)

    struct Cluster<Authority: RecordAuthority> {
        let simulator: Simulator
        let nodes: [SimAddress]
        let processes: [JournalProcess]
        let authority: Authority

        var created: [JournalOperation] { processes.flatMap(\.created) }

        /// What one journal holds after applying every operation ever made.
        var groundTruth: JournalState {
            var truth = JournalState()
            for operation in created { truth.apply(operation, authority: authority) }
            return truth
        }

        /// Every node holds every operation ever made and shows the same attachments.
        var converged: Bool {
            let ids = Set(created.map(\.id))
            let first = processes[0].instance.state.attachments
            return processes.allSatisfy {
                Set($0.instance.state.operationIDs) == ids && $0.instance.state.attachments == first
            }
        }
    }

    /// `count` nodes that know each other from the start, with a random script of adds and
    /// removes of `poolSize` attachments spread over `[0, activity)`.
    static func cluster<Authority: RecordAuthority>(
        seed: UInt64, count: Int, commands: Int, poolSize: Int,
        activity: Duration, authorities: [Authority]
    ) -> Cluster<Authority> {
        let simulator = Simulator(seed: seed, defaultLink: lossy)
        var rng = SeededGenerator(seed: seed ^ 0x6a09_e667_f3bc_c908)
        let pool = (0..<poolSize).map(JournalFixtures.attachment)
        var scripts = Array(repeating: [(time: MeshInstant, command: JournalProcess.Command)](), count: count)
        for n in 0..<commands {
            let node = Int(rng.next(below: UInt64(count)))
            let time = MeshInstant.zero + rng.duration(upTo: activity)
            let attachment = pool[Int(rng.next(below: UInt64(pool.count)))]
            let command: JournalProcess.Command =
                rng.chance(0.55)
                ? .add(attachment, metadata: Array("n\(node) #\(n)".utf8))
                : .remove(attachment)
            scripts[node].append((time, command))
        }
        let peers = Dictionary(
            uniqueKeysWithValues: (0..<count).map { (SimAddress($0), authorities[$0].signingKey.nodeID) })
        let processes = (0..<count).map { index in
            JournalProcess(
                instance: JournalInstance(
                    authority: authorities[index], syncInterval: syncInterval,
                    seed: seed &* 31 &+ UInt64(index), now: .zero),
                peers: peers, script: scripts[index])
        }
        let nodes = processes.map { simulator.addNode($0) }
        return Cluster(simulator: simulator, nodes: nodes, processes: processes, authority: authorities[0])
    }

    /// Runs the lossy phase (the last three quarters of it split in two halves, so that adds
    /// and removes on either side do not see each other), heals the network, and runs until
    /// every node agrees.
    static func runToConvergence(
        _ cluster: Cluster<some RecordAuthority>, activity: Duration,
        bound: Duration
    ) -> (outcome: SimRunOutcome, took: Duration, divergedAtHeal: Bool) {
        let half = cluster.nodes.count / 2
        cluster.simulator.run(until: MeshInstant.zero + activity / 4)
        cluster.simulator.partition([Array(cluster.nodes.prefix(half)), Array(cluster.nodes.dropFirst(half))])
        cluster.simulator.run(until: MeshInstant.zero + activity + .milliseconds(1))
        cluster.simulator.heal()
        cluster.simulator.defaultLink = healed
        let healedAt = cluster.simulator.now
        let divergedAtHeal = !cluster.converged
        let outcome = cluster.simulator.run(for: bound, checkEvery: .milliseconds(100)) { _ in cluster.converged }
        return (outcome, cluster.simulator.now - healedAt, divergedAtHeal)
    }

    @Test(
        "20 nodes, 20% loss, duplication, reordering, corruption: all end with the ground-truth attachment set",
        arguments: SimulationSeeds.from(defaultCount: 10))
    func twentyNodesConverge(seed: UInt64) throws {
        let activity = Duration.seconds(4)
        let cluster = Self.cluster(
            seed: seed, count: 20, commands: 80, poolSize: 4, activity: activity,
            authorities: (0..<20).map { SimulationAuthority(index: $0) })
        let (outcome, took, divergedAtHeal) = Self.runToConvergence(cluster, activity: activity, bound: .seconds(20))
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome == .satisfied, "\(replay): not converged \(took) after the heal")
        #expect(
            divergedAtHeal, "\(replay): the partition and the loss left the nodes apart, so the heal had work to do")

        let created = cluster.created
        let truth = cluster.groundTruth
        #expect(truth.operationCount == created.count, "\(replay): every operation made is distinct and valid")
        for (index, process) in cluster.processes.enumerated() {
            #expect(
                process.instance.state.attachments == truth.attachments,
                "\(replay): node \(index) differs from the ground truth")
            #expect(process.instance.state.operationCount == created.count, "\(replay): node \(index)")
        }
        // The run exercised what it claims to: collisions of adds and removes, and a mangled network.
        #expect(created.contains { $0.kind == .remove } && created.contains { $0.kind == .add }, "\(replay)")
        #expect(Set(created.map(\.attachment)).count > 1, "\(replay)")
        let statistics = cluster.simulator.statistics
        #expect(statistics.dropped.loss > 0, "\(replay)")
        #expect(cluster.processes.map(\.rejected).reduce(0, +) > 0, "\(replay): corrupted datagrams were dropped")
    }

    @Test(
        "a node injecting forged operations (wrong key, tampered metadata) changes nothing anywhere",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func forgeriesAreAppliedNowhere(seed: UInt64) throws {
        let count = 6
        let identities = (0..<count).map { JournalFixtures.ed25519(UInt8(0x40 + $0)) }
        let activity = Duration.seconds(2)
        let cluster = Self.cluster(
            seed: seed, count: count, commands: 30, poolSize: 3, activity: activity,
            authorities: identities)
        let forger = cluster.processes[count - 1]
        let victim = identities[0]
        let impostor = ImpersonatingAuthority(signingKey: victim.signingKey, signer: identities[count - 1])
        let forgedAttachment = JournalFixtures.attachment(666)
        // Each time: a remove of everything present and an add, claiming to be the victim but
        // signed by the forger; and a real operation with its metadata changed after signing.
        forger.forge = { state in
            var forged = state.attachments.compactMap { state.makeRemove($0.id, authority: impostor) }
            forged.append(
                state.makeAdd(
                    forgedAttachment, size: 1, chunkCount: 1, metadata: Array("evil".utf8), authority: impostor))
            if var tampered = state.allOperations.last(where: { $0.kind == .add }) {
                tampered.metadata = Array("tampered".utf8)
                forged.append(tampered)
            }
            return forged
        }
        let (outcome, took, _) = Self.runToConvergence(cluster, activity: activity, bound: .seconds(20))
        let replay = SimulationSeeds.replay(seed)
        #expect(outcome == .satisfied, "\(replay): not converged \(took) after the heal")

        let forgedIDs = Set(forger.forged.map(\.id))
        #expect(forger.forged.contains { $0.kind == .remove }, "\(replay): the forger tried to remove real attachments")
        #expect(forger.forged.contains { $0.metadata == Array("tampered".utf8) }, "\(replay)")
        let truth = cluster.groundTruth
        #expect(truth.operationCount == cluster.created.count)
        for (index, process) in cluster.processes.enumerated() {
            let state = process.instance.state
            #expect(
                forgedIDs.allSatisfy { state.operation($0) == nil }, "\(replay): node \(index) holds a forged operation"
            )
            #expect(!state.isPresent(forgedAttachment), "\(replay): node \(index)")
            #expect(state.attachments == truth.attachments, "\(replay): node \(index) differs from the ground truth")
        }
    }
}
