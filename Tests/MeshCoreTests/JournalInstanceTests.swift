import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The journal's sync state machine, driven by hand (no network).
@Suite("Journal instance (anti-entropy and holdings)")
struct JournalInstanceTests {
    static let authorities = (0..<4).map { SimulationAuthority(index: 100 + $0) }
    static var ids: [NodeID] { authorities.map(\.signingKey.nodeID) }

    static func instance(_ index: Int, syncInterval: Duration = .seconds(10)) -> JournalInstance {
        JournalInstance(authority: authorities[index], syncInterval: syncInterval, seed: UInt64(index + 1), now: .zero)
    }

    /// The messages among `directives`, in order.
    static func sends(_ directives: [JournalInstance.Directive]) -> [(to: NodeID, message: JournalMessage)] {
        directives.compactMap { if case let .send(to, message) = $0 { (to, message) } else { nil } }
    }

    static func operations(in directives: [JournalInstance.Directive]) -> [JournalOperation] {
        sends(directives).flatMap { send -> [JournalOperation] in
            if case let .operations(operations) = send.message { operations } else { [] }
        }
    }

    @Test("a member that joins gets our operation ids and our holdings, once")
    func memberJoinedSendsHaveAndHolding() {
        var a = Self.instance(0)
        let x = JournalFixtures.attachment(1), y = JournalFixtures.attachment(2)
        _ = a.add(x, size: 1, chunkCount: 1, metadata: [])
        _ = a.add(y, size: 1, chunkCount: 1, metadata: [])
        _ = a.setHoldings([y, x])
        let joined = a.memberJoined(Self.ids[1])
        #expect(
            joined == [
                .send(to: Self.ids[1], .have(a.state.operationIDs)),
                .send(to: Self.ids[1], .holding([x, y].sorted())),
            ])
        #expect(a.state.operationIDs.count == 2)
        #expect(a.memberJoined(Self.ids[1]).isEmpty, "already a member")
        #expect(a.memberJoined(a.localID).isEmpty, "not a member of itself")
        // A fresh node says it has nothing.
        var fresh = Self.instance(2)
        #expect(
            fresh.memberJoined(Self.ids[0]) == [
                .send(to: Self.ids[0], .have([])), .send(to: Self.ids[0], .holding([])),
            ])
    }

    @Test("a have is answered with the operations the peer lacks and a want for ours")
    func haveAnswersWithMissingAndWant() throws {
        var a = Self.instance(0), b = Self.instance(1)
        let shared = a.state.makeAdd(
            JournalFixtures.attachment(0), size: 1, chunkCount: 1, metadata: [], authority: Self.authorities[2])
        _ = a.onMessage(.operations([shared]), from: Self.ids[2])
        _ = b.onMessage(.operations([shared]), from: Self.ids[2])
        _ = a.add(JournalFixtures.attachment(1), size: 1, chunkCount: 1, metadata: Array("a".utf8))
        _ = b.add(JournalFixtures.attachment(2), size: 1, chunkCount: 1, metadata: Array("b".utf8))
        let onlyA = Set(a.state.operationIDs).subtracting(b.state.operationIDs)
        let onlyB = Set(b.state.operationIDs).subtracting(a.state.operationIDs)
        #expect(onlyA.count == 1 && onlyB.count == 1)

        // B tells A what it has; A sends what B lacks and asks for what A lacks.
        let answer = a.onMessage(.have(b.state.operationIDs), from: Self.ids[1])
        let sends = Self.sends(answer)
        #expect(sends.allSatisfy { $0.to == Self.ids[1] })
        #expect(Set(Self.operations(in: answer).map(\.id)) == onlyA)
        #expect(sends.contains { $0.message == .want(Array(onlyB)) })
        #expect(!answer.contains(.holdersChanged))

        // B receives them, then answers the want.
        var applied: [JournalOperation] = []
        for send in sends {
            for directive in b.onMessage(send.message, from: Self.ids[0]) {
                if case let .applied(operations) = directive { applied += operations }
                if case let .send(to, message) = directive {
                    #expect(to == Self.ids[0])
                    #expect(
                        a.onMessage(message, from: Self.ids[1]).contains {
                            if case .applied = $0 { true } else { false }
                        })
                }
            }
        }
        #expect(Set(applied.map(\.id)) == onlyA)
        #expect(a.state.operationIDs == b.state.operationIDs)
        #expect(a.state.attachments == b.state.attachments)
        #expect(a.state.attachments.count == 3)

        // In step: a have changes nothing and asks for nothing.
        #expect(a.onMessage(.have(b.state.operationIDs), from: Self.ids[1]).isEmpty)
        // A want of unknown ids sends nothing; of known ones, exactly those.
        #expect(a.onMessage(.want([OperationID(high: 9, low: 9)]), from: Self.ids[1]).isEmpty)
        let one = a.state.operationIDs[0]
        #expect(Self.operations(in: a.onMessage(.want([one]), from: Self.ids[1])).map(\.id) == [one])
    }

    @Test("operations already known, or invalid, apply nothing")
    func operationsApplyOnce() {
        var a = Self.instance(0)
        let add = a.state.makeAdd(
            JournalFixtures.attachment(1), size: 1, chunkCount: 1, metadata: [], authority: Self.authorities[1])
        #expect(a.onMessage(.operations([add]), from: Self.ids[1]) == [.applied([add])])
        #expect(a.onMessage(.operations([add]), from: Self.ids[2]).isEmpty)
        var forged = a.state.makeAdd(
            JournalFixtures.attachment(2), size: 1, chunkCount: 1, metadata: [], authority: Self.authorities[1])
        forged.metadata = [1]
        #expect(a.onMessage(.operations([forged]), from: Self.ids[1]).isEmpty)
        #expect(a.state.operationCount == 1)
    }

    @Test("local adds and removes go to every member and are reported as applied")
    func localChangesPublish() throws {
        var a = Self.instance(0)
        _ = a.memberJoined(Self.ids[1])
        _ = a.memberJoined(Self.ids[2])
        let x = JournalFixtures.attachment(1)
        let added = a.add(x, size: 3, chunkCount: 1, metadata: [7])
        let add = try #require(a.state.allOperations.first)
        // To every member, in id order, then reported.
        let members = [Self.ids[1], Self.ids[2]].sorted()
        #expect(added == members.map { .send(to: $0, .operations([add])) } + [.applied([add])])
        #expect(a.state.isPresent(x))
        let removal = a.remove(x)
        let removed = try #require(removal)
        #expect(Self.operations(in: removed).count == 2)
        #expect(!a.state.isPresent(x))
        #expect(a.remove(x) == nil, "nothing to remove")
        #expect(a.remove(JournalFixtures.attachment(2)) == nil)
    }

    @Test("a prepared change is seen by nobody until it is published (the shell stores it in between)")
    func preparedChangesWaitForPublish() {
        var a = Self.instance(0)
        _ = a.memberJoined(Self.ids[1])
        let x = JournalFixtures.attachment(1)
        let add = a.prepareAdd(x, size: 3, chunkCount: 1, metadata: [])
        #expect(!a.state.isPresent(x) && a.state.operationCount == 0, "applied before it was stored")
        // An anti-entropy exchange meanwhile does not carry it either.
        #expect(a.onMessage(.have([]), from: Self.ids[1]).isEmpty)
        #expect(a.publish(add) == [.send(to: Self.ids[1], .operations([add])), .applied([add])])
        #expect(a.state.isPresent(x))
        #expect(a.prepareRemove(JournalFixtures.attachment(2)) == nil, "nothing to remove")
        let removal = a.prepareRemove(x)
        #expect(a.state.isPresent(x), "removed before it was stored")
        if let removal { _ = a.publish(removal) }
        #expect(!a.state.isPresent(x))
    }

    @Test("holdings: tracked per member, reported once per change, forgotten when the member leaves")
    func holdings() {
        var a = Self.instance(0)
        let x = JournalFixtures.attachment(1), y = JournalFixtures.attachment(2)
        let (b, c) = (Self.ids[1], Self.ids[2])
        _ = a.memberJoined(b)
        _ = a.memberJoined(c)
        #expect(a.holders(of: x).isEmpty)
        #expect(a.onMessage(.holding([x]), from: b) == [.holdersChanged])
        #expect(a.onMessage(.holding([x]), from: b).isEmpty, "no change")
        #expect(a.onMessage(.holding([x, y]), from: c) == [.holdersChanged])
        #expect(a.holders(of: x) == [b, c].sorted())
        #expect(a.holders(of: y) == [c])
        // Our own holdings count, and are announced to every member.
        let announced = a.setHoldings([x])
        #expect(announced == [b, c].sorted().map { .send(to: $0, .holding([x])) } + [.holdersChanged])
        #expect(a.setHoldings([x]).isEmpty)
        #expect(a.holders(of: x) == [a.localID, b, c].sorted())
        // A member that no longer holds y.
        #expect(a.onMessage(.holding([]), from: c) == [.holdersChanged])
        #expect(a.holders(of: y).isEmpty)
        #expect(a.onMessage(.holding([y]), from: c) == [.holdersChanged])
        // Leaving drops its holdings.
        #expect(a.memberLeft(c) == [.holdersChanged])
        #expect(a.holders(of: x) == [a.localID, b].sorted())
        #expect(a.holders(of: y).isEmpty)
        #expect(a.memberLeft(c).isEmpty, "already gone")
        #expect(a.memberLeft(Self.ids[3]).isEmpty, "never held anything")
        // A member that left is no longer sent our holdings.
        #expect(a.setHoldings([x, y]) == [.send(to: b, .holding([x, y].sorted())), .holdersChanged])
    }

    @Test("a member back from a false death with the same boot holds what it held; a new boot says again")
    func holdingsAfterAFalseDeath() {
        var a = Self.instance(0)
        let x = JournalFixtures.attachment(1)
        let (b, c) = (Self.ids[1], Self.ids[2])
        _ = a.memberJoined(b)
        _ = a.memberJoined(c)
        _ = a.onMessage(.holding([x]), from: b)
        _ = a.onMessage(.holding([x]), from: c)
        #expect(a.memberLeft(b) == [.holdersChanged])
        #expect(a.memberLeft(c) == [.holdersChanged])
        #expect(a.holders(of: x).isEmpty)
        // b refutes its death: the same process, which never knew and will not say it again.
        let back = a.memberJoined(b, sameBoot: true)
        #expect(back.contains(.holdersChanged))
        #expect(a.holders(of: x) == [b])
        // c comes back as a new boot: it says what it holds itself.
        #expect(!a.memberJoined(c).contains(.holdersChanged))
        #expect(a.holders(of: x) == [b])
        // Forgotten for good: a later false return restores nothing.
        _ = a.memberLeft(b)
        a.memberForgotten(b)
        #expect(!a.memberJoined(b, sameBoot: true).contains(.holdersChanged))
        #expect(a.holders(of: x).isEmpty)
    }

    @Test("every sync interval, one member gets our ids and holdings; none before the deadline")
    func tickSyncs() {
        var a = Self.instance(0, syncInterval: .milliseconds(200))
        #expect(a.nextDeadline == MeshInstant.zero + .milliseconds(200))
        #expect(a.onTick(now: MeshInstant.zero + .milliseconds(200)).isEmpty, "no members yet")
        _ = a.memberJoined(Self.ids[1])
        _ = a.memberJoined(Self.ids[2])
        _ = a.add(JournalFixtures.attachment(1), size: 1, chunkCount: 1, metadata: [])
        #expect(a.onTick(now: MeshInstant.zero + .milliseconds(300)).isEmpty, "before the deadline")
        var chosen: Set<NodeID> = []
        var now = a.nextDeadline
        for _ in 0..<40 {
            let directives = a.onTick(now: now)
            #expect(directives.count == 2)
            let sends = Self.sends(directives)
            #expect(sends.count == 2 && sends[0].to == sends[1].to)
            #expect(sends[0].message == .have(a.state.operationIDs))
            #expect(sends[1].message == .holding([]))
            chosen.formUnion(sends.map(\.to))
            #expect(a.nextDeadline == now + .milliseconds(200))
            now = a.nextDeadline
        }
        #expect(chosen == [Self.ids[1], Self.ids[2]], "peers are picked at random among the members")
    }

    @Test("a have from a member lacking many operations is answered in messages the messenger can carry")
    func largeAnswersAreBatched() {
        var a = Self.instance(0)
        let authority = Self.authorities[1]
        var state = JournalState()
        var operations: [JournalOperation] = []
        for n in 0..<3000 {
            let add = state.makeAdd(
                JournalFixtures.attachment(n), size: 1, chunkCount: 1,
                metadata: n % 500 == 0 ? [UInt8](repeating: 1, count: 60_000) : [], authority: authority)
            state.apply(add, authority: authority)
            operations.append(add)
        }
        _ = a.onMessage(.operations(operations), from: Self.ids[1])
        #expect(a.state.operationCount == 3000)
        let answer = a.onMessage(.have([]), from: Self.ids[2])
        let messages = Self.sends(answer).map(\.message)
        #expect(messages.count > 1)
        #expect(
            messages.allSatisfy { $0.encoded.count <= 256 * 1024 }, "\(messages.map(\.encoded.count).max() ?? 0) bytes")
        #expect(Set(Self.operations(in: answer).map(\.id)) == Set(a.state.operationIDs))
    }

    @Test("restore reapplies stored operations and drops invalid ones")
    func restore() {
        var source = Self.instance(1)
        _ = source.add(JournalFixtures.attachment(1), size: 1, chunkCount: 1, metadata: [])
        _ = source.add(JournalFixtures.attachment(2), size: 1, chunkCount: 1, metadata: [])
        var stored = source.state.allOperations
        var bad = stored[0]
        bad.clock += 10
        stored.append(bad)
        var restored = Self.instance(1)
        restored.restore(stored)
        #expect(restored.state.operationIDs == source.state.operationIDs)
        #expect(restored.state.attachments == source.state.attachments)
    }
}
