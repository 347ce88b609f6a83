import MeshCore
import MeshTestKit
import Testing

/// A cut that outlasts the forgetting of the dead (`forgetAfter`): Wi-Fi gone for minutes, a
/// laptop carried between homes, a partition into two halves. Both sides hold the other dead,
/// then forget it; once the network is back they must find each other again, without a new
/// invite and without a restart (`LostMembers`), and a node restarted meanwhile too.
@Suite("A long outage (simulation)")
struct LongOutageSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    /// Four members that all see each other, and the seed's replay line.
    static func formedMesh(seed: UInt64) -> (SimMesh, String) {
        let replay = SimulationSeeds.replay(seed)
        let mesh = MutualRemovalSimulationTests.formedMesh(seed: seed)
        #expect(mesh.all.allSatisfy { $0.activeMemberIDs.count == 3 }, "\(replay): the mesh never formed")
        return (mesh, replay)
    }

    /// Cuts the mesh into `groups` (every node in one) and runs until each running node has
    /// forgotten every node of the other groups, for at most four minutes.
    static func cut(_ mesh: SimMesh, into groups: [[SimAddress]], replay: String) {
        mesh.simulator.partition(groups)
        let group = { (node: SimNode) in groups.firstIndex { $0.contains(node.address) } }
        let running = { mesh.all.filter { $0.core.phase != .stopped } }
        let forgotten = { (node: SimNode) in
            mesh.all.allSatisfy { group($0) == group(node) || node.core.membership.member($0.id) == nil }
        }
        mesh.simulator.run(for: .seconds(240), checkEvery: .milliseconds(500)) { _ in running().allSatisfy(forgotten) }
        for node in running() {
            #expect(forgotten(node), "\(replay): \(node.address) never forgot the other side")
        }
    }

    /// Heals and waits until every node sees every other alive and a reliable message from
    /// each reaches every other.
    static func expectHealed(_ mesh: SimMesh, replay: String) {
        mesh.simulator.heal()
        let others = mesh.all.count - 1
        mesh.simulator.run(for: .seconds(120), checkEvery: .milliseconds(500)) { _ in
            mesh.all.allSatisfy { $0.activeMemberIDs.count == others }
        }
        for node in mesh.all {
            #expect(
                node.activeMemberIDs.count == others,
                "\(replay): \(node.address) sees \(node.activeMemberIDs.count) others")
        }
        for (index, node) in mesh.all.enumerated() {
            node.plan(at: mesh.simulator.now + .milliseconds(100)) {
                $0.sendMessage([0xB0, UInt8(index)], mode: .reliable)
            }
        }
        mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
            mesh.all.allSatisfy { receiver in
                mesh.all.enumerated().allSatisfy { index, sender in
                    sender.address == receiver.address
                        || receiver.reliableReceived[sender.id]?.contains([0xB0, UInt8(index)]) == true
                }
            }
        }
        for receiver in mesh.all {
            for (index, sender) in mesh.all.enumerated() where sender.address != receiver.address {
                #expect(
                    receiver.reliableReceived[sender.id]?.contains([0xB0, UInt8(index)]) == true,
                    "\(replay): \(receiver.address) got nothing from \(sender.address)")
            }
        }
    }

    @Test(
        "a member cut off for minutes, past the time the dead are forgotten, is back once its network is",
        arguments: seeds)
    func memberCutOffForMinutesComesBack(seed: UInt64) {
        let (mesh, replay) = Self.formedMesh(seed: seed)
        let laptop = mesh.node(SimAddress(3))
        Self.cut(mesh, into: [[laptop.address], [SimAddress(0), SimAddress(1), SimAddress(2)]], replay: replay)
        #expect(laptop.core.membership.lost.entries.count == 3, "\(replay): the laptop holds no lost members")
        Self.expectHealed(mesh, replay: replay)
        #expect(mesh.all.allSatisfy { $0.core.membership.lost.isEmpty }, "\(replay): a member found is still lost")
    }

    @Test("two halves apart for minutes merge again once the partition heals", arguments: seeds)
    func halvesApartForMinutesMerge(seed: UInt64) {
        let (mesh, replay) = Self.formedMesh(seed: seed)
        Self.cut(mesh, into: [[SimAddress(0), SimAddress(1)], [SimAddress(2), SimAddress(3)]], replay: replay)
        Self.expectHealed(mesh, replay: replay)
    }

    @Test(
        "a member removed while another is cut off: the one cut off moves to the new epoch once back, whether the removal came before or after it was forgotten",
        arguments: seeds)
    func removalDuringALongOutage(seed: UInt64) {
        for removeBeforeForgetting in [true, false] {
            let (mesh, seedReplay) = Self.formedMesh(seed: seed)
            let replay = seedReplay + (removeBeforeForgetting ? " (removal first)" : " (forgetting first)")
            let (remover, removed, laptop) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)), SimAddress(3))
            func remove() {
                remover.plan(at: mesh.simulator.now + .milliseconds(100)) { $0.removeMember(removed.id) }
                mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
                    mesh.node(SimAddress(2)).core.epochs.removed.contains(removed.id)
                }
            }
            let groups = [[laptop], [SimAddress(0), SimAddress(1), SimAddress(2)]]
            if removeBeforeForgetting {
                mesh.simulator.partition(groups)
                mesh.simulator.run(for: .seconds(30), checkEvery: .milliseconds(250)) { _ in
                    remover.core.membership.member(mesh.node(laptop).id)?.status == .dead
                }
                #expect(
                    remover.core.membership.member(mesh.node(laptop).id)?.status == .dead,
                    "\(replay): the laptop was never dead to the remover")
                remove()
            }
            Self.cut(mesh, into: groups, replay: replay)
            if !removeBeforeForgetting { remove() }
            let staying = mesh.all.filter { $0.address != removed.address }
            #expect(remover.core.epochs.removed == [removed.id], "\(replay): \(remover.core.epochs.removed)")
            mesh.simulator.heal()
            mesh.simulator.run(for: .seconds(120), checkEvery: .milliseconds(500)) { _ in
                staying.allSatisfy { $0.sessionID == remover.sessionID && $0.activeMemberIDs.count == 2 }
            }
            for node in staying {
                #expect(node.sessionID == remover.sessionID, "\(replay): \(node.address) is in another epoch")
                #expect(
                    node.activeMemberIDs.count == 2,
                    "\(replay): \(node.address) sees \(node.activeMemberIDs.count) others alive")
            }
        }
    }

    @Test(
        "a member let in at the instant of a removal, by a member the remover had not heard from, is left off its roster: once it has lost the others, it is told",
        arguments: seeds)
    func memberLeftOffARosterIsTold(seed: UInt64) {
        let (mesh, replay) = Self.formedMesh(seed: seed)
        let (remover, removed) = (mesh.node(SimAddress(0)), mesh.node(SimAddress(1)))
        // The newcomer joins through n2 just before n0 removes n1; n0 never hears it directly,
        // and what the others say to n0 comes 0.8 s late until after the removal.
        let start = mesh.simulator.now
        let at = start + .seconds(1)
        let slow = LinkConditions(delay: .milliseconds(800))
        let usual = mesh.simulator.link(from: SimAddress(2), to: remover.address)
        mesh.simulator.at(start + .milliseconds(450), "slow to n0") { simulator in
            for other in [SimAddress(1), SimAddress(2), SimAddress(3)] {
                simulator.setLink(from: other, to: remover.address, slow)
            }
        }
        let newcomer = mesh.addNode(joiningThrough: [SimAddress(2)], at: start + .milliseconds(500))
        mesh.simulator.setLink(between: remover.address, and: newcomer.address, LinkConditions(lossProbability: 1))
        // Its join goes through at once, whatever the seed's loss: the case is a member that took part.
        for other in [SimAddress(2), SimAddress(3)] {
            mesh.simulator.setLink(between: other, and: newcomer.address, LinkConditions(delay: .milliseconds(4)))
        }
        remover.plan(at: at) { $0.removeMember(removed.id) }
        mesh.simulator.at(at + .milliseconds(200), "usual to n0") { simulator in
            for other in [SimAddress(1), SimAddress(2), SimAddress(3)] {
                simulator.setLink(from: other, to: remover.address, usual)
            }
        }
        mesh.simulator.run(for: .seconds(180), checkEvery: .milliseconds(500)) { _ in
            !newcomer.outOfDateNotices.isEmpty
        }
        let rotation = remover.core.epochs.transitions.last?.rotation
        #expect(rotation?.owes(newcomer.id) == false, "\(replay): the remover knew the newcomer")
        #expect(newcomer.core.joinProgress == nil, "\(replay): the newcomer never joined")
        #expect(newcomer.sessionID != remover.sessionID, "\(replay): the newcomer was let in after all")
        #expect(
            newcomer.outOfDateNotices.map(\.by) == [remover.id],
            "\(replay): told \(newcomer.outOfDateNotices.map(\.by)), the remover \(remover.id), at \(newcomer.outOfDateNotices.map(\.time))"
        )
        #expect(newcomer.core.phase != .stopped, "\(replay): it keeps trying")
        #expect(newcomer.core.leftOutBy == remover.id, "\(replay): status would not say it was left out")
    }

    @Test("a node that lost every member and restarted finds them through where they were last", arguments: seeds)
    func restartAfterLosingEveryMember(seed: UInt64) {
        let (mesh, replay) = Self.formedMesh(seed: seed)
        let laptop = SimAddress(3)
        Self.cut(mesh, into: [[laptop], [SimAddress(0), SimAddress(1), SimAddress(2)]], replay: replay)
        let remembered = mesh.node(laptop).core.remembered
        #expect(remembered.members.isEmpty, "\(replay): \(remembered.members.map(\.name)) still remembered as members")
        #expect(
            remembered.lost(removed: []).count == 3,
            "\(replay): former members \(remembered.former.map(\.name)) without their addresses")
        // No seeds: only what the data dir kept.
        mesh.restart(laptop, at: mesh.simulator.now + .milliseconds(100), seeds: [])
        mesh.simulator.run(for: .seconds(2))
        Self.expectHealed(mesh, replay: replay)
    }

    @Test(
        "a node restarted within its lost members' day looks for them for what is left of it; restarted after it, no more",
        arguments: seeds)
    func theDayOfLostMembersCountsAcrossRestarts(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        var configuration = SimNode.Configuration()
        configuration.settings.membership.lostMemberRetention = .seconds(300)
        let mesh = SimMesh(
            seed: seed, link: LinkConditions(delay: .milliseconds(4), jitter: .milliseconds(2)),
            configuration: configuration)
        for index in 0..<4 {
            mesh.addNode(joiningThrough: index == 0 ? [] : [SimAddress(0)], at: .zero + .milliseconds(50 * index))
        }
        mesh.simulator.run(until: .zero + .seconds(30), checkEvery: .milliseconds(250)) { _ in
            mesh.all.allSatisfy { $0.activeMemberIDs.count == 3 }
        }
        let laptop = SimAddress(3)
        Self.cut(mesh, into: [[laptop], [SimAddress(0), SimAddress(1), SimAddress(2)]], replay: replay)
        // Restarted a minute later: the members are lost still, and were lost a minute before it
        // (the wall clock counts whole seconds).
        mesh.simulator.run(for: .seconds(60))
        mesh.restart(laptop, at: mesh.simulator.now + .milliseconds(100), seeds: [])
        mesh.simulator.run(for: .seconds(2))
        let lost = mesh.node(laptop).core.membership.lost.entries
        #expect(lost.count == 3, "\(replay): \(lost.count) lost after the restart")
        let now = mesh.simulator.now
        #expect(
            lost.values.allSatisfy { $0.age(at: now) >= .seconds(60) }, "\(replay): the restart started their day over")
        // Down until their day is over: started again, it looks for nobody, and its data dir no
        // longer says where they were.
        mesh.simulator.crash(laptop)
        mesh.simulator.run(for: .seconds(300))
        mesh.restart(laptop, at: mesh.simulator.now + .milliseconds(100), seeds: [])
        mesh.simulator.run(for: .seconds(2))
        let restarted = mesh.node(laptop)
        #expect(restarted.core.membership.lost.isEmpty, "\(replay): still looked for after their day")
        #expect(restarted.core.remembered.lost(removed: []).isEmpty, "\(replay): the data dir still says where")
        #expect(restarted.core.remembered.former.count == 3, "\(replay): their names went too")
    }
}
