import MeshCore
import MeshCrypto
import NIOCore
import Testing

/// Key epochs: who may rotate, who is handed the next secret, and what can open it.
@Suite struct KeyEpochsTests {
    struct Party {
        let identity: NodeIdentity
        let ephemeral = EphemeralKeyPair.generate()
        let boot: UInt64
        var authority: Ed25519Authority { Ed25519Authority(identity: identity) }
        var id: NodeID { identity.nodeID }

        init(_ index: UInt8) {
            identity = try! NodeIdentity(seed: [UInt8](repeating: index, count: 32))  // safe: 32 bytes
            boot = UInt64(index) * 1000
        }

        var record: MemberRecord {
            MemberRecord(
                signingKey: identity.publicKey, name: "p", addresses: [PeerAddress(ipv4: [127, 0, 0, 1], port: 9)],
                incarnation: 1, bootID: boot, ephemeralKey: ephemeral.publicKey
            ).signed(by: authority)
        }
    }

    let origin = SessionSecret.generate()
    let a = Party(1), b = Party(2), m = Party(3), newcomer = Party(4)
    let t0 = MeshInstant(nanoseconds: 1_000_000_000)

    @Test func rotationMovesToANewSecretAndOwesItOnlyToKnownRemainingMembers() {
        var epochs = KeyEpochs(origin: origin)
        let next = SessionSecret.generate()
        let transition = epochs.rotate(removing: [m.id], to: next, members: [b.id, m.id], authority: a.authority)
        #expect(epochs.current == next)
        #expect(epochs.previousSecrets == [origin])
        #expect(epochs.removed == [m.id])
        #expect(transition.rotation.previousSession == origin.sessionID)
        #expect(transition.rotation.nextSession == next.sessionID)
        #expect(transition.rotation.author == a.id)
        #expect(transition.rotation.hasValidSignature(a.authority))

        #expect(epochs.handover(to: b.id, heardIn: origin.sessionID, now: t0) == transition)
        #expect(epochs.handover(to: m.id, heardIn: origin.sessionID, now: t0) == nil, "the removed member")
        #expect(epochs.handover(to: newcomer.id, heardIn: origin.sessionID, now: t0) == nil, "an old invite's newcomer")
        #expect(epochs.handover(to: b.id, heardIn: next.sessionID, now: t0) == nil, "the current epoch needs none")
        // Rate limit: again only after the interval.
        #expect(epochs.handover(to: b.id, heardIn: origin.sessionID, now: t0 + .milliseconds(100)) == nil)
        #expect(epochs.handover(to: b.id, heardIn: origin.sessionID, now: t0 + KeyEpochs.handoverInterval) != nil)
    }

    @Test func acceptanceChecksSignatureSecretSenderAndEpoch() {
        var rotator = KeyEpochs(origin: origin)
        let next = SessionSecret.generate()
        let rotation = rotator.rotate(removing: [m.id], to: next, members: [b.id, m.id], authority: a.authority)
            .rotation
        let known: Set<NodeID> = [a.id, m.id]

        var epochs = KeyEpochs(origin: origin)
        #expect(
            epochs.accept(
                rotation, secret: SessionSecret.generate(), from: a.id, localID: b.id, members: known,
                authority: b.authority) == .invalid, "a secret that is not the rotation's")
        #expect(
            epochs.accept(
                rotation, secret: next, from: newcomer.id, localID: b.id, members: known,
                authority: b.authority) == .invalid, "a sender we never knew")
        #expect(
            epochs.accept(
                rotation, secret: next, from: m.id, localID: b.id, members: known,
                authority: b.authority) == .invalid, "handed over by the member it removes")
        var forged = rotation
        forged.removed = [a.id]
        #expect(
            epochs.accept(
                forged, secret: next, from: a.id, localID: b.id, members: known,
                authority: b.authority) == .invalid, "changed after signing")
        var removedSide = KeyEpochs(origin: origin)
        #expect(
            removedSide.accept(
                rotation, secret: next, from: a.id, localID: m.id, members: [a.id, b.id],
                authority: m.authority) == .removesUs)
        #expect(removedSide.current == origin)

        guard
            case let .adopted(transition, nil) = epochs.accept(
                rotation, secret: next, from: a.id, localID: b.id,
                members: known, authority: b.authority)
        else {
            Issue.record("a genuine rotation was not adopted")
            return
        }
        #expect(epochs.current == next)
        #expect(!transition.rotation.owes(a.id), "the author is not on the roster")
        #expect(transition.rotation.owes(b.id))
        #expect(!transition.rotation.owes(m.id), "the removed member")
        #expect(
            epochs.accept(
                rotation, secret: next, from: a.id, localID: b.id, members: known,
                authority: b.authority) == .known)
        // The removed member can no longer rotate anyone's epoch.
        var later = KeyEpochs(origin: next)
        let fake = later.rotate(removing: [b.id], to: SessionSecret.generate(), members: [b.id], authority: m.authority)
        #expect(
            epochs.accept(
                fake.rotation, secret: fake.secret, from: a.id, localID: b.id, members: known,
                authority: b.authority) == .invalid)
        let stray = KeyRotation(
            previousSession: SessionID(value: 42), nextSession: fake.secret.sessionID, removed: [],
            roster: [KeyRotation.rosterEntry(b.id)], signingKey: a.identity.publicKey
        ).signed(by: a.authority)
        #expect(
            epochs.accept(
                stray, secret: fake.secret, from: a.id, localID: b.id, members: known,
                authority: b.authority) == .notOurEpoch)
    }

    @Test func ofTwoRotationsAtOnceTheSameOneStandsEverywhere() {
        // a removes m while b removes newcomer, both out of the origin epoch.
        var atA = KeyEpochs(origin: origin), atB = KeyEpochs(origin: origin)
        let members: Set<NodeID> = [a.id, b.id, m.id, newcomer.id, Party(9).id]
        let fromA = atA.rotate(removing: [m.id], to: SessionSecret.generate(), members: members, authority: a.authority)
        let fromB = atB.rotate(
            removing: [newcomer.id], to: SessionSecret.generate(), members: members, authority: b.authority)
        let aWins = KeyEpochs.wins(fromA.rotation, over: fromB.rotation)
        #expect(aWins != KeyEpochs.wins(fromB.rotation, over: fromA.rotation), "exactly one wins")
        let (winner, loser) = aWins ? (fromA, fromB) : (fromB, fromA)

        // Whatever order a third member hears them in, it ends on the winner.
        for order in [[fromA, fromB], [fromB, fromA]] {
            var third = KeyEpochs(origin: origin)
            for transition in order {
                let sender = transition.rotation.author
                _ = third.accept(
                    transition.rotation, secret: transition.secret, from: sender, localID: Party(9).id,
                    members: members, authority: a.authority)
            }
            #expect(third.current == winner.secret)
            #expect(third.transitions.count == 1)
        }
        // The loser's author switches too, and members stuck in the losing epoch are handed the winner.
        var atLoser = aWins ? atB : atA
        let outcome = atLoser.accept(
            winner.rotation, secret: winner.secret, from: winner.rotation.author,
            localID: loser.rotation.author, members: members, authority: a.authority)
        #expect(
            outcome
                == .adopted(
                    KeyEpochs.Transition(rotation: winner.rotation, secret: winner.secret),
                    replacing: loser))
        #expect(atLoser.current == winner.secret)
        #expect(atLoser.secret(of: loser.secret.sessionID) == loser.secret)
        let stuck = aWins ? m.id : newcomer.id
        #expect(atLoser.handover(to: stuck, heardIn: loser.secret.sessionID, now: t0) == nil, "removed by the winner")
        let other = aWins ? newcomer.id : m.id
        #expect(atLoser.handover(to: other, heardIn: loser.secret.sessionID, now: t0)?.secret == winner.secret)
        // The winner, told of the loser, keeps its epoch.
        var atWinner = aWins ? atA : atB
        #expect(
            atWinner.accept(
                loser.rotation, secret: loser.secret, from: loser.rotation.author,
                localID: winner.rotation.author, members: members, authority: a.authority) == .notOurEpoch)
        #expect(atWinner.current == winner.secret)
    }

    /// a removes b, b removes m, m removes a, out of the first epoch: each beats one other, none
    /// beats both; `c` is a bystander.
    func cycleOfThree() -> (rotations: [KeyEpochs.Transition], members: Set<NodeID>, c: Party) {
        let c = Party(9)
        let members: Set<NodeID> = [a.id, b.id, m.id, c.id]
        var fresh = [KeyEpochs(origin: origin), KeyEpochs(origin: origin), KeyEpochs(origin: origin)]
        let rotations = [
            fresh[0].rotate(removing: [b.id], to: SessionSecret.generate(), members: members, authority: a.authority),
            fresh[1].rotate(removing: [m.id], to: SessionSecret.generate(), members: members, authority: b.authority),
            fresh[2].rotate(removing: [a.id], to: SessionSecret.generate(), members: members, authority: m.authority),
        ]
        return (rotations, members, c)
    }

    @Test("three rotations that beat each other in a cycle: every order of hearing them ends on the same one")
    func aCycleOfThreeEndsTheSameInEveryOrder() {
        let (rotations, members, c) = cycleOfThree()
        for (index, rotation) in rotations.enumerated() {
            let next = rotations[(index + 1) % 3]
            #expect(KeyEpochs.wins(rotation.rotation, over: next.rotation), "not a cycle")
        }
        let standing = KeyEpochs.winner(of: rotations[0].rotation, rotations.dropFirst().map(\.rotation))
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
        for order in orders {
            var bystander = KeyEpochs(origin: origin)
            for index in order {
                let transition = rotations[index]
                _ = bystander.accept(
                    transition.rotation, secret: transition.secret, from: transition.rotation.author,
                    localID: c.id, members: members, authority: a.authority)
            }
            #expect(bystander.current.sessionID == standing.nextSession, "order \(order)")
            #expect(bystander.transitions.count == 1, "order \(order)")
            // The two that lost are held: their members are handed the one that stands.
            for lost in rotations where lost.rotation != standing {
                #expect(bystander.lost(lost.rotation), "order \(order)")
                #expect(bystander.transition(after: lost.secret.sessionID)?.rotation == standing, "order \(order)")
            }
        }
    }

    @Test("the rotations that lost survive a restart: the cycle still ends on the same one, and they stay open")
    func rivalsSurviveARestart() throws {
        let (rotations, members, c) = cycleOfThree()
        let standing = KeyEpochs.winner(of: rotations[0].rotation, rotations.dropFirst().map(\.rotation))
        let hear = { (epochs: inout KeyEpochs, transition: KeyEpochs.Transition) in
            _ = epochs.accept(
                transition.rotation, secret: transition.secret, from: transition.rotation.author,
                localID: c.id, members: members, authority: a.authority)
        }
        for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            // Two heard, a restart, then the third: the field is chosen from all three.
            var before = KeyEpochs(origin: origin)
            for index in order.prefix(2) { hear(&before, rotations[index]) }
            let files = before.files
            #expect(!files.rivals.isEmpty, "order \(order)")
            var after = try KeyEpochs.decode(files.chain, origin: origin)
            try after.restoreRivals(files.rivals)
            #expect(after.encodedRivals() == files.rivals, "order \(order)")
            #expect(after.earlierSecrets.map(\.sessionID) == before.earlierSecrets.map(\.sessionID), "order \(order)")
            hear(&after, rotations[order[2]])
            #expect(after.current.sessionID == standing.nextSession, "order \(order)")
            for lost in rotations where lost.rotation != standing {
                #expect(after.secret(of: lost.secret.sessionID) == lost.secret, "order \(order)")
                #expect(after.transition(after: lost.secret.sessionID)?.rotation == standing, "order \(order)")
            }
        }
        // Rivals written beside a chain that is not the one read back (a crash between the two
        // writes): the field is left out, the secrets of the epochs that lost stay open.
        let first = try #require(rotations.first { $0.rotation != standing })
        var moved = KeyEpochs(origin: origin)
        hear(&moved, first)
        let oldChain = moved.encoded()
        for transition in rotations where transition != first { hear(&moved, transition) }
        #expect(moved.current.sessionID == standing.nextSession)
        var restored = try KeyEpochs.decode(oldChain, origin: origin)
        try restored.restoreRivals(moved.encodedRivals())
        #expect(restored.lostTransitions(outOf: origin.sessionID).isEmpty, "a field beside another chain")
        #expect(rotations.contains { $0 != first && moved.lost($0.rotation) })
        for transition in rotations where transition != first && moved.lost(transition.rotation) {
            #expect(restored.secret(of: transition.secret.sessionID) == transition.secret)
        }
        // A damaged file: every truncation refused, no change ever trapped on, and what loads is
        // whole (each rival with its own secret, none in the chain).
        let files = moved.files
        #expect(KeyEpochs(origin: origin).encodedRivals().isEmpty)
        for length in 1..<files.rivals.count {
            var epochs = try KeyEpochs.decode(files.chain, origin: origin)
            #expect(throws: WireError.self) { try epochs.restoreRivals(Array(files.rivals.prefix(length))) }
        }
        var rng = SplitMix64(seed: testSeed(0xe90c_0002))
        for _ in 0..<testIterations(2_000) {
            var mutated = files.rivals
            let index = Int(rng.next() % UInt64(mutated.count))
            mutated[index] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
            var epochs = try KeyEpochs.decode(files.chain, origin: origin)
            guard (try? epochs.restoreRivals(mutated)) != nil else { continue }
            for lost in epochs.lostTransitions(outOf: origin.sessionID) {
                #expect(lost.secret.sessionID == lost.rotation.nextSession)
                #expect(lost.rotation.nextSession != epochs.current.sessionID)
            }
            let ids = epochs.earlierSecrets.map(\.sessionID)
            #expect(Set(ids).count == ids.count)
        }
    }

    @Test func theRosterDecidesWhoIsOwedTheEpochAndCapsItsSize() throws {
        var rotator = KeyEpochs(origin: origin)
        let next = SessionSecret.generate()
        // a knew b and m, not the newcomer.
        let transition = try rotator.rotation(
            removing: [m.id], to: next, live: [b.id, m.id], authority: a.authority)
        #expect(transition.rotation.roster == [KeyRotation.rosterEntry(b.id)])
        #expect(rotator.current == origin, "nothing changes before commit")
        rotator.commit(transition)
        #expect(rotator.current == next)
        // Someone who knew the newcomer adopts it, but hands it on only along the roster.
        var adopter = KeyEpochs(origin: origin)
        guard
            case .adopted = adopter.accept(
                transition.rotation, secret: next, from: a.id, localID: b.id,
                members: [a.id, m.id, newcomer.id], authority: b.authority)
        else {
            Issue.record("b did not adopt")
            return
        }
        #expect(adopter.handover(to: newcomer.id, heardIn: origin.sessionID, now: t0) == nil)
        #expect(!adopter.isEntitled(newcomer.id, heardIn: origin.sessionID))
        // Nor does the newcomer take it if it were handed it: it is not on the roster.
        var outsider = KeyEpochs(origin: origin)
        #expect(
            outsider.accept(
                transition.rotation, secret: next, from: a.id, localID: newcomer.id,
                members: [a.id], authority: a.authority) == .invalid)
        // A rotation travels in one datagram: the roster and the removed list are capped.
        let crowd = Set((0..<(KeyRotation.maxRoster + 1)).map { NodeID(high: UInt64($0) + 1, low: 7) })
        #expect(throws: KeyEpochs.RotationError.tooManyMembers(KeyRotation.maxRoster + 1)) {
            try rotator.rotation(removing: [], to: SessionSecret.generate(), live: crowd, authority: a.authority)
        }
        let full = try rotator.rotation(
            removing: Set(crowd.sorted().prefix(KeyRotation.maxRemoved)),
            to: SessionSecret.generate(), live: crowd, authority: a.authority)
        // Members known in another state fill what the live leave of the roster, latest first.
        let live = Set(crowd.sorted().prefix(KeyRotation.maxRoster - 2))
        let gone = crowd.subtracting(live).sorted() + [NodeID(high: 999, low: 9)]
        let mixed = try rotator.rotation(
            removing: [], to: SessionSecret.generate(), live: live, others: gone, authority: a.authority)
        #expect(mixed.rotation.roster.count == KeyRotation.maxRoster)
        #expect(!mixed.rotation.roster.contains(KeyRotation.rosterEntry(NodeID(high: 999, low: 9))))
        #expect(live.allSatisfy { mixed.rotation.roster.contains(KeyRotation.rosterEntry($0)) })
        // A full session (every other member live) removing a member that is not live: all fit.
        let others = Set(crowd.sorted().prefix(KeyRotation.maxRoster))
        let removingGone = try rotator.rotation(
            removing: [NodeID(high: 998, low: 9)], to: SessionSecret.generate(), live: others, authority: a.authority)
        #expect(removingGone.rotation.roster.count == KeyRotation.maxRoster)
        let handover = try #require(
            EpochHandover.seal(
                full.secret, rotation: full.rotation, previous: next,
                sender: Self.longest(a), local: a.ephemeral,
                recipient: b.record, nonce: .random()))
        #expect(
            FrameCodec.encodedLength(of: .epochHandover(handover)) + FrameCodec.headerLength
                <= DatagramCodec(session: next, localID: a.id, localBootID: 1).maxHelloPayload)
    }

    @Test func twoMembersRemovingEachOtherEndInOneEpoch() throws {
        let members: Set<NodeID> = [a.id, b.id, m.id]
        let fromA = try KeyEpochs(origin: origin).rotation(
            removing: [b.id], to: SessionSecret.generate(),
            live: members, authority: a.authority)
        let fromB = try KeyEpochs(origin: origin).rotation(
            removing: [a.id], to: SessionSecret.generate(),
            live: members, authority: b.authority)
        #expect(
            KeyEpochs.wins(fromA.rotation, over: fromB.rotation) != KeyEpochs.wins(fromB.rotation, over: fromA.rotation)
        )
        for order in [[fromA, fromB], [fromB, fromA]] {
            var third = KeyEpochs(origin: origin)
            for transition in order {
                _ = third.accept(
                    transition.rotation, secret: transition.secret, from: transition.rotation.author,
                    localID: m.id, members: members, authority: m.authority)
            }
            let winner = KeyEpochs.wins(fromA.rotation, over: fromB.rotation) ? fromA : fromB
            #expect(third.current == winner.secret, "heard in order \(order.map(\.rotation.author))")
        }
    }

    /// A record as large as records get (longest name, every address).
    static func longest(_ party: Party) -> MemberRecord {
        MemberRecord(
            signingKey: party.identity.publicKey, name: String(repeating: "n", count: MemberRecord.maxNameBytes),
            addresses: [PeerAddress](
                repeating: PeerAddress(ipv6: [UInt8](repeating: 1, count: 16), port: 9),
                count: MemberRecord.maxAddresses),
            incarnation: .max, bootID: .max, ephemeralKey: party.ephemeral.publicKey
        ).signed(by: party.authority)
    }

    @Test func aHandoverOpensOnlyForItsRecipientsBoot() throws {
        var epochs = KeyEpochs(origin: origin)
        let next = SessionSecret.generate()
        let transition = epochs.rotate(removing: [m.id], to: next, members: [b.id, m.id], authority: a.authority)
        let handover = try #require(
            EpochHandover.seal(
                next, rotation: transition.rotation, previous: origin,
                sender: a.record, local: a.ephemeral, recipient: b.record,
                nonce: .random()))
        #expect(handover.open(previous: origin, local: b.ephemeral) == next)
        // Through the wire and back.
        var buffer = ByteBuffer()
        FrameCodec.encode(.epochHandover(handover), into: &buffer)
        let decoded = try FrameCodec.decodeAll(&buffer).get()
        #expect(decoded == [.epochHandover(handover)])

        // The removed member holds the old secret, but not B's ephemeral secret.
        #expect(handover.open(previous: origin, local: m.ephemeral) == nil)
        #expect(handover.open(previous: SessionSecret.generate(), local: b.ephemeral) == nil, "another session")
        var redirected = handover
        redirected.recipientBoot += 1
        #expect(redirected.open(previous: origin, local: b.ephemeral) == nil, "bound to the boot")
        var rewritten = handover
        rewritten.rotation.removed = [b.id]
        #expect(rewritten.open(previous: origin, local: b.ephemeral) == nil, "bound to the rotation")
        var flipped = handover
        flipped.sealedSecret[0] ^= 1
        #expect(flipped.open(previous: origin, local: b.ephemeral) == nil)
    }

    @Test func epochsSurviveTheirFileAndRefuseABrokenChain() throws {
        var epochs = KeyEpochs(origin: origin)
        _ = epochs.rotate(
            removing: [m.id], to: SessionSecret.generate(), members: [b.id, m.id], authority: a.authority)
        _ = epochs.rotate(
            removing: [b.id], to: SessionSecret.generate(), members: [b.id, newcomer.id], authority: a.authority)
        let loaded = try KeyEpochs.decode(epochs.encoded(), origin: origin)
        #expect(loaded.transitions == epochs.transitions)
        #expect(loaded.removed == [m.id, b.id])
        #expect(loaded.current == epochs.current)
        #expect(KeyEpochs(origin: origin).encoded().count > 0)
        #expect(throws: WireError.self) { try KeyEpochs.decode(epochs.encoded(), origin: SessionSecret.generate()) }
        let bytes = epochs.encoded()
        // Every truncation is refused; random changes are never trapped on, and none that loads
        // breaks the chain (each epoch's secret still names the session its rotation opened).
        for length in 0..<bytes.count {
            #expect(throws: WireError.self) { try KeyEpochs.decode(Array(bytes.prefix(length)), origin: origin) }
        }
        var rng = SplitMix64(seed: testSeed(0xe90c_0001))
        for _ in 0..<testIterations(2_000) {
            var mutated = bytes
            let index = Int(rng.next() % UInt64(mutated.count))
            mutated[index] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
            if let loaded = try? KeyEpochs.decode(mutated, origin: origin) {
                #expect(loaded.transitions.allSatisfy { $0.secret.sessionID == $0.rotation.nextSession })
                #expect(loaded.transitions.count == 2)
            }
        }
    }

    @Test("past the bound the oldest epochs are forgotten: the file names the first one kept, and reads back")
    func theOldestEpochsAreForgottenPastTheBound() throws {
        var epochs = KeyEpochs(origin: origin)
        var secrets = [origin]
        for index in 0..<(KeyEpochs.maxTransitions + 10) {
            let next = SessionSecret.generate()
            _ = epochs.rotate(
                removing: index == 0 ? [m.id] : [], to: next, members: [b.id, m.id], authority: a.authority)
            secrets.append(next)
            // Version 2 (which the previous release reads) while nothing is forgotten.
            if index == KeyEpochs.maxTransitions - 1 {
                #expect(!epochs.forgotOldest && epochs.encoded()[4] == 2)
            }
        }
        #expect(epochs.transitions.count == KeyEpochs.maxTransitions && epochs.forgotOldest)
        #expect(epochs.origin == secrets[10], "the first epoch kept is the origin")
        #expect(epochs.current == secrets.last)
        #expect(epochs.earlierSecrets.count == KeyEpochs.maxTransitions)
        #expect(epochs.removed == [m.id], "who a forgotten epoch removed stays removed")
        #expect(epochs.forgot(origin.sessionID) && epochs.forgot(secrets[9].sessionID))
        #expect(!epochs.forgot(secrets[10].sessionID) && epochs.forgotten?.sessions.count == 10)
        #expect(!epochs.holds(origin) && epochs.holds(secrets[10]) && epochs.holds(secrets[40]))
        #expect(epochs.secret(of: secrets[9].sessionID) == nil)
        #expect(epochs.handover(to: b.id, heardIn: secrets[9].sessionID, now: t0) == nil, "needs a new invite")
        #expect(epochs.handover(to: b.id, heardIn: secrets[10].sessionID, now: t0)?.secret == secrets[11])
        #expect(
            epochs.recentEarlierSessions(4) == secrets.suffix(5).dropLast().map(\.sessionID),
            "the removed are told in the last few epochs only")
        #expect(
            epochs.epochsARemovalLeft(epochs.transitions[100].rotation)
                == [secrets[110], secrets[109]].map(\.sessionID),
            "and in the epochs their own removal left")
        #expect(epochs.epochsARemovalLeft(epochs.transitions[0].rotation) == [secrets[10].sessionID])

        let bytes = epochs.encoded()
        #expect(bytes[4] == 3)
        #expect(bytes.count < KeyEpochs.maxFileBytes / 16, "\(bytes.count) bytes")
        // The origin given is the secret joined with; the file's own is the one that counts.
        let loaded = try KeyEpochs.decode(bytes, origin: origin)
        #expect(loaded.origin == epochs.origin && loaded.transitions == epochs.transitions)
        #expect(loaded.forgotten == epochs.forgotten && loaded.removed == [m.id])
        for length in stride(from: 0, to: bytes.count, by: 97) {
            #expect(throws: WireError.self) { try KeyEpochs.decode(Array(bytes.prefix(length)), origin: origin) }
        }
        var rng = SplitMix64(seed: testSeed(0xe90c_0002))
        for _ in 0..<testIterations(500) {
            var mutated = bytes
            let index = Int(rng.next() % UInt64(mutated.count))
            mutated[index] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
            if let loaded = try? KeyEpochs.decode(mutated, origin: origin) {
                #expect(loaded.transitions.allSatisfy { $0.secret.sessionID == $0.rotation.nextSession })
            }
        }

        // A longer chain in a version 2 file (a release without the bound wrote it) loads, and
        // keeps the latest epochs only.
        var long = ByteBuffer()
        long.writeBytes(Array("GMEP".utf8))
        long.writeInteger(UInt8(2))
        var chain = KeyEpochs(origin: origin)
        var written: [KeyEpochs.Transition] = []
        for _ in 0..<(KeyEpochs.maxTransitions + 3) {
            written.append(
                chain.rotate(removing: [], to: SessionSecret.generate(), members: [b.id], authority: a.authority))
        }
        long.writeInteger(UInt32(written.count))
        for transition in written {
            transition.rotation.encode(into: &long)
            long.writeBytes(transition.secret.bytes)
        }
        let old = try KeyEpochs.decode(Array(long.readableBytesView), origin: origin)
        #expect(old.transitions == Array(written.suffix(KeyEpochs.maxTransitions)))
        #expect(old.origin == written[2].secret && old.forgotOldest)
    }

    @Test func anExcludedMemberIsLeftAndNeverBelievedAgain() {
        let cluster = ManualCluster(count: 3)
        let removed = cluster[2]
        var observer = cluster.instance(0)
        let directives = observer.exclude([removed], now: cluster.now)
        #expect(
            directives.contains {
                if case let .memberChanged(member) = $0 {
                    member.id == removed && member.status == .left
                } else {
                    false
                }
            })
        #expect(observer.member(removed)?.status == .left)
        // A fresh alive record of it (a higher incarnation) and its own probes change nothing.
        let identity = cluster.identities[removed]!
        let reborn = ManualCluster.record(identity, index: 3, incarnation: 9).signed(
            by: Ed25519Authority(identity: identity))
        let out = observer.onFrames(
            [.alive(reborn), .probe(Probe(sequence: 1, target: cluster[0]))], from: removed,
            address: ManualCluster.address(3), now: cluster.now)
        #expect(out.isEmpty)
        _ = observer.onFrames([.alive(reborn)], from: cluster[1], address: ManualCluster.address(2), now: cluster.now)
        #expect(observer.member(removed)?.status == .left)
        #expect(observer.isExcluded(removed))
        // Past the bound, kept only while the key epochs still hold it removed.
        var ids: [NodeID] = []
        for index in 0..<UInt64(MembershipInstance.maxExcluded) { ids.append(NodeID(high: index, low: 1)) }
        _ = observer.exclude(Set(ids), now: cluster.now)
        observer.keepExcluded(within: Set(ids + [removed]))
        #expect(observer.isExcluded(removed) && observer.isExcluded(ids[0]))
        observer.keepExcluded(within: Set(ids.dropFirst()))
        #expect(!observer.isExcluded(removed) && !observer.isExcluded(ids[0]) && observer.isExcluded(ids[1]))
    }
}

extension KeyEpochs {
    /// Rotates and takes the rotation at once (tests: nothing to store).
    mutating func rotate(
        removing: Set<NodeID>, to secret: SessionSecret, members: Set<NodeID>,
        authority: some RecordAuthority
    ) -> Transition {
        // safe: small sets
        let transition = try! rotation(removing: removing, to: secret, live: members, authority: authority)
        commit(transition)
        return transition
    }
}
