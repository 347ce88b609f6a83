import MeshCore
import MeshCrypto
import Testing

/// The scheduler's choices, one call at a time (the simulations cover whole transfers).
@Suite("Transfer scheduler")
struct TransferSchedulerTests {
    static let start = MeshInstant(nanoseconds: 1_000_000_000)
    let manifest = Manifest(size: 8 * 1024, chunkSize: 1024, chunks: (0..<8).map { SHA256Digest.hashing([UInt8($0)]) })
    let first = NodeID(high: 1, low: 1), second = NodeID(high: 2, low: 2)

    func partial(_ indexes: [Int]) -> ChunkBitmap {
        var bitmap = ChunkBitmap(count: manifest.chunks.count)
        for index in indexes { bitmap.insert(index) }
        return bitmap
    }

    /// Fetching the whole manifest; `first` holds all of it, `second` what `secondHolds` says.
    func scheduler(seed: UInt64, secondHolds: ChunkBitmap) -> TransferScheduler {
        var scheduler = TransferScheduler(seed: seed)
        scheduler.start(manifest, have: ChunkBitmap(count: manifest.chunks.count))
        scheduler.setAvailability(.full(manifest.chunks.count), of: manifest.id, at: first)
        scheduler.setAvailability(secondHolds, of: manifest.id, at: second)
        return scheduler
    }

    /// Every chunk but 0 held, `first` holds all and was just asked for chunk 0.
    func onlyChunkZeroAskedOfFirst(seed: UInt64) -> TransferScheduler {
        var scheduler = TransferScheduler(seed: seed)
        scheduler.start(manifest, have: partial([1, 2, 3, 4, 5, 6, 7]))
        scheduler.setAvailability(.full(8), of: manifest.id, at: first)
        let asked = scheduler.nextRequests(now: Self.start)
        #expect(asked.map(\.index) == [0], "seed \(seed)")
        return scheduler
    }

    @Test(
        "windows fill, nothing more is asked while they are full, and a chunk that arrives opens its sender's",
        arguments: 1...5 as ClosedRange<UInt64>)
    func windowsBoundRequests(seed: UInt64) {
        var scheduler = scheduler(seed: seed, secondHolds: .full(8))
        let opening = scheduler.nextRequests(now: Self.start)
        let window = scheduler.settings.initialWindow
        #expect(opening.count == 2 * window, "seed \(seed)")
        #expect(opening.filter { $0.peer == first }.count == window, "seed \(seed)")
        #expect(Set(opening.map(\.index)).count == opening.count, "seed \(seed): a chunk asked twice")
        #expect(
            opening.allSatisfy { $0.attachment == manifest.id && $0.digest == manifest.chunks[$0.index] },
            "seed \(seed)")
        #expect(
            scheduler.nextRequests(now: Self.start + .milliseconds(1)).isEmpty, "seed \(seed): asked past a full window"
        )

        guard let done = opening.first(where: { $0.peer == first }) else { return }
        scheduler.onPieceBytes(manifest.chunkSize, of: manifest.id, index: done.index, from: first)
        scheduler.onChunk(attachment: manifest.id, index: done.index, from: first, valid: true)
        // One slot freed and the window grew by one: two more, both of `first`, none held or in flight.
        let next = scheduler.nextRequests(now: Self.start + .milliseconds(2))
        #expect(next.count == 2 && next.allSatisfy { $0.peer == first }, "seed \(seed): \(next)")
        #expect(Set(next.map(\.index)).isDisjoint(with: opening.map(\.index)), "seed \(seed)")
    }

    /// A fetch of 32 chunks that only `first` holds, with its first window asked.
    func openedByOneHolder(seed: UInt64) -> (TransferScheduler, Manifest, [TransferScheduler.Request]) {
        let manifest = Manifest(
            size: 32 * 1024, chunkSize: 1024, chunks: (0..<32).map { SHA256Digest.hashing([UInt8($0), 7]) })
        var scheduler = TransferScheduler(seed: seed)
        scheduler.start(manifest, have: ChunkBitmap(count: 32))
        scheduler.setAvailability(.full(32), of: manifest.id, at: first)
        let opening = scheduler.nextRequests(now: Self.start)
        #expect(opening.count == scheduler.settings.initialWindow, "seed \(seed)")
        return (scheduler, manifest, opening)
    }

    @Test(
        "a chunk waiting for a repair takes no slot of its holder's window, up to a window's worth",
        arguments: 1...5 as ClosedRange<UInt64>)
    func repairsLeaveRoom(seed: UInt64) {
        var (scheduler, manifest, opening) = openedByOneHolder(seed: seed)
        let window = scheduler.settings.initialWindow
        #expect(
            scheduler.nextRequests(now: Self.start + .milliseconds(1)).isEmpty, "seed \(seed): asked past a full window"
        )
        // One of them waits for a lost piece asked again: one more may go.
        scheduler.setRepairing(Array(opening.prefix(1)))
        let one = scheduler.nextRequests(now: Self.start + .milliseconds(2))
        #expect(one.count == 1, "seed \(seed)")
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(3)).isEmpty, "seed \(seed)")
        // However many wait, never more than a window's worth beside the window.
        scheduler.setRepairing(opening + one)
        let more = scheduler.nextRequests(now: Self.start + .milliseconds(4))
        #expect(more.count == window - 1, "seed \(seed)")
        #expect(scheduler.window(of: first)?.inFlight == 2 * window, "seed \(seed)")
        scheduler.setRepairing(opening + one + more)
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(5)).isEmpty, "seed \(seed)")
        // Repaired: the window is full again, and nothing goes.
        scheduler.setRepairing([])
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(6)).isEmpty, "seed \(seed)")
        // Another member with a full window: chunks never asked of it open nothing there.
        scheduler.setAvailability(.full(32), of: manifest.id, at: second)
        let seconds = scheduler.nextRequests(now: Self.start + .milliseconds(7))
        #expect(seconds.count == window && seconds.allSatisfy { $0.peer == second }, "seed \(seed): \(seconds)")
        let counted = scheduler.setRepairing(
            opening.map { request in
                var elsewhere = request
                elsewhere.peer = second
                return elsewhere
            })
        #expect(counted == 0, "seed \(seed)")
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(8)).isEmpty, "seed \(seed)")
    }

    @Test(
        "a chunk whose request timed out earns its member no slot, though it still waits for a repair",
        arguments: 1...5 as ClosedRange<UInt64>)
    func timedOutRepairsOpenNothing(seed: UInt64) {
        var (scheduler, manifest, opening) = openedByOneHolder(seed: seed)
        let window = scheduler.settings.initialWindow
        // One arrives; its slot goes to another chunk later.
        guard let stale = opening.first, let done = opening.last, stale != done else {
            Issue.record("seed \(seed): an opening window of \(opening.count)")
            return
        }
        scheduler.onChunk(attachment: manifest.id, index: done.index, from: first, valid: true)
        let later = scheduler.nextRequests(now: Self.start + .milliseconds(1000))
        #expect(later.count == 1, "seed \(seed)")
        // The first request times out (the later one not yet): the window halves to what is left.
        scheduler.onTick(now: Self.start + scheduler.settings.requestTimeout)
        #expect(scheduler.window(of: first).map { [$0.inFlight, $0.window] } == [1, window / 2], "seed \(seed)")
        // Its chunk still waits for a repair, but no longer from `first`: nothing opens.
        scheduler.setRepairing([stale])
        #expect(scheduler.nextRequests(now: Self.start + scheduler.settings.requestTimeout).isEmpty, "seed \(seed)")
        // One still in flight that waits for a repair opens a slot.
        scheduler.setRepairing([stale] + later)
        #expect(scheduler.nextRequests(now: Self.start + scheduler.settings.requestTimeout).count == 1, "seed \(seed)")
    }

    @Test(
        "end game: the last chunks are asked of a second holder too, once their requests are late",
        arguments: 1...5 as ClosedRange<UInt64>)
    func endGameAsksASecondHolder(seed: UInt64) {
        var scheduler = TransferScheduler(seed: seed)
        // 2 chunks missing: the end game from the start, with room in both windows (2 each).
        scheduler.start(manifest, have: partial([0, 1, 2, 3, 4, 5]))
        scheduler.setAvailability(.full(manifest.chunks.count), of: manifest.id, at: first)
        scheduler.setAvailability(.full(manifest.chunks.count), of: manifest.id, at: second)
        let opening = scheduler.nextRequests(now: Self.start)
        #expect(opening.map(\.index).sorted() == [6, 7], "seed \(seed): each asked once while on time: \(opening)")
        // Late (half a timeout, no latency known yet): the timer is set for it, and each is
        // asked of the other holder too.
        let late = Self.start + scheduler.settings.requestTimeout / 2
        #expect(scheduler.nextDeadline == late, "seed \(seed)")
        #expect(scheduler.nextRequests(now: late + (.zero - .milliseconds(1))).isEmpty, "seed \(seed)")
        let requests = opening + scheduler.nextRequests(now: late)
        for index in [6, 7] {
            let asked = requests.filter { $0.index == index }.map(\.peer)
            #expect(Set(asked) == [first, second] && asked.count == 2, "seed \(seed): \(requests)")
        }
        // One copy arrived: the other is no longer in flight, and its holder's slot is free again.
        scheduler.onChunk(attachment: manifest.id, index: 6, from: first, valid: true)
        #expect(scheduler.window(of: second)?.inFlight == 1, "seed \(seed)")
    }

    @Test("an end game request due while no other holder has room sets no timer in the past")
    func endGameDueWithoutRoomSetsNoPastTimer() {
        var settings = TransferScheduler.Settings()
        settings.initialWindow = 1
        var scheduler = TransferScheduler(settings: settings, seed: 1)
        scheduler.start(manifest, have: partial([0, 1, 2, 3, 4, 5]))
        scheduler.setAvailability(.full(8), of: manifest.id, at: first)
        scheduler.setAvailability(.full(8), of: manifest.id, at: second)
        let opening = scheduler.nextRequests(now: Self.start)
        #expect(Set(opening.map(\.peer)) == [first, second] && opening.count == 2, "\(opening)")
        // Both late, both windows full: nobody to ask, and the next timer is the timeouts'.
        let late = Self.start + scheduler.endGameAfter(first)
        #expect(scheduler.nextRequests(now: late).isEmpty)
        #expect(scheduler.nextDeadline == Self.start + scheduler.settings.requestTimeout)
    }

    @Test(
        "a window grows by the bytes that came, also while its chunks wait for a lost piece",
        arguments: 1...5 as ClosedRange<UInt64>)
    func windowGrowsByBytes(seed: UInt64) {
        var scheduler = scheduler(seed: seed, secondHolds: ChunkBitmap(count: manifest.chunks.count))
        let opening = scheduler.nextRequests(now: Self.start)
        let window = scheduler.settings.initialWindow
        #expect(opening.count == window && opening.allSatisfy { $0.peer == first }, "seed \(seed): \(opening)")
        guard opening.count >= 2 else { return }
        // Most of both chunks came, none whole (each waits for a piece asked again): under a
        // chunk's worth opens nothing, a chunk's worth opens one slot, none completed.
        scheduler.onPieceBytes(manifest.chunkSize - 1, of: manifest.id, index: opening[0].index, from: first)
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(1)).isEmpty, "seed \(seed)")
        scheduler.onPieceBytes(manifest.chunkSize - 1, of: manifest.id, index: opening[1].index, from: first)
        let more = scheduler.nextRequests(now: Self.start + .milliseconds(2))
        #expect(more.count == 1 && more.allSatisfy { $0.peer == first }, "seed \(seed): \(more)")
        #expect(scheduler.window(of: first)?.window == window + 1, "seed \(seed)")
        // Pieces of a chunk asked of another member open nothing for their sender.
        scheduler.onPieceBytes(4 * manifest.chunkSize, of: manifest.id, index: opening[0].index, from: second)
        #expect(scheduler.window(of: second)?.window == window, "seed \(seed)")
    }

    @Test(
        "rarest first: chunks one member holds are asked before chunks both hold, each of a member that has it",
        arguments: 1...5 as ClosedRange<UInt64>)
    func rarestFirst(seed: UInt64) {
        var scheduler = scheduler(seed: seed, secondHolds: partial([0, 1]))
        let requests = scheduler.nextRequests(now: Self.start)
        // `first` alone holds 2...7: its window goes to those; `second` gets what it holds.
        #expect(requests.filter { $0.peer == first }.allSatisfy { $0.index >= 2 }, "seed \(seed): \(requests)")
        #expect(Set(requests.filter { $0.peer == second }.map(\.index)) == [0, 1], "seed \(seed): \(requests)")
    }

    @Test(
        "a relayed holder is asked only for what no other holder with room has", arguments: 1...5 as ClosedRange<UInt64>
    )
    func relayedHoldersComeLast(seed: UInt64) {
        var scheduler = scheduler(seed: seed, secondHolds: .full(8))
        scheduler.lastResort = [second]
        let opening = scheduler.nextRequests(now: Self.start)
        // `first` takes its window; the rest of the chunks go to the relayed one only once `first` is full.
        #expect(
            opening.filter { $0.peer == first }.count == scheduler.settings.initialWindow, "seed \(seed): \(opening)")
        #expect(
            opening.filter { $0.peer == second }.count
                == min(scheduler.settings.initialWindow, 8 - scheduler.settings.initialWindow),
            "seed \(seed): \(opening)")
        var direct = self.scheduler(seed: seed, secondHolds: .full(8))
        direct.lastResort = [second]
        direct.setAvailability(.full(8), of: manifest.id, at: NodeID(high: 3, low: 3))
        let requests = direct.nextRequests(now: Self.start)
        let window = direct.settings.initialWindow
        // Two holders reached directly with room for 2 × window: the relayed one gets the rest, if any.
        #expect(requests.filter { $0.peer != second }.count == 2 * window, "seed \(seed): \(requests)")
        #expect(requests.filter { $0.peer == second }.count == min(window, 8 - 2 * window), "seed \(seed): \(requests)")
    }

    @Test("a chunk whole and being stored is not asked again, though its request timed out; a failed store asks again")
    func aChunkBeingStoredIsNotAskedAgain() {
        var scheduler = onlyChunkZeroAskedOfFirst(seed: 1)
        // Its request timed out while its pieces still came; then the last one came.
        let late = Self.start + scheduler.settings.requestTimeout + .milliseconds(1)
        scheduler.onTick(now: late)
        #expect(scheduler.timeouts == 1)
        #expect(scheduler.storingCount == 0)
        scheduler.onAssembled(attachment: manifest.id, index: 0)
        #expect(scheduler.storingCount == 1, "the debug log's count of chunks waiting for the store")
        let meanwhile = scheduler.nextRequests(now: late)
        #expect(meanwhile.isEmpty, "asked again while its copy was being stored")
        #expect(scheduler.hasRequestsInFlight(manifest.id), "a chunk being stored is still under way")
        // The store failed: asked again.
        scheduler.onMissing(attachment: manifest.id, index: 0, from: first)
        #expect(scheduler.storingCount == 0)
        let again = scheduler.nextRequests(now: late + .milliseconds(1))
        #expect(again.map(\.index) == [0])
        scheduler.onAssembled(attachment: manifest.id, index: 0)
        let whole = scheduler.onChunk(attachment: manifest.id, index: 0, from: first, valid: true)
        #expect(whole, "stored: the attachment is whole")
        #expect(scheduler.storingCount == 0)
    }

    @Test("the end game asks no second copy of a chunk being stored; a bad copy or a mixed one is asked again")
    func endGameSkipsAChunkBeingStored() {
        var scheduler = onlyChunkZeroAskedOfFirst(seed: 3)
        // A second holder appears while the only copy is being stored: nothing to ask.
        scheduler.onAssembled(attachment: manifest.id, index: 0)
        scheduler.setAvailability(.full(8), of: manifest.id, at: second)
        let meanwhile = scheduler.nextRequests(now: Self.start + .milliseconds(1))
        #expect(meanwhile.isEmpty, "a second copy of a chunk already whole: \(meanwhile)")
        // Its hash did not match: asked again (of the other member).
        scheduler.onChunk(attachment: manifest.id, index: 0, from: first, valid: false)
        let retry = scheduler.nextRequests(now: Self.start + .milliseconds(2))
        #expect(retry.map(\.index) == [0] && retry.map(\.peer) == [second])
        // A copy of pieces from both that failed: asked again of one at a time.
        scheduler.onAssembled(attachment: manifest.id, index: 0)
        scheduler.onMixedBadChunk(attachment: manifest.id, index: 0, from: [first, second])
        let solo = scheduler.nextRequests(now: Self.start + .milliseconds(3))
        #expect(solo.map(\.index) == [0])
    }

    @Test("a chunk its only holder is busy with waits the retry time, then is asked again")
    func busyHolderIsAskedAfterTheRetry() {
        var scheduler = TransferScheduler(seed: 1)
        scheduler.start(manifest, have: partial([1, 2, 3, 4, 5, 6, 7]))
        scheduler.setAvailability(.full(8), of: manifest.id, at: first)
        let asked = scheduler.nextRequests(now: Self.start)
        #expect(asked.map(\.index) == [0])
        scheduler.onBusy(attachment: manifest.id, index: 0, from: first, now: Self.start)
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(1)).isEmpty, "asked again at once")
        let retry = Self.start + scheduler.settings.busyRetry
        #expect(scheduler.nextRequests(now: retry).map(\.index) == [0])
    }

    @Test(
        "a seed that left a chunk to others is asked for it again only when no one else holds it, or after its wait once another failed it"
    )
    func seedThatLeftAChunkIsAskedLast() {
        var scheduler = onlyChunkZeroAskedOfFirst(seed: 1)
        let settings = scheduler.settings
        scheduler.onLeftToOthers(attachment: manifest.id, index: 0, from: first, now: Self.start)
        #expect(scheduler.nextRequests(now: Self.start + .milliseconds(1)).isEmpty, "asked again at once")
        // No one else is known to hold it (their announcement is on its way): the seed again.
        let left = Self.start + settings.busyRetry
        #expect(scheduler.nextRequests(now: left).map(\.peer) == [first])
        scheduler.onLeftToOthers(attachment: manifest.id, index: 0, from: first, now: left)
        scheduler.setAvailability(partial([0]), of: manifest.id, at: second)
        #expect(scheduler.nextRequests(now: left + settings.busyRetry).map(\.peer) == [second])
        // The other holder is busy: asked again itself, while the seed's wait lasts.
        var now = left + settings.busyRetry + .milliseconds(100)
        scheduler.onBusy(attachment: manifest.id, index: 0, from: second, now: now)
        #expect(scheduler.nextRequests(now: now + .milliseconds(1)).isEmpty, "the busy holder asked again at once")
        now = now + settings.busyRetry
        #expect(scheduler.nextRequests(now: now).map(\.peer) == [second])
        // Past the wait, after that failure, the seed may be asked (the other is busy again).
        // The wait counts from the seed's first answer (as its grace does), not its second.
        let waited: MeshInstant = Self.start + settings.leftToOthersWait
        scheduler.onBusy(attachment: manifest.id, index: 0, from: second, now: waited)
        // (The end game asks the other too, busy or not, once the seed's request is late.)
        #expect(scheduler.nextRequests(now: waited).map(\.peer) == [first])
        #expect(scheduler.nextRequests(now: waited + scheduler.endGameAfter(first)).map(\.peer) == [second])
    }

    /// `first` (a seed) left a chunk that `second` holds too to others; `first` alone holds 6 and
    /// 7, and has since sent both; `second`'s window (1) is full. The chunk it left, and the
    /// chunks `first` and `second` were asked.
    func seedLeftOneChunk() throws
        -> (scheduler: TransferScheduler, left: TransferScheduler.Request, askedOfFirst: [Int], askedOfSecond: [Int])
    {
        var settings = TransferScheduler.Settings()
        settings.initialWindow = 1
        // A seed of the scheduler whose opening asks `first` (the only holder known yet) for a
        // chunk that `second` turns out to hold too.
        var found: (scheduler: TransferScheduler, left: TransferScheduler.Request)?
        for seed in UInt64(1)...16 where found == nil {
            var scheduler = TransferScheduler(settings: settings, seed: seed)
            scheduler.start(manifest, have: ChunkBitmap(count: 8))
            scheduler.setAvailability(.full(8), of: manifest.id, at: first)
            let opening = scheduler.nextRequests(now: Self.start)
            #expect(opening.count == 1, "seed \(seed): \(opening)")
            if let left = opening.first, left.index < 6 { found = (scheduler, left) }
        }
        var (scheduler, left) = try #require(found)
        scheduler.setAvailability(partial(Array(0..<6)), of: manifest.id, at: second)
        scheduler.onLeftToOthers(attachment: manifest.id, index: left.index, from: first, now: Self.start)
        var askedOfFirst: [Int] = [], askedOfSecond: [Int] = []
        for step in 1...4 {
            for request in scheduler.nextRequests(now: Self.start + .milliseconds(step)) {
                guard request.peer == first else {
                    askedOfSecond.append(request.index)
                    continue
                }
                askedOfFirst.append(request.index)
                _ = scheduler.onChunk(attachment: manifest.id, index: request.index, from: first, valid: true)
            }
        }
        return (scheduler, left, askedOfFirst, askedOfSecond)
    }

    @Test(
        "a seed that left one chunk to others is asked first only for the chunks it alone holds, until four waits have passed"
    )
    func seedThatLeftOneChunkIsAskedLastForAll() throws {
        var (scheduler, _, askedOfFirst, _) = try seedLeftOneChunk()
        #expect(askedOfFirst.sorted() == [6, 7], "the seed was asked for chunks another holds: \(askedOfFirst)")
        // Held back until four waits after its answer (`second` never failed: no tick timed it
        // out), and asked again like anyone then.
        let expired = Self.start + scheduler.settings.leftToOthersWait * 4
        #expect(scheduler.nextRequests(now: expired + (.zero - .milliseconds(1))).isEmpty)
        let again = scheduler.nextRequests(now: expired)
        #expect(again.contains { $0.peer == first }, "\(again)")
    }

    @Test(
        "chunks a seed that left us another holds count as under way, for four waits: the fetch does not give up on them"
    )
    func chunksHeldBackFromASeedAreUnderWay() throws {
        var (scheduler, left, _, askedOfSecond) = try seedLeftOneChunk()
        // Everything asked arrived, the chunk the seed left too: nothing in flight, nothing waits
        // for the chunk it left, and chunks only `second` and the seed hold are still missing.
        for index in Set(askedOfSecond + [left.index]) {
            _ = scheduler.onChunk(attachment: manifest.id, index: index, from: second, valid: true)
        }
        #expect(scheduler.progress(manifest.id).map { $0.have < $0.total } == true)
        #expect(scheduler.inFlightByPeer.isEmpty)
        #expect(scheduler.hasRequestsInFlight(manifest.id), "held back from the seed: the fetch would give up on them")
        scheduler.onTick(now: Self.start + scheduler.settings.leftToOthersWait * 4)
        #expect(!scheduler.hasRequestsInFlight(manifest.id), "the seed may be asked again: they wait for nothing")
    }

    @Test("once the others fail, a seed that left us other chunks is asked at once for a chunk it was never asked")
    func failedHolderGivesBackASeedNeverAsked() throws {
        var (scheduler, left, _, _) = try seedLeftOneChunk()
        // `second` lets its request time out, and sent no chunk: the seed may be asked at once
        // for the chunks it never left us, not for the one it did (its grace runs 5 s).
        let timedOut = Self.start + scheduler.settings.requestTimeout + .milliseconds(1)
        scheduler.onTick(now: timedOut)
        let asked = scheduler.nextRequests(now: timedOut)
        #expect(asked.contains { $0.peer == first }, "\(asked)")
        #expect(
            !asked.contains { $0.peer == first && $0.index == left.index },
            "the chunk it left, before its wait: \(asked)")
    }

    /// `first` seeds and left chunk 0 to `second`, whose window (1) is full with a chunk of
    /// another attachment only it holds: that request.
    func chunkLeftToABusyHolder() throws -> (TransferScheduler, TransferScheduler.Request) {
        var settings = TransferScheduler.Settings()
        settings.initialWindow = 1
        var scheduler = TransferScheduler(settings: settings, seed: 3)
        let other = Manifest(
            size: 4 * 1024, chunkSize: 1024, chunks: (0..<4).map { SHA256Digest.hashing([UInt8($0), 9]) })
        scheduler.start(manifest, have: partial([1, 2, 3, 4, 5, 6, 7]))
        scheduler.setAvailability(.full(8), of: manifest.id, at: first)
        #expect(scheduler.nextRequests(now: Self.start).map(\.peer) == [first])
        scheduler.onLeftToOthers(attachment: manifest.id, index: 0, from: first, now: Self.start)
        scheduler.setAvailability(partial([0]), of: manifest.id, at: second)
        scheduler.start(other, have: ChunkBitmap(count: 4))
        scheduler.setAvailability(.full(4), of: other.id, at: second)
        let asked = scheduler.nextRequests(now: Self.start + settings.busyRetry)
        #expect(asked.count == 1, "\(asked)")
        let filling = try #require(asked.first)
        #expect(filling.peer == second && filling.attachment == other.id, "\(asked)")
        return (scheduler, filling)
    }

    /// `second`'s request for the other attachment's chunk times out; returns when.
    func timeOutTheFillingRequest(_ scheduler: inout TransferScheduler) -> MeshInstant {
        let timedOut: MeshInstant = Self.start + scheduler.settings.busyRetry + scheduler.settings.requestTimeout
        scheduler.onTick(now: timedOut)
        #expect(scheduler.timeouts == 1)
        return timedOut
    }

    /// Whether `requests` ask the seed for the chunk it left.
    func askTheSeed(_ requests: [TransferScheduler.Request]) -> Bool {
        requests.contains { $0.attachment == manifest.id && $0.peer == first }
    }

    @Test(
        "a chunk a seed left to others waits for room at them, past the seed's wait while none of them fails, up to four waits"
    )
    func leftChunkWaitsForRoom() throws {
        var (scheduler, _) = try chunkLeftToABusyHolder()
        let wait = scheduler.settings.leftToOthersWait
        let afterTheWait: MeshInstant = Self.start + wait + .seconds(1)
        let asked = scheduler.nextRequests(now: afterTheWait)
        #expect(asked.isEmpty, "the seed asked though no other holder failed: \(asked)")
        #expect(
            scheduler.hasRequestsInFlight(manifest.id),
            "a chunk waiting for room counts: the fetch must not give up on it")
        let afterFour: MeshInstant = Self.start + wait * 4
        #expect(
            scheduler.nextRequests(now: afterFour).map(\.peer) == [first],
            "a holder that never makes room holds the chunk for ever")
    }

    @Test("a holder that lets any request time out after a seed left it a chunk gives the seed back after the wait")
    func failedHolderGivesTheSeedBack() throws {
        var (scheduler, _) = try chunkLeftToABusyHolder()
        // A silent holder.
        let timedOut = timeOutTheFillingRequest(&scheduler)
        #expect(!askTheSeed(scheduler.nextRequests(now: timedOut)), "the seed asked before its wait ended")
        let waited: MeshInstant = Self.start + scheduler.settings.leftToOthersWait
        #expect(askTheSeed(scheduler.nextRequests(now: waited)))
    }

    @Test(
        "a holder whose request timed out and that then sends the chunk all the same keeps the chunks a seed left to it"
    )
    func slowHolderKeepsLeftChunks() throws {
        var (scheduler, filling) = try chunkLeftToABusyHolder()
        _ = timeOutTheFillingRequest(&scheduler)
        scheduler.onChunk(attachment: filling.attachment, index: filling.index, from: second, valid: true)
        let waited: MeshInstant = Self.start + scheduler.settings.leftToOthersWait
        let asked = scheduler.nextRequests(now: waited)
        #expect(!askTheSeed(asked), "a slow holder taken for a silent one: \(asked)")
    }
}
