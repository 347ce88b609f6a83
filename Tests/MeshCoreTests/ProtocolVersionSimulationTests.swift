import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Protocol versions (PROTOCOL.md §3, "Protocol versions"): members of this release learn each
/// other's from version frames; a member of release 0.9.0, which knows no such frame, is taken for
/// protocol 1 and everything else keeps working with it; a member whose versions and ours do not
/// meet is reported once.
///
///     SIM_SEED=N swift test --filter ProtocolVersion
@Suite("Protocol versions in simulation")
struct ProtocolVersionSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    static func link(_ seed: UInt64) -> LinkConditions {
        LinkConditions(
            delay: .milliseconds(3), jitter: .milliseconds(2), lossProbability: [0, 0.05, 0.1][Int(seed % 3)])
    }

    /// A node that acts as release 0.9.0 does: no version frame sent, one received is malformed.
    static var releaseZeroNine: SimNode.Configuration {
        var configuration = SimNode.Configuration()
        configuration.settings.knowsVersionFrames = false
        return configuration
    }

    @Test("members of this release learn each other's protocol 2 and stop asking", arguments: seeds)
    func currentMembersLearnEachOther(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        for index in 0..<3 {
            mesh.addNode(joiningThrough: index == 0 ? [] : [SimAddress(0)], at: .zero + .milliseconds(50 * index))
        }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(500)) { _ in
            // Joiners' introductions go beside version frames, asked again until held.
            mesh.all.allSatisfy { node in
                node.activeMemberIDs.count == 2
                    && node.activeMemberIDs.allSatisfy { node.core.versions.versions(of: $0) == .this }
                    && node.core.versions.nextDeadline == nil
            }
        }
        for node in mesh.all {
            #expect(node.activeMemberIDs.count == 2, "\(replay): \(node.address) sees \(node.activeMemberIDs)")
            for member in node.activeMemberIDs {
                #expect(
                    node.core.versions.versions(of: member) == .this,
                    "\(replay): \(node.address) holds \(String(describing: node.core.versions.versions(of: member)))")
                #expect(node.core.versions.spoken(with: member) == ProtocolVersion.current, "\(replay)")
            }
            #expect(node.core.versions.nextDeadline == nil, "\(replay): \(node.address) still asks")
            #expect(node.protocolGaps.isEmpty, "\(replay): \(node.protocolGaps)")
            #expect(node.core.counters.dropped[.malformed, default: 0] == 0, "\(replay)")
        }
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    @Test("two homes behind NATs learn each other's version once punched, not protocol 1 before", arguments: seeds)
    func homesBehindNATsLearnOncePunched(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = HolePunchingSimulationTests.mesh(seed: seed, first: .masquerade, second: .masquerade)
        let (a, b) = (mesh.node(SimAddress(1)), mesh.node(SimAddress(2)))
        mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(250)) { _ in
            a.core.versions.versions(of: b.id) != nil && b.core.versions.versions(of: a.id) != nil
        }
        #expect(HolePunchingSimulationTests.punched(a, b), "\(replay): never punched")
        #expect(a.core.versions.versions(of: b.id) == .this, "\(replay)")
        #expect(b.core.versions.versions(of: a.id) == .this, "\(replay)")
    }

    @Test(
        "a member of release 0.9.0 is taken for protocol 1: messages, the journal and fetches work both ways",
        arguments: seeds)
    func previousReleaseKeepsWorking(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        // Either may create the session.
        let oldFirst = seed % 2 == 0
        let first = mesh.addNode(
            joiningThrough: [], at: .zero, configuration: oldFirst ? Self.releaseZeroNine : nil)
        let second = mesh.addNode(
            joiningThrough: [first.address], at: .zero + .milliseconds(50),
            configuration: oldFirst ? nil : Self.releaseZeroNine)
        let (old, new) = oldFirst ? (first, second) : (second, first)
        var random = SplitMix64(seed: seed)
        let fromOld = random.bytes(20_000)
        let fromNew = random.bytes(30_000)
        old.plan(at: .zero + .seconds(2)) { $0.attach(fromOld) }
        new.plan(at: .zero + .seconds(2)) { $0.attach(fromNew) }
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(500)) { _ in
            new.core.versions.versions(of: old.id) != nil && new.core.attachments.count == 2
                && old.core.attachments.count == 2
        }
        #expect(new.core.versions.versions(of: old.id) == .unannounced, "\(replay): not taken for protocol 1")
        #expect(new.core.versions.spoken(with: old.id) == 1, "\(replay)")
        // Only the version datagrams were dropped, at most one per attempt (a recheck is a minute away).
        let dropped = old.core.counters.dropped[.malformed, default: 0]
        #expect(
            dropped >= 1 && dropped <= UInt64(NodeSettings().versions.attempts),
            "\(replay): the old node dropped \(dropped) datagrams as malformed")
        #expect(new.protocolGaps.isEmpty && old.protocolGaps.isEmpty, "\(replay): \(new.protocolGaps)")

        new.sendMessage(Array("from the new one".utf8), to: [old.id], mode: .reliable)
        old.sendMessage(Array("from the old one".utf8), to: [new.id], mode: .reliable)
        let oldContent = try #require(
            old.core.attachments.first { old.complete.contains($0.content) }?.content, "\(replay)")
        let newContent = try #require(
            new.core.attachments.first { new.complete.contains($0.content) }?.content, "\(replay)")
        old.load(newContent)
        new.load(oldContent)
        mesh.simulator.run(for: .seconds(40), checkEvery: .milliseconds(500)) { _ in
            old.complete.contains(newContent) && new.complete.contains(oldContent)
                && old.reliableReceived[new.id]?.isEmpty == false && new.reliableReceived[old.id]?.isEmpty == false
        }
        #expect(old.reliableReceived[new.id]?.count == 1, "\(replay): the old node got no message")
        #expect(new.reliableReceived[old.id]?.count == 1, "\(replay): the new node got no message")
        #expect(old.complete.contains(newContent), "\(replay): the old node did not fetch the new one's attachment")
        #expect(new.complete.contains(oldContent), "\(replay): the new node did not fetch the old one's attachment")
        #expect(
            old.core.counters.dropped[.malformed, default: 0] <= dropped + 1,
            "\(replay): asked again more often than once a recheck")
        let problems = mesh.nodeViolations()
        #expect(problems.isEmpty, "\(replay): \(problems.prefix(4))")
    }

    @Test("a member whose versions and ours do not meet is reported once on each side, and told ours", arguments: seeds)
    func gapIsReportedOnce(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = SimMesh(seed: seed, link: Self.link(seed))
        let ours = mesh.addNode(joiningThrough: [], at: .zero)
        var future = SimNode.Configuration()
        future.settings.spokenVersions = SpokenVersions(current: 4, oldest: 3)
        let theirs = mesh.addNode(joiningThrough: [ours.address], at: .zero + .milliseconds(50), configuration: future)
        // Long enough for every retry, messages on the way: still one report each.
        for second in 2..<20 {
            ours.plan(at: .zero + .seconds(second)) {
                $0.sendMessage([UInt8(second)], to: [theirs.id], mode: .reliable)
            }
        }
        mesh.simulator.run(until: .zero + .seconds(40))
        #expect(ours.protocolGaps.count == 1, "\(replay): \(ours.protocolGaps)")
        #expect(ours.protocolGaps.first?.member == theirs.id, "\(replay)")
        #expect(ours.protocolGaps.first?.theirs == SpokenVersions(current: 4, oldest: 3), "\(replay)")
        // Told by our answer what we speak.
        #expect(theirs.protocolGaps.count == 1, "\(replay): \(theirs.protocolGaps)")
        #expect(theirs.protocolGaps.first?.theirs == .this, "\(replay)")
        #expect(theirs.core.versions.versions(of: ours.id) == .this, "\(replay)")
    }
}
