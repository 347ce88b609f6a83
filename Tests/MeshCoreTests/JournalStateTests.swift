@testable import MeshCore
import NIOCore
import MeshCrypto
import MeshTestKit
import Testing

/// The journal's observed-remove set of signed operations.
@Suite("Journal state (observed-remove set)")
struct JournalStateTests {
    let alice = SimulationAuthority(index: 1)
    let bob = SimulationAuthority(index: 2)
    let carol = SimulationAuthority(index: 3)
    let x = JournalFixtures.attachment(1)
    let y = JournalFixtures.attachment(2)

    static func meta(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("an add makes the attachment present, with its size, chunk count, metadata and author")
    func addMakesPresent() throws {
        var state = JournalState()
        #expect(!state.isPresent(x))
        #expect(state.makeRemove(x, authority: alice) == nil, "nothing to remove")
        let add = state.makeAdd(x, size: 1000, chunkCount: 4, metadata: Self.meta("m"), authority: alice)
        #expect(add.kind == .add && add.clock == 1 && add.author == alice.signingKey)
        #expect(!state.isPresent(x), "makeAdd does not apply")
        #expect(state.apply(add, authority: alice) == true)
        #expect(state.isPresent(x))
        let entry = try #require(state.entry(x))
        #expect(
            entry
                == AttachmentEntry(
                    id: .of(x), content: x, size: 1000, chunkCount: 4, metadata: Self.meta("m"),
                    addedBy: alice.signingKey.nodeID, clock: 1))
        #expect(state.attachments == [entry])
        #expect(state.entry(y) == nil)
        #expect(state.operationIDs == [add.id])
        #expect(state.operation(add.id) == add)
    }

    @Test("a remove that saw the add makes the attachment absent")
    func removeCoversAdd() throws {
        var state = JournalState()
        let add = state.makeAdd(x, size: 1, chunkCount: 1, metadata: [], authority: alice)
        state.apply(add, authority: alice)
        let remove = try #require(state.makeRemove(x, authority: bob))
        #expect(remove.kind == .remove && remove.observedAdds == [add.id] && remove.clock == 2)
        #expect(state.apply(remove, authority: bob) == true)
        #expect(!state.isPresent(x))
        #expect(state.attachments.isEmpty)
        #expect(state.makeRemove(x, authority: bob) == nil, "already absent")
        // The remove arriving first (out of order) still wins once the add arrives.
        var reordered = JournalState()
        #expect(reordered.apply(remove, authority: bob) == true)
        #expect(reordered.apply(add, authority: alice) == true)
        #expect(!reordered.isPresent(x))
    }

    @Test("an add the remover had not seen survives the remove")
    func concurrentAddSurvives() throws {
        // Alice adds; Bob and Carol both see it. Bob removes while Carol, not having seen the
        // remove, adds the same attachment again.
        var origin = JournalState()
        let first = origin.makeAdd(x, size: 10, chunkCount: 1, metadata: Self.meta("first"), authority: alice)
        origin.apply(first, authority: alice)
        var bobState = origin, carolState = origin
        let remove = try #require(bobState.makeRemove(x, authority: bob))
        bobState.apply(remove, authority: bob)
        let second = carolState.makeAdd(x, size: 10, chunkCount: 1, metadata: Self.meta("second"), authority: carol)
        carolState.apply(second, authority: carol)
        #expect(!bobState.isPresent(x))
        #expect(carolState.isPresent(x))

        for order in JournalFixtures.permutations([first, remove, second]) {
            var state = JournalState()
            #expect(state.applyAll(order, authority: alice) == 3)
            let entry = try #require(state.entry(x), "order \(order.map(\.kind))")
            #expect(entry.metadata == Self.meta("second"))
            #expect(entry.addedBy == carol.signingKey.nodeID)
        }
    }

    @Test("an add made after seeing the remove makes the attachment present again")
    func reAddAfterRemove() throws {
        var state = JournalState()
        let add = state.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("v1"), authority: alice)
        state.apply(add, authority: alice)
        let remove = try #require(state.makeRemove(x, authority: bob))
        state.apply(remove, authority: bob)
        let again = state.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("v2"), authority: alice)
        #expect(again.clock == 3)
        state.apply(again, authority: alice)
        #expect(state.entry(x)?.metadata == Self.meta("v2"))
        // And a second remove, having seen the re-add, removes it for good.
        let removeAgain = try #require(state.makeRemove(x, authority: carol))
        #expect(removeAgain.observedAdds == [again.id], "only the add still in force")
        state.apply(removeAgain, authority: carol)
        #expect(!state.isPresent(x))
        for order in JournalFixtures.permutations([add, remove, again, removeAgain]) {
            var replay = JournalState()
            replay.applyAll(order, authority: alice)
            #expect(!replay.isPresent(x))
        }
    }

    @Test("the latest add's metadata wins: by Lamport clock first")
    func latestMetadataByClock() throws {
        var state = JournalState()
        // Bob's add carries a lower clock although his author id may be larger or smaller.
        let early = state.makeAdd(x, size: 5, chunkCount: 1, metadata: Self.meta("early"), authority: bob)
        state.apply(early, authority: bob)
        let late = state.makeAdd(x, size: 5, chunkCount: 1, metadata: Self.meta("late"), authority: alice)
        #expect(late.clock == early.clock + 1)
        for order in [[early, late], [late, early]] {
            var replay = JournalState()
            replay.applyAll(order, authority: alice)
            #expect(replay.entry(x)?.metadata == Self.meta("late"))
            #expect(replay.entry(x)?.addedBy == alice.signingKey.nodeID)
            #expect(replay.entry(x)?.clock == late.clock)
        }
        // A remove of the latest only leaves the earlier add (and its metadata) in force.
        var partial = JournalState()
        partial.apply(late, authority: alice)
        let removeLate = try #require(partial.makeRemove(x, authority: carol))
        for order in JournalFixtures.permutations([early, late, removeLate]) {
            var replay = JournalState()
            replay.applyAll(order, authority: alice)
            #expect(replay.entry(x)?.metadata == Self.meta("early"))
        }
    }

    @Test("the latest add's metadata wins: equal clocks go to the larger author id")
    func latestMetadataTieByAuthor() throws {
        let empty = JournalState()
        let fromAlice = empty.makeAdd(x, size: 5, chunkCount: 1, metadata: Self.meta("alice"), authority: alice)
        let fromBob = empty.makeAdd(x, size: 5, chunkCount: 1, metadata: Self.meta("bob"), authority: bob)
        #expect(fromAlice.clock == fromBob.clock)
        let winner = alice.signingKey.nodeID > bob.signingKey.nodeID ? "alice" : "bob"
        for order in [[fromAlice, fromBob], [fromBob, fromAlice]] {
            var state = JournalState()
            state.applyAll(order, authority: alice)
            #expect(state.entry(x)?.metadata == Self.meta(winner))
        }
    }

    @Test("applying an operation twice changes nothing and returns false")
    func duplicateApply() throws {
        var state = JournalState()
        let add = state.makeAdd(x, size: 1, chunkCount: 1, metadata: [], authority: alice)
        #expect(state.apply(add, authority: alice) == true)
        #expect(state.apply(add, authority: alice) == false)
        let remove = try #require(state.makeRemove(x, authority: alice))
        #expect(state.apply(remove, authority: alice) == true)
        #expect(state.apply(remove, authority: alice) == false)
        // Replaying the add after its remove does not bring it back.
        #expect(state.apply(add, authority: alice) == false)
        #expect(!state.isPresent(x))
        #expect(state.operationCount == 2)
    }

    @Test("the same content added twice is two attachments; removing one leaves the other and the content")
    func perAddIdentity() throws {
        var state = JournalState()
        let first = state.makeAdd(
            AttachmentID(high: 1, low: 1), content: x, size: 10, chunkCount: 1,
            metadata: Self.meta("one"), authority: alice)
        state.apply(first, authority: alice)
        let second = state.makeAdd(
            AttachmentID(high: 2, low: 2), content: x, size: 10, chunkCount: 1,
            metadata: Self.meta("two"), authority: bob)
        state.apply(second, authority: bob)
        #expect(state.attachments.map(\.id) == [AttachmentID(high: 1, low: 1), AttachmentID(high: 2, low: 2)])
        #expect(state.attachments.map(\.metadata) == [Self.meta("one"), Self.meta("two")], "each keeps its own")
        #expect(state.presentContents == [x], "one content")
        let remove = try #require(state.makeRemove(AttachmentID(high: 1, low: 1), authority: bob))
        #expect(remove.observedAdds == [first.id], "names only the first add")
        state.apply(remove, authority: bob)
        #expect(state.attachments.map(\.id) == [AttachmentID(high: 2, low: 2)])
        #expect(state.hasContent(x), "the other attachment keeps the content")
        // An add that claims an id already naming other bytes is refused.
        let clash = state.makeAdd(
            AttachmentID(high: 2, low: 2), content: y, size: 1, chunkCount: 1, metadata: [],
            authority: alice)
        #expect(state.apply(clash, authority: alice) == false)
        #expect(!state.hasContent(y))
    }

    @Test("operations of format 1 (before attachment ids) are read, keep their ids and signatures, and migrate")
    func formatOneOperations() throws {
        // What a journal log written before per-add ids holds: adds and removes naming content only.
        let legacyAdd = JournalOperation(
            kind: .add, attachmentID: nil, attachment: x, author: alice.signingKey, clock: 1,
            size: 5, chunkCount: 1, metadata: Self.meta("old")
        ).signed(by: alice)
        let legacyAgain = JournalOperation(
            kind: .add, attachmentID: nil, attachment: x, author: bob.signingKey, clock: 2,
            size: 5, chunkCount: 1, metadata: Self.meta("again")
        ).signed(by: bob)
        var buffer = ByteBuffer()
        legacyAdd.encode(into: &buffer)
        #expect(buffer.getInteger(at: 0, as: UInt8.self) == 1, "format 1's add kind on the wire")
        let decoded = try JournalOperation(decoding: &buffer)
        #expect(decoded == legacyAdd && decoded.isLegacy && decoded.id == legacyAdd.id)
        var state = JournalState()
        #expect(state.apply(decoded, authority: alice) && state.apply(legacyAgain, authority: bob))
        // One attachment, as before: its id derived from the content, the latest add's metadata.
        let entry = try #require(state.attachments.first)
        #expect(state.attachments.count == 1 && entry.id == AttachmentID(legacyContent: x) && entry.content == x)
        #expect(entry.metadata == Self.meta("again"))
        // A remove made now (format 2) covers both old adds; a new add of the same bytes is its own.
        let fresh = state.makeAdd(
            AttachmentID(high: 7, low: 7), content: x, size: 5, chunkCount: 1, metadata: [],
            authority: alice)
        state.apply(fresh, authority: alice)
        let remove = try #require(state.makeRemove(entry.id, authority: alice))
        #expect(Set(remove.observedAdds) == [legacyAdd.id, legacyAgain.id] && !remove.isLegacy)
        state.apply(remove, authority: alice)
        #expect(state.attachments.map(\.id) == [AttachmentID(high: 7, low: 7)])
    }

    @Test("the Lamport clock follows the largest clock applied")
    func lamportClock() {
        var state = JournalState()
        let far = JournalOperation(kind: .add, attachment: x, author: bob.signingKey, clock: 41, size: 1, chunkCount: 1)
            .signed(by: bob)
        state.apply(far, authority: bob)
        #expect(state.clock == 41)
        #expect(state.makeAdd(y, size: 1, chunkCount: 1, metadata: [], authority: alice).clock == 42)
        let old = JournalOperation(kind: .add, attachment: y, author: bob.signingKey, clock: 3, size: 1, chunkCount: 1)
            .signed(by: bob)
        state.apply(old, authority: bob)
        #expect(state.clock == 41, "never goes back")
    }

    @Test("a member's operation at the largest clock does not make our next add or remove trap")
    func clockAtMaximum() throws {
        var state = JournalState()
        let top = JournalOperation(
            kind: .add, attachment: x, author: bob.signingKey, clock: .max, size: 1, chunkCount: 1,
            metadata: Self.meta("top")
        ).signed(by: bob)
        #expect(state.apply(top, authority: bob) == true)
        #expect(state.clock == .max)
        // Saturates: still the latest clock, so the author id decides among them.
        let add = state.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("mine"), authority: alice)
        #expect(add.clock == .max)
        #expect(state.apply(add, authority: alice) == true)
        let winner = alice.signingKey.nodeID > bob.signingKey.nodeID ? "mine" : "top"
        #expect(state.entry(x)?.metadata == Self.meta(winner))
        let remove = try #require(state.makeRemove(x, authority: alice))
        #expect(remove.clock == .max)
        #expect(state.apply(remove, authority: alice) == true)
        #expect(!state.isPresent(x))
    }

    @Test("missing(_:) names the ids not held; all operations come sorted by clock")
    func missingAndOrder() {
        var state = JournalState()
        let a = state.makeAdd(x, size: 1, chunkCount: 1, metadata: [], authority: alice)
        state.apply(a, authority: alice)
        let b = state.makeAdd(y, size: 1, chunkCount: 1, metadata: [], authority: bob)
        state.apply(b, authority: bob)
        let absent = OperationID(high: 1, low: 2)
        #expect(state.missing([a.id, absent, b.id]) == [absent])
        #expect(state.missing([]) == [])
        #expect(state.allOperations == [a, b])
        #expect(state.operationIDs == [a.id, b.id].sorted())
    }

    // MARK: forgeries (real signatures)

    @Test("operations signed by another key than their author are ignored")
    func forgedSignature() throws {
        let victim = JournalFixtures.ed25519(1), mallory = JournalFixtures.ed25519(2)
        let impostor = ImpersonatingAuthority(signingKey: victim.signingKey, signer: mallory)
        var state = JournalState()
        let forgedAdd = state.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("evil"), authority: impostor)
        #expect(forgedAdd.author == victim.signingKey)
        #expect(state.apply(forgedAdd, authority: victim) == false)
        #expect(state.apply(forgedAdd, authority: mallory) == false, "whichever authority checks")
        #expect(state.operationCount == 0 && !state.isPresent(x))

        // A forged remove of the victim's real add does not remove it.
        let real = state.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("real"), authority: victim)
        #expect(state.apply(real, authority: victim) == true)
        let forgedRemove = try #require(state.makeRemove(x, authority: impostor))
        #expect(state.apply(forgedRemove, authority: victim) == false)
        #expect(state.isPresent(x))
        // No signature, or a truncated one.
        var unsigned = real
        unsigned.signature = []
        unsigned.clock += 1
        #expect(state.apply(unsigned, authority: victim) == false)
        var short = real.signed(by: victim)
        short.signature.removeLast()
        #expect(state.apply(short, authority: victim) == false)
        #expect(state.operationCount == 1)
    }

    @Test("changing a signed operation (metadata, clock, attachment, observed adds) invalidates it")
    func tamperedAfterSigning() throws {
        let alice = JournalFixtures.ed25519(3)
        var state = JournalState()
        let add = state.makeAdd(x, size: 100, chunkCount: 1, metadata: Self.meta("honest"), authority: alice)
        var tampered = [JournalOperation]()
        var metadata = add; metadata.metadata = Self.meta("forged"); tampered.append(metadata)
        var clock = add; clock.clock = 1000; tampered.append(clock)
        var attachment = add; attachment.attachment = y; tampered.append(attachment)
        var size = add; size.size = 1; tampered.append(size)
        for operation in tampered {
            #expect(state.apply(operation, authority: alice) == false)
        }
        #expect(state.apply(add, authority: alice) == true)
        let other = state.makeAdd(y, size: 1, chunkCount: 1, metadata: [], authority: alice)
        #expect(state.apply(other, authority: alice) == true)
        var remove = try #require(state.makeRemove(x, authority: alice))
        remove.observedAdds.append(other.id)  // widen it to cover another add
        #expect(state.apply(remove, authority: alice) == false)
        #expect(Set(state.presentDigests) == [x, y])
    }

    @Test("operations over the limits are refused even when properly signed")
    func overLimits() {
        let alice = JournalFixtures.ed25519(4)
        var state = JournalState()
        let big = [UInt8](repeating: 0x61, count: JournalOperation.maxMetadataBytes + 1)
        let tooBig = state.makeAdd(x, size: 1, chunkCount: 1, metadata: big, authority: alice)
        #expect(state.apply(tooBig, authority: alice) == false)
        let atLimit = state.makeAdd(x, size: 1, chunkCount: 1, metadata: Array(big.dropLast()), authority: alice)
        #expect(state.apply(atLimit, authority: alice) == true)
        // A remove may not carry metadata.
        let removeWithMetadata = JournalOperation(
            kind: .remove, attachment: x, author: alice.signingKey, clock: 9,
            metadata: [1], observedAdds: [atLimit.id]
        ).signed(by: alice)
        #expect(state.apply(removeWithMetadata, authority: alice) == false)
        let tooManyObserved = JournalOperation(
            kind: .remove, attachment: x, author: alice.signingKey, clock: 9,
            observedAdds: (0...UInt64(JournalOperation.maxObservedAdds)).map { OperationID(high: 0, low: $0) } + [
                atLimit.id
            ]
        ).signed(by: alice)
        #expect(state.apply(tooManyObserved, authority: alice) == false)
        #expect(state.isPresent(x))
        #expect(state.operationCount == 1)
    }

    // MARK: convergence

    /// A small concurrent history over two attachments and three authors: adds, removes that
    /// saw some adds but not others, a re-add after a remove.
    func history() throws -> [JournalOperation] {
        var a = JournalState(), b = JournalState(), c = JournalState()
        let a1 = a.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("a1"), authority: alice)
        a.apply(a1, authority: alice)
        // concurrent with a1
        let c1 = c.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("c1"), authority: carol)
        c.apply(c1, authority: carol)
        b.apply(a1, authority: bob)
        let b1 = try #require(b.makeRemove(x, authority: bob))  // saw a1 only
        b.apply(b1, authority: bob)
        let b2 = b.makeAdd(y, size: 2, chunkCount: 1, metadata: Self.meta("b2"), authority: bob)
        b.apply(b2, authority: bob)
        c.applyAll([a1, b1, b2], authority: carol)
        let c2 = try #require(c.makeRemove(y, authority: carol))  // saw b2
        c.apply(c2, authority: carol)
        a.applyAll([b1], authority: alice)  // x now absent at a (a1 covered, c1 unseen)
        let a2 = a.makeAdd(x, size: 1, chunkCount: 1, metadata: Self.meta("a2"), authority: alice)  // re-add
        return [a1, c1, b1, b2, c2, a2]
    }

    @Test("every order of a concurrent history gives the same attachment set")
    func permutationsConverge() throws {
        let operations = try history()
        let orders = JournalFixtures.permutations(operations)
        #expect(orders.count == 720)
        #expect(Set(orders.map { $0.map(\.id) }).count == 720, "the permutations are distinct")
        var reference = JournalState()
        reference.applyAll(operations, authority: alice)
        // x: c1 and a2 survive (b1 saw a1 only), a2 is the latest; y: removed.
        #expect(reference.presentDigests == [x])
        #expect(reference.entry(x)?.metadata == Self.meta("a2"))
        for order in orders {
            var state = JournalState()
            #expect(state.applyAll(order, authority: alice) == operations.count)
            #expect(
                state.attachments == reference.attachments,
                "order \(order.map { String(decoding: $0.metadata, as: UTF8.self) })")
            #expect(state.clock == reference.clock)
        }
    }

    @Test("random histories between replicas converge in random orders, duplicates included")
    func randomHistoriesConverge() {
        let seed = testSeed(0x0b5e_7ed)
        var rng = SplitMix64(seed: seed)
        let authorities = (1...4).map { SimulationAuthority(index: $0) }
        let pool = (0..<3).map(JournalFixtures.attachment)
        for round in 0..<testIterations(30) {
            // Replicas make operations and share them with some others now and then.
            var replicas = Array(repeating: JournalState(), count: authorities.count)
            var all: [JournalOperation] = []
            for _ in 0..<25 {
                let r = Int.random(in: 0..<replicas.count, using: &rng)
                let target = pool[Int.random(in: 0..<pool.count, using: &rng)]
                if Bool.random(using: &rng), let remove = replicas[r].makeRemove(target, authority: authorities[r]) {
                    replicas[r].apply(remove, authority: authorities[r])
                    all.append(remove)
                } else {
                    let add = replicas[r].makeAdd(
                        target, size: 1, chunkCount: 1, metadata: rng.bytes(3), authority: authorities[r])
                    replicas[r].apply(add, authority: authorities[r])
                    all.append(add)
                }
                let to = Int.random(in: 0..<replicas.count, using: &rng)
                replicas[to].applyAll(
                    replicas[r].allOperations.filter { _ in Bool.random(using: &rng) }, authority: authorities[to])
            }
            var reference = JournalState()
            #expect(reference.applyAll(all, authority: authorities[0]) == all.count)
            for _ in 0..<10 {
                var shuffled = all + all.filter { _ in Bool.random(using: &rng) }
                shuffled.shuffle(using: &rng)
                var state = JournalState()
                #expect(state.applyAll(shuffled, authority: authorities[0]) == all.count)
                #expect(state.attachments == reference.attachments, "seed \(seed) round \(round)")
            }
        }
    }
}
