import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Two members removing each other at once: the rotation that stands is fixed by a rank neither
/// author chooses, so a member just removed cannot answer with a removal of its remover that
/// comes first.
@Suite struct RotationOrderTests {
    typealias Party = KeyEpochsTests.Party
    let remover = Party(1), removed = Party(2), third = Party(3)

    static func secrets(seed: UInt64) -> () -> SessionSecret {
        var generator = SeededGenerator(seed: seed)
        return {
            let bytes = (0..<SessionSecret.byteCount).map { _ in UInt8.random(in: 0...255, using: &generator) }
            return try! SessionSecret(bytes: bytes)  // safe: exactly 32 bytes
        }
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func aRankedSecretCarriesItsAuthorsRank(seed: UInt64) {
        let draw = Self.secrets(seed: seed)
        let origin = draw()
        let secret = RotationOrder.rankedSecret(leaving: origin.sessionID, author: remover.id, draw: draw)
        let id = secret.sessionID.value
        #expect(id >> (64 - RotationOrder.zeroBits) == 0, "seed \(seed): \(secret.sessionID)")
        #expect(
            id >> (64 - RotationOrder.zeroBits - RotationOrder.rankBits)
                == RotationOrder.rank(leaving: origin.sessionID, author: remover.id))
        #expect(RotationOrder.isRanked(secret.sessionID, leaving: origin.sessionID, author: remover.id))
        // The rank is the author's, out of this epoch: another author or another epoch asks for
        // another rank (all four the same is one chance in 2^18).
        let others = [
            RotationOrder.rank(leaving: origin.sessionID, author: removed.id),
            RotationOrder.rank(leaving: draw().sessionID, author: remover.id),
            RotationOrder.rank(leaving: draw().sessionID, author: removed.id),
        ]
        #expect(Set(others + [RotationOrder.rank(leaving: origin.sessionID, author: remover.id)]).count > 1)
    }

    /// The removed member answers at once with a removal of its remover, under a session id it
    /// drew to be smaller than the remover's: release 0.9.0's order would let it stand.
    @Test(arguments: [UInt64(1), 2, 3])
    func aRemovedMembersAnswerCannotChooseToComeFirst(seed: UInt64) throws {
        let members: Set<NodeID> = [remover.id, removed.id, third.id]
        let draw = Self.secrets(seed: seed)
        let origin = draw()
        let honest = try KeyEpochs(origin: origin).rotation(
            removing: [removed.id],
            to: RotationOrder.rankedSecret(leaving: origin.sessionID, author: remover.id, draw: draw),
            live: members, authority: remover.authority)
        var chosen = draw()
        for _ in 0..<(1 << 22) {
            if chosen.sessionID.value < honest.secret.sessionID.value,
                !RotationOrder.isRanked(chosen.sessionID, leaving: origin.sessionID, author: removed.id)
            {
                break
            }
            chosen = draw()
        }
        guard chosen.sessionID.value < honest.secret.sessionID.value else {
            Issue.record("seed \(seed): no smaller session id drawn")
            return
        }
        let answer = try KeyEpochs(origin: origin).rotation(
            removing: [remover.id], to: chosen, live: members, authority: removed.authority)
        #expect(RotationOrder.wins(honest.rotation, over: answer.rotation), "seed \(seed)")
        #expect(!RotationOrder.wins(answer.rotation, over: honest.rotation), "seed \(seed)")
        // Whichever the third member hears first, it ends in the remover's epoch.
        for order in [[honest, answer], [answer, honest]] {
            var epochs = KeyEpochs(origin: origin)
            for transition in order {
                _ = epochs.accept(
                    transition.rotation, secret: transition.secret, from: transition.rotation.author,
                    localID: third.id, members: members, authority: third.authority)
            }
            #expect(epochs.current == honest.secret, "seed \(seed), heard \(order.map(\.rotation.author))")
            #expect(epochs.removed == [removed.id], "seed \(seed)")
        }
    }

    /// Two ranked rotations: the smaller rank stands whatever the rest of the ids, and a rotation
    /// whose author the other does not remove stands over one that removes it (as before).
    @Test(arguments: [UInt64(1), 2, 3])
    func rankedRotationsStandByRank(seed: UInt64) throws {
        let members: Set<NodeID> = [remover.id, removed.id, third.id]
        let draw = Self.secrets(seed: seed)
        let origin = draw()
        let byRemover = try KeyEpochs(origin: origin).rotation(
            removing: [removed.id],
            to: RotationOrder.rankedSecret(leaving: origin.sessionID, author: remover.id, draw: draw),
            live: members, authority: remover.authority)
        let byRemoved = try KeyEpochs(origin: origin).rotation(
            removing: [remover.id],
            to: RotationOrder.rankedSecret(leaving: origin.sessionID, author: removed.id, draw: draw),
            live: members, authority: removed.authority)
        let ranks = (
            RotationOrder.rank(leaving: origin.sessionID, author: remover.id),
            RotationOrder.rank(leaving: origin.sessionID, author: removed.id)
        )
        let removerStands = RotationOrder.wins(byRemover.rotation, over: byRemoved.rotation)
        #expect(removerStands != RotationOrder.wins(byRemoved.rotation, over: byRemover.rotation))
        if ranks.0 != ranks.1 { #expect(removerStands == (ranks.0 < ranks.1), "seed \(seed): ranks \(ranks)") }
        let plain = try KeyEpochs(origin: origin).rotation(
            removing: [third.id],
            to: RotationOrder.rankedSecret(leaving: origin.sessionID, author: removed.id, draw: draw),
            live: members, authority: removed.authority)
        #expect(RotationOrder.wins(byRemover.rotation, over: plain.rotation), "it removes the other's author")
        #expect(!RotationOrder.wins(plain.rotation, over: byRemover.rotation))
    }

    /// Release 0.9.0 takes the smaller session id: it picks the same rotation as this release
    /// between a ranked one and any unranked one that does not start with `zeroBits` zero bits.
    @Test func release090PicksTheSameRotationAlmostAlways() throws {
        let members: Set<NodeID> = [remover.id, removed.id, third.id]
        let draw = Self.secrets(seed: 7)
        let origin = draw()
        var compared = 0
        for _ in 0..<16 {
            let ranked = try KeyEpochs(origin: origin).rotation(
                removing: [removed.id],
                to: RotationOrder.rankedSecret(leaving: origin.sessionID, author: remover.id, draw: draw),
                live: members, authority: remover.authority)
            let old = try KeyEpochs(origin: origin).rotation(
                removing: [remover.id], to: draw(), live: members, authority: removed.authority)
            guard old.secret.sessionID.value >> (64 - RotationOrder.zeroBits) != 0 else { continue }
            compared += 1
            let byOldOrder = ranked.secret.sessionID.value < old.secret.sessionID.value
            #expect(RotationOrder.wins(ranked.rotation, over: old.rotation) == byOldOrder)
            #expect(byOldOrder)
        }
        #expect(compared > 12)
    }
}
