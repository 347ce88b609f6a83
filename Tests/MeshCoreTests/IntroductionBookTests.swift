import MeshCore
import MeshCrypto
import Testing

/// The introduction book's request and bounds as a value (PROTOCOL.md §3, "Introductions"): the
/// member asked first is the door, one silent through every attempt or refusing is passed over
/// for the next, a round ends in a minute's wait that no unasked answer cuts short, and a door
/// counts what it introduced and what it signed for that has not told it.
@Suite("the introduction book")
struct IntroductionBookTests {
    static let start = MeshInstant.zero + .seconds(100)

    static func id(_ index: UInt8) throws -> NodeID { try IntroductionTests.authority(index).signingKey.nodeID }

    @Test(
        "the door first, then the next on silence or refusal; a round ends in a wait no unasked answer cuts short, and a member that becomes a candidate does"
    )
    func requestsMoveToTheNextMember() throws {
        let local = try Self.id(1)
        let (door, first, second) = (try Self.id(2), try Self.id(3), try Self.id(4))
        let candidates = [door, first, second]
        var book = IntroductionBook()
        let settings = book.settings
        var now = Self.start
        book.ask(among: candidates, localID: local, now: now)
        // The door, `attempts` times one interval apart, then passed over.
        var sent: [NodeID] = []
        for _ in 0..<settings.attempts {
            #expect(book.isWaiting(on: { _ in true }, now: now) == false)
            if let asked = book.due(now: now) { sent.append(asked) }
            let again = book.due(now: now)
            #expect(again == nil, "asked twice at once")
            now = now + settings.interval
        }
        #expect(sent == Array(repeating: door, count: settings.attempts))
        #expect(book.awaits(door))
        let afterSilence = book.due(now: now)
        #expect(afterSilence == nil && book.request == nil, "a silent door was not passed over")
        // The next, which refuses: then the last.
        book.ask(among: candidates, localID: local, now: now)
        let next = book.due(now: now)
        #expect(next == first)
        let unasked = book.refused(by: second)
        #expect(!unasked, "a refusal from a member not asked was taken")
        let refusedByFirst = book.refused(by: first)
        #expect(refusedByFirst)
        book.ask(among: candidates, localID: local, now: now)
        let last = book.due(now: now)
        #expect(last == second)
        let refusedBySecond = book.refused(by: second)
        #expect(refusedBySecond)
        // Every one passed over: the door again, a recheck later, and not before.
        book.ask(among: candidates, localID: local, now: now)
        #expect(book.request?.asked == door && book.request?.nextAt == now + settings.recheck)
        // Looked at again while it waits: a member not asked this round that becomes a candidate
        // (its versions learnt late) is asked at once, not a recheck later.
        #expect(!book.isWaiting(on: { _ in true }, now: now))
        var came = book
        let third = try Self.id(5)
        came.ask(among: candidates, localID: local, now: now + settings.interval)
        #expect(came.request?.nextAt == now + settings.recheck, "the wait began again")
        came.ask(among: candidates + [third], localID: local, now: now + settings.interval)
        let newcomer = came.due(now: now + settings.interval)
        #expect(newcomer == third)
        let unaskedDoor = book.refused(by: door)
        #expect(!book.awaits(door) && !unaskedDoor, "an unasked refusal cut the wait short")
        let early = book.due(now: now + settings.recheck / 2)
        #expect(early == nil)
        let onTime = book.due(now: now + settings.recheck)
        #expect(onTime == door)
        // The member asked goes: the next at once.
        book.ask(among: [first, second], localID: local, now: now + settings.recheck)
        let afterGone = book.due(now: now + settings.recheck)
        #expect(afterGone == first)
        // Introduced: no more asking.
        let member = try IntroductionTests.authority(1)
        let own = Introduction.signed(
            by: try IntroductionTests.authority(3), admitting: local, in: IntroductionTests.session
        )
        .countersigned(by: member)
        book.take(own)
        book.ask(among: candidates, localID: local, now: now)
        #expect(book.request == nil && book.nextDeadline == nil)
    }

    @Test("a door counts what it introduced and what it signed for, of which only a few may be pending")
    func doorsAreBounded() throws {
        let local = try IntroductionTests.authority(1)
        let localID = local.signingKey.nodeID
        var settings = IntroductionBook.Settings()
        settings.perDoor = 5
        settings.pendingPerDoor = 3
        var book = IntroductionBook(settings: settings)
        let members = try (10..<18).map { try IntroductionTests.authority($0) }
        let ids = members.map(\.signingKey.nodeID)
        var gone: Set<NodeID> = []
        let isLive = { (id: NodeID) in !gone.contains(id) }
        // Three signed for, none told: no room for a fourth pending one.
        for id in ids.prefix(3) { book.signed(for: id) }
        #expect(book.pending(otherThan: ids[7], isLive: isLive) == 3)
        #expect(!book.hasRoom(in: localID, for: ids[7], localID: localID, isLive: isLive))
        #expect(book.hasRoom(in: localID, for: ids[0], localID: localID, isLive: isLive), "the asker counted itself")
        // Two tell: introduced 2, pending 1, room again; two more signed reach the bound of 5.
        for (member, id) in zip(members, ids).prefix(2) {
            book.take(
                Introduction.signed(by: local, admitting: id, in: IntroductionTests.session).countersigned(by: member))
        }
        #expect(book.liveIntroduced(by: localID, otherThan: ids[7], isLive: isLive) == 2)
        #expect(book.hasRoom(in: localID, for: ids[7], localID: localID, isLive: isLive))
        book.signed(for: ids[3])
        book.signed(for: ids[4])
        #expect(!book.hasRoom(in: localID, for: ids[7], localID: localID, isLive: isLive))
        // A pending member that goes frees its place.
        gone.insert(ids[2])
        #expect(book.hasRoom(in: localID, for: ids[7], localID: localID, isLive: isLive))
        // Another door: what we hold of it, live.
        let other = try IntroductionTests.authority(30)
        let otherID = other.signingKey.nodeID
        for (member, id) in zip(members, ids).suffix(5) {
            book.take(
                Introduction.signed(by: other, admitting: id, in: IntroductionTests.session).countersigned(by: member))
        }
        #expect(!book.hasRoom(in: otherID, for: localID, localID: localID, isLive: isLive))
        #expect(book.hasRoom(in: otherID, for: ids[3], localID: localID, isLive: isLive), "the member counted itself")
        gone.insert(ids[7])
        #expect(book.hasRoom(in: otherID, for: localID, localID: localID, isLive: isLive))
    }

    @Test(
        "a door whose chain reaches the asker, a member we signed for that has not told, or a smaller member asking again, may close a loop"
    )
    func loopsAreFoundBeforeTheyClose() throws {
        let authorities = try (1..<8).map { try IntroductionTests.authority($0) }
        let ids = authorities.map(\.signingKey.nodeID)
        var book = IntroductionBook()
        /// `member` let in by `door`, as both signed it.
        func introduce(_ member: Int, by door: Int) {
            book.take(
                Introduction.signed(by: authorities[door], admitting: ids[member], in: IntroductionTests.session)
                    .countersigned(by: authorities[member]))
        }
        // 0 is us. 2 let in by 1, 3 by 2; 1 by 6, which was removed.
        introduce(2, by: 1)
        introduce(3, by: 2)
        introduce(1, by: 6)
        var removed: Set<NodeID> = [ids[6]]
        func closes(_ door: Int, for asker: Int = 0) -> Bool {
            book.mayCloseLoop(through: ids[door], for: ids[asker], localID: ids[0], isVoid: { removed.contains($0) })
        }
        // 1 asks again (its door went): whether its branch is refused depends on the ids; 1
        // itself, signing for us, is not.
        let smaller = ids[1] < ids[0]
        #expect(closes(3) == smaller && closes(2) == smaller)
        #expect(!closes(1))
        // Another member's door walks on past it, as before.
        #expect(!book.mayCloseLoop(through: ids[3], for: ids[4], localID: ids[0], isVoid: { removed.contains($0) }))
        removed = []
        #expect(!closes(3), "a chain that ends at a live root")
        // We signed for 5, which has not told which door it took: its branch is refused.
        book.signed(for: ids[5])
        introduce(4, by: 5)
        #expect(closes(4))
        // It told: another door, live. Its branch is open again; ours is not (the asker is in it).
        introduce(5, by: 1)
        #expect(!closes(4))
        introduce(4, by: 0)
        #expect(closes(4))
        #expect(book.mayCloseLoop(through: ids[4], for: ids[0], localID: ids[5], isVoid: { _ in false }))
        // A ring held from before (a file written by an older release) is taken for a loop.
        introduce(1, by: 3)
        #expect(closes(2))
    }

    @Test("a member's request is answered once per half interval")
    func answersAreSpaced() throws {
        var book = IntroductionBook()
        let member = try Self.id(5)
        let half = book.settings.interval / 2
        let answers = [
            book.mayAnswer(member, now: Self.start),
            book.mayAnswer(member, now: Self.start + (half - .milliseconds(1))),
            book.mayAnswer(member, now: Self.start + half),
            book.mayAnswer(try Self.id(6), now: Self.start + half),
        ]
        #expect(answers == [true, false, true, true], "answered too often, or another member waited for this one")
    }
}
