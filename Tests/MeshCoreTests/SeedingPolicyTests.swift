import MeshCore
import MeshCrypto
import Testing

/// The serving side's initial seeding, alone: a seed sends each chunk about once, leaves the
/// rest to members that hold it, and sends a second copy only for a reason.
@Suite("Seeding policy")
struct SeedingPolicyTests {
    static let start = MeshInstant(nanoseconds: 1_000_000_000)

    /// An uploader seeding chunk 0 of two, which records a copy whenever it does not answer "left to
    /// others" (as the node does once it admits the want); `leftAt` says when a member's copy left.
    struct Seed {
        let manifest = Manifest(
            size: 2048, chunkSize: 1024,
            chunks: [SHA256Digest.hashing([0]), SHA256Digest.hashing([1])])
        let start = SeedingPolicyTests.start
        var policy = SeedingPolicy()
        var holders: [NodeID: ChunkBitmap] = [:]
        var leftAt: (NodeID, MeshInstant) -> MeshInstant? = { _, _ in nil }

        mutating func verdict(_ peer: NodeID, after: Duration, admitted: Bool = true) -> SeedingPolicy.Verdict {
            let now = start + after
            let verdict = policy.verdict(
                attachment: manifest.id, index: 0, to: peer, seeders: [], holders: holders,
                now: now, leftAt: { [leftAt] in leftAt($0, now) })
            if verdict != .leave, admitted { policy.admitted(attachment: manifest.id, index: 0, to: peer, now: now) }
            return verdict
        }
    }

    @Test("super-seeding: the member a chunk went to gets its lost pieces again; another member hears busy")
    func seedingServesGapsToTheSameMember() {
        let first = NodeID(high: 1, low: 1), second = NodeID(high: 2, low: 2)
        var uploader = Seed()
        #expect(uploader.verdict(first, after: .zero) == .serve)
        // The re-ask for the pieces lost on the way, well inside the seeding interval.
        #expect(
            uploader.verdict(first, after: .milliseconds(10)) == .serve,
            "a re-ask for lost pieces would wait out the interval")
        #expect(uploader.verdict(second, after: .milliseconds(20)) == .leave, "a second member is sent to the first")
        #expect(
            uploader.verdict(second, after: uploader.policy.settings.seedingInterval + .milliseconds(20))
                == .serveAgain(.firstCopyLost))
    }

    /// Timed from the want, the interval ran out while a slow member's copy was still queued, and
    /// a second member got a second copy.
    @Test("super-seeding: a chunk still leaving for one member goes to no other until the interval after it left")
    func seedingWaitsForTheCopyToLeave() {
        let first = NodeID(high: 1, low: 1), second = NodeID(high: 2, low: 2)
        var uploader = Seed()
        let start = uploader.start
        // Queued until 5 s; nobody else asks meanwhile (nothing saw it leaving).
        uploader.leftAt = { member, now in member == first ? min(now, start + .seconds(5)) : nil }
        #expect(uploader.verdict(first, after: .zero) == .serve)
        #expect(uploader.verdict(second, after: .seconds(3)) == .leave, "a second copy while the first is still queued")
        #expect(
            uploader.verdict(second, after: .milliseconds(5_100)) == .leave,
            "the interval counts from when the copy's last piece left, not from the want")
        #expect(
            uploader.verdict(second, after: .milliseconds(7_100)) == .serveAgain(.firstCopyLost),
            "a copy gone for the interval was lost: sent again")
    }

    @Test("super-seeding: once the patience has passed since the first member asked, the chunk goes to another too")
    func seedingPatienceEnds() {
        let slow = NodeID(high: 1, low: 1), other = NodeID(high: 2, low: 2)
        var uploader = Seed()
        uploader.leftAt = { member, now in member == slow ? now : nil }
        let patience = uploader.policy.settings.seedingPatience
        #expect(uploader.verdict(slow, after: .zero) == .serve)
        // The slow member's re-ask does not restart the patience.
        #expect(uploader.verdict(slow, after: patience / 2) == .serve)
        #expect(uploader.verdict(other, after: patience - .milliseconds(1)) == .leave)
        #expect(
            uploader.verdict(other, after: patience) == .serveAgain(.firstCopyTooSlow),
            "the others would wait as long as the slow member's pace takes")
        // A member whose re-asks keep its copy fresh, with nothing queued (its wants answered busy
        // by a full queue, say), holds the chunk no longer than the patience either.
        var hoarded = Seed()
        let hoarder = NodeID(high: 3, low: 3)
        #expect(hoarded.verdict(hoarder, after: .zero) == .serve)
        for step in 1..<20 { _ = hoarded.verdict(hoarder, after: .milliseconds(500 * step)) }
        #expect(hoarded.verdict(other, after: patience) == .serveAgain(.firstCopyTooSlow))
    }

    @Test("super-seeding: a want answered busy by a full queue after the verdict holds the chunk for nobody")
    func anUnadmittedWantHoldsNothing() {
        let refused = NodeID(high: 1, low: 1), other = NodeID(high: 2, low: 2)
        var uploader = Seed()
        #expect(uploader.verdict(refused, after: .zero, admitted: false) == .serve)
        #expect(
            uploader.verdict(other, after: .milliseconds(100)) == .serve,
            "nothing is on its way to the refused member")
    }

    @Test("super-seeding: left to a member seen fetching, not to a claim of the whole file; another seed serves all")
    func leftToMembersSeenFetching() {
        let chunks = [SHA256Digest.hashing([0]), SHA256Digest.hashing([1])]
        let manifest = Manifest(size: 2048, chunkSize: 1024, chunks: chunks)
        let uploader = NodeID(high: 9, low: 9), other = NodeID(high: 1, low: 1), asker = NodeID(high: 2, low: 2)
        let start = Self.start
        var first = ChunkBitmap(count: 2)
        first.insert(0)
        func verdict(
            _ policy: inout SeedingPolicy, holders: [NodeID: ChunkBitmap], seeders: Set<NodeID> = [uploader],
            after: Duration = .zero
        ) -> SeedingPolicy.Verdict {
            policy.verdict(
                attachment: manifest.id, index: 0, to: asker, seeders: seeders, holders: holders,
                now: start + after, leftAt: { _ in nil })
        }
        // The uploader leaves a chunk to a member still fetching that announced it.
        var seed = SeedingPolicy()
        seed.onAnnounced(first, of: manifest.id, at: other)
        let fetching = [other: first]
        let grace = seed.settings.busyGrace
        #expect(verdict(&seed, holders: fetching) == .leave, "the chunk is left to the member fetching it")
        #expect(
            verdict(&seed, holders: fetching, after: grace) == .serveAgain(.turnedAwayTooLong),
            "a member that does not pass it on must not starve the asker")
        #expect(
            verdict(&seed, holders: fetching, after: grace + .milliseconds(1)) == .serveAgain(.turnedAwayTooLong),
            "a want the queue refused is no copy: the grace still stands")
        seed.admitted(attachment: manifest.id, index: 0, to: asker, now: start + grace)
        #expect(
            verdict(&seed, holders: fetching, after: grace + .seconds(1)) == .serve,
            "its asks for pieces it lost are served too (one copy, counted once), not turned away 5 s again")
        // Once that member holds it whole, the chunk is still left to it (before, any whole copy
        // turned seeding off, and the uploader served all it was asked)...
        var fetched = SeedingPolicy()
        fetched.onAnnounced(first, of: manifest.id, at: other)
        fetched.onAnnounced(.full(2), of: manifest.id, at: other)
        #expect(verdict(&fetched, holders: [other: .full(2)], after: .seconds(1)) == .leave)
        // ...but a claim of the whole file at once turns nobody away (it may be a liar's), and
        // does not turn seeding off either: a chunk just sent to one member still waits for it.
        var claimed = SeedingPolicy()
        claimed.onAnnounced(.full(2), of: manifest.id, at: other)
        #expect(verdict(&claimed, holders: [other: .full(2)]) == .serve)
        claimed.admitted(attachment: manifest.id, index: 0, to: NodeID(high: 3, low: 3), now: start)
        #expect(verdict(&claimed, holders: [other: .full(2)], after: .milliseconds(100)) == .leave)
        // Another member that added the same content seeds like us: asked of both, each would
        // send the asker to the other.
        var twin = SeedingPolicy()
        twin.admitted(attachment: manifest.id, index: 0, to: NodeID(high: 3, low: 3), now: start)
        #expect(
            verdict(&twin, holders: [other: .full(2)], seeders: [uploader, other], after: .milliseconds(100))
                == .serve,
            "with another seed, a chunk just sent to one member still goes to the next")
    }

    @Test("a member that goes takes its copy, its refusals and its fetching with it")
    func aMemberThatGoesIsForgotten() {
        let first = NodeID(high: 1, low: 1), second = NodeID(high: 2, low: 2)
        var uploader = Seed()
        #expect(uploader.verdict(first, after: .zero) == .serve)
        #expect(uploader.verdict(second, after: .milliseconds(10)) == .leave)
        uploader.policy.removePeer(first)
        #expect(
            uploader.verdict(second, after: .milliseconds(20)) == .serve,
            "a copy lost with its member holds the chunk for nobody: a plain first copy, not a second")

        // A member seen fetching, and the asker it turned away, both go and come back.
        let fetcher = NodeID(high: 3, low: 3)
        var partial = ChunkBitmap(count: 2)
        partial.insert(0)
        var seed = Seed()
        seed.policy.onAnnounced(partial, of: seed.manifest.id, at: fetcher)
        seed.holders = [fetcher: partial]
        let grace = seed.policy.settings.busyGrace
        #expect(seed.verdict(second, after: .zero) == .leave)
        #expect(seed.verdict(second, after: grace) == .serveAgain(.turnedAwayTooLong))
        #expect(seed.verdict(second, after: grace + .seconds(1)) == .serve, "served once, it stays served")
        seed.policy.removePeer(second)
        #expect(seed.verdict(second, after: grace + .seconds(2)) == .leave, "back, it is refused afresh")
        #expect(seed.verdict(second, after: grace * 2 + .seconds(1)) == .leave, "its grace counts from its new refusal")
        #expect(seed.verdict(second, after: grace * 2 + .seconds(2)) == .serveAgain(.turnedAwayTooLong))
        // Gone and back holding the whole: a claim of the whole file, no longer a member seen fetching.
        seed.policy.removePeer(fetcher)
        seed.holders = [fetcher: .full(2)]
        #expect(
            seed.verdict(first, after: grace * 2 + .seconds(3)) == .leave,
            "the copy to the returned asker is on its way")
        seed.policy.removePeer(second)
        #expect(
            seed.verdict(first, after: grace * 2 + .seconds(4)) == .serve,
            "nobody's fetching is remembered for the returned holder, and no copy is on its way")
    }

    /// With nobody else holding the chunk, every verdict follows from the one copy on its way:
    /// checked against that model over random wants, admissions and times.
    @Test("a chunk only we hold goes to a second member only for a reason", arguments: [UInt64(1), 2, 3, 4, 5, 6])
    func secondCopiesOnlyForAReason(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var policy = SeedingPolicy()
        let settings = policy.settings
        let attachment = SHA256Digest.hashing([UInt8(seed)])
        let members = (1...4).map { NodeID(high: $0, low: $0) }
        // Per chunk: the member its copy went to, when first, and when last admitted.
        var copies: [Int: (peer: NodeID, servedAt: MeshInstant, lastAdmitted: MeshInstant)] = [:]
        var now = Self.start
        var seconds = 0
        for _ in 0..<400 {
            now = now + .milliseconds(Int64(random.next() % 1500))
            let index = Int(random.next() % 3), peer = members[Int(random.next() % 4)]
            let expected: SeedingPolicy.Verdict
            if let copy = copies[index], copy.peer != peer {
                if now >= copy.servedAt + settings.seedingPatience {
                    expected = .serveAgain(.firstCopyTooSlow)
                } else {
                    let lost = now >= copy.lastAdmitted + settings.seedingInterval
                    expected = lost ? .serveAgain(.firstCopyLost) : .leave
                }
            } else {
                expected = .serve
            }
            let verdict = policy.verdict(
                attachment: attachment, index: index, to: peer, seeders: [], holders: [:],
                now: now, leftAt: { _ in nil })
            #expect(verdict == expected, "seed \(seed) at \(now): chunk \(index) to \(peer)")
            if case .serveAgain = verdict { seconds += 1 }
            guard verdict != .leave, random.next() % 5 != 0 else { continue }
            policy.admitted(attachment: attachment, index: index, to: peer, now: now)
            if let copy = copies[index], copy.peer == peer {
                copies[index]?.lastAdmitted = now
            } else {
                copies[index] = (peer, now, now)
            }
        }
        #expect(seconds > 0, "seed \(seed): the run never reached a second copy")
    }
}
