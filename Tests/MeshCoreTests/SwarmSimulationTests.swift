import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// The swarm's scheduling on the seeded network: real `TransferScheduler`s, small chunks,
/// datagrams that are lost, duplicated and reordered (a lost request or chunk is asked again
/// after the request timeout). Node 0 uploads; the others join late and fetch.
final class SwarmProcess: SimulatedProcess {
    enum Message {
        case request(index: Int)
        case chunk(index: Int, bytes: [UInt8])
        case availability(ChunkBitmap)
        case busy(index: Int)
    }

    let manifest: Manifest
    /// The uploader (node 0): the one member that seeds.
    let seeds: Bool
    let content: [[UInt8]]
    var scheduler: TransferScheduler
    var have: ChunkBitmap
    var peers: [SimAddress] = []
    /// A hostile holder: serves garbage for every chunk.
    var corrupt = false
    var payloadSent = 0
    var servedCount: [Int: Int] = [:]
    var rejected = 0
    var maxInFlightOverWindow = 0
    var completedAt: MeshInstant?
    var dirty = false
    var ticks = 0
    var known: Set<SimAddress> = []

    init(manifest: Manifest, content: [[UInt8]], holdsAll: Bool, seed: UInt64) {
        self.manifest = manifest
        self.content = content
        seeds = holdsAll
        var settings = TransferScheduler.Settings()
        settings.requestTimeout = .milliseconds(300)
        scheduler = TransferScheduler(settings: settings, seed: seed)
        have = holdsAll ? .full(manifest.chunks.count) : ChunkBitmap(count: manifest.chunks.count)
        if !holdsAll { scheduler.start(manifest, have: have) }
    }

    static let timer: UInt64 = 1

    func start(now: MeshInstant, context: inout SimContext) {
        broadcastAvailability(context: &context)
        context.schedule(timer: Self.timer, after: .milliseconds(100))
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard let message = Self.decode(datagram, chunkCount: manifest.chunks.count) else { return }
        let peer = Self.id(sender)
        switch message {
        case let .request(index):
            guard have.contains(index) else { return }
            guard corrupt || scheduler.seedingVerdict(attachment: manifest.id, index: index, to: peer, seeding: seeds,
                                                      seeders: [Self.id(SimAddress(0))], now: now,
                                                      leftAt: { _ in nil }) != .leave else {
                context.send(Self.encode(.busy(index: index)), to: sender)
                return
            }
            if seeds { scheduler.noteSeeded(attachment: manifest.id, index: index, to: peer, now: now) }
            var bytes = content[index]
            if corrupt { bytes = bytes.map { $0 ^ 0xFF } }
            payloadSent += bytes.count
            servedCount[index, default: 0] += 1
            context.send(Self.encode(.chunk(index: index, bytes: bytes)), to: sender)
        case let .chunk(index, bytes):
            let valid = SHA256Digest.hashing(bytes) == manifest.chunks[index]
            if !valid { rejected += 1 }
            if valid, !have.contains(index) { have.insert(index); dirty = true }
            // The chunk comes whole here: a good one counts toward its sender's window at once.
            if valid { scheduler.onPieceBytes(bytes.count, of: manifest.id, index: index, from: peer) }
            if scheduler.onChunk(attachment: manifest.id, index: index, from: peer, valid: valid) || have.isComplete {
                completedAt = completedAt ?? now
            }
            pump(context: &context)
        case let .availability(bitmap):
            // A member heard from for the first time hears what we hold (as the node's journal
            // answers a joiner with its holdings).
            if !known.contains(sender) {
                known.insert(sender)
                context.send(Self.encode(.availability(have)), to: sender)
            }
            scheduler.setAvailability(bitmap, of: manifest.id, at: peer)
            pump(context: &context)
        case let .busy(index):
            scheduler.onBusy(attachment: manifest.id, index: index, from: peer, now: now)
            pump(context: &context)
        }
    }

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        scheduler.onTick(now: now)
        ticks += 1
        // New chunks are announced at once; everything again every second (anti-entropy, as
        // the node's journal sync does), so late joiners learn who holds what.
        if dirty || ticks % 10 == 0 {
            dirty = false
            broadcastAvailability(context: &context)
        }
        pump(context: &context)
        context.schedule(timer: Self.timer, after: .milliseconds(100))
    }

    private func pump(context: inout SimContext) {
        let requests = scheduler.nextRequests(now: context.now)
        for request in requests {
            context.send(Self.encode(.request(index: request.index)), to: Self.address(request.peer))
        }
        // No request goes beyond the window of the member it is sent to.
        for peer in Set(requests.map(\.peer)) {
            if let (inFlight, window) = scheduler.window(of: peer) {
                maxInFlightOverWindow = max(maxInFlightOverWindow, inFlight - window)
            }
        }
    }

    private func broadcastAvailability(context: inout SimContext) {
        for peer in peers { context.send(Self.encode(.availability(have)), to: peer) }
    }

    static func id(_ address: SimAddress) -> NodeID { NodeID(high: 0x5157, low: UInt64(address.index)) }
    static func address(_ id: NodeID) -> SimAddress { SimAddress(Int(id.low)) }

    static func encode(_ message: Message) -> [UInt8] {
        var buffer = ByteBuffer()
        switch message {
        case let .request(index):
            buffer.writeInteger(UInt8(1)); buffer.writeInteger(UInt32(index))
        case let .chunk(index, bytes):
            buffer.writeInteger(UInt8(2)); buffer.writeInteger(UInt32(index)); buffer.writeBytes(bytes)
        case let .availability(bitmap):
            buffer.writeInteger(UInt8(3)); buffer.writeBytes(bitmap.bytes)
        case let .busy(index):
            buffer.writeInteger(UInt8(4)); buffer.writeInteger(UInt32(index))
        }
        return Array(buffer.readableBytesView)
    }

    static func decode(_ bytes: [UInt8], chunkCount: Int) -> Message? {
        var buffer = ByteBuffer(bytes: bytes)
        guard let kind: UInt8 = buffer.readInteger() else { return nil }
        switch kind {
        case 1: return buffer.readInteger(as: UInt32.self).map { .request(index: Int($0)) }
        case 2:
            guard let index: UInt32 = buffer.readInteger(), Int(index) < chunkCount else { return nil }
            return .chunk(index: Int(index), bytes: Array(buffer.readableBytesView))
        case 3: return ChunkBitmap(count: chunkCount, bytes: Array(buffer.readableBytesView)).map { .availability($0) }
        case 4: return buffer.readInteger(as: UInt32.self).map { .busy(index: Int($0)) }
        default: return nil
        }
    }
}

@Suite("Swarm in simulation")
struct SwarmSimulationTests {
    static let chunkCount = 60
    static let chunkSize = 900

    static func attachment(seed: UInt64) -> (Manifest, [[UInt8]]) {
        var random = SplitMix64(seed: seed)
        let chunks = (0..<chunkCount).map { _ in random.bytes(chunkSize) }
        let manifest = Manifest(size: UInt64(chunkCount * chunkSize), chunkSize: chunkSize,
                                chunks: chunks.map { SHA256Digest.hashing($0) })
        return (manifest, chunks)
    }

    /// Node 0 holds everything; `joiners` start empty, staggered.
    static func swarm(seed: UInt64, joiners: Int, link: LinkConditions) -> (Simulator, [SwarmProcess]) {
        let (manifest, content) = attachment(seed: seed)
        let simulator = Simulator(seed: seed, defaultLink: link)
        var processes: [SwarmProcess] = []
        for index in 0...joiners {
            processes.append(SwarmProcess(manifest: manifest, content: content, holdsAll: index == 0, seed: seed &+ UInt64(index)))
        }
        let addresses = processes.enumerated().map { index, process in
            simulator.addNode(process, startingAt: .zero + .milliseconds(index == 0 ? 0 : 50 + 10 * index))
        }
        for process in processes { process.peers = addresses.filter { $0 != addresses[processes.firstIndex { $0 === process }!] } }
        return (simulator, processes)
    }

    static let lossy = LinkConditions(delay: .milliseconds(2), jitter: .milliseconds(3), lossProbability: 0.1,
                                      duplicationProbability: 0.02, reorderProbability: 0.1)

    @Test("1 uploader and 20 late joiners under loss all end with every chunk; the uploader sends < 1.5× the size",
          arguments: SimulationSeeds.from(defaultCount: 3))
    func lateJoinersSwarm(seed: UInt64) {
        let (simulator, processes) = Self.swarm(seed: seed, joiners: 20, link: Self.lossy)
        let outcome = simulator.run(for: .seconds(120), checkEvery: .milliseconds(100)) { _ in
            processes.allSatisfy { $0.have.isComplete }
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed)): \(processes.map { $0.have.held })")
        let size = Self.chunkCount * Self.chunkSize
        let ratio = Double(processes[0].payloadSent) / Double(size)
        #expect(ratio < 1.5, "\(SimulationSeeds.replay(seed)): uploader sent \(ratio)× the attachment; served per chunk \(processes[0].servedCount.values.sorted())")
        #expect(processes.allSatisfy { $0.maxInFlightOverWindow <= 0 }, "a window was exceeded")
    }

    @Test("a holder serving corrupted chunks is detected and avoided; the transfer completes from the others",
          arguments: SimulationSeeds.from(defaultCount: 3))
    func corruptHolder(seed: UInt64) {
        let (simulator, processes) = Self.swarm(seed: seed, joiners: 4, link: .default)
        // Node 1 claims everything but serves garbage.
        processes[1].have = .full(Self.chunkCount)
        processes[1].corrupt = true
        processes[1].scheduler.cancel(processes[1].manifest.id)
        let outcome = simulator.run(for: .seconds(60), checkEvery: .milliseconds(100)) { _ in
            processes[2...].allSatisfy { $0.have.isComplete }
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed))")
        let rejected = processes[2...].reduce(0) { $0 + $1.rejected }
        #expect(rejected > 0, "the liar was asked and caught")
        for process in processes[2...] {
            #expect(process.scheduler.isAvoided(SwarmProcess.id(SimAddress(1))) || process.rejected < 3,
                    "a repeat offender is avoided")
            #expect(process.rejected <= 3 + TransferScheduler.Settings().maximumWindow, "bad chunks are bounded")
        }
    }

    @Test("a holder that vanishes mid-transfer does not stall it", arguments: SimulationSeeds.from(defaultCount: 3))
    func vanishingHolder(seed: UInt64) {
        let (simulator, processes) = Self.swarm(seed: seed, joiners: 5, link: .default)
        // Once the first joiner holds half, the uploader dies.
        simulator.run(for: .seconds(30), checkEvery: .milliseconds(10)) { _ in
            processes[1...].reduce(0) { $0 + $1.have.held } >= Self.chunkCount * 2
        }
        simulator.crash(SimAddress(0))
        let union = processes[1...].reduce(into: Set<Int>()) { set, process in
            for index in 0..<Self.chunkCount where process.have.contains(index) { set.insert(index) }
        }
        let outcome = simulator.run(for: .seconds(60), checkEvery: .milliseconds(100)) { _ in
            processes[1...].allSatisfy { process in union.allSatisfy { process.have.contains($0) } }
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed)): the survivors share what any of them holds")
    }

    @Test("a busy answer's wait ends: the scheduler's next deadline never stays in the past")
    func busyWaitsExpire() {
        let chunks = (0..<4).map { SHA256Digest.hashing([UInt8($0)]) }
        let manifest = Manifest(size: 4 * 1024, chunkSize: 1024, chunks: chunks)
        let holder = NodeID(high: 7, low: 7)
        var scheduler = TransferScheduler(seed: 1)
        scheduler.start(manifest, have: ChunkBitmap(count: 4))
        scheduler.setAvailability(.full(4), of: manifest.id, at: holder)
        let start = MeshInstant(nanoseconds: 1_000_000_000)
        for request in scheduler.nextRequests(now: start) {
            scheduler.onBusy(attachment: request.attachment, index: request.index, from: holder, now: start)
        }
        // Past every wait, with nothing asked yet: no deadline may be due already.
        let later = start + .seconds(10)
        scheduler.onTick(now: later)
        #expect(scheduler.nextDeadline.map { $0 > later } ?? true)
        #expect(!scheduler.nextRequests(now: later).isEmpty, "the chunks are asked again")
    }

    /// An uploader seeding one chunk, which records a copy whenever it does not answer busy (as
    /// the node does once it admits the want); `leftAt` says when a member's copy left.
    struct Seed {
        let manifest = Manifest(size: 1024, chunkSize: 1024, chunks: [SHA256Digest.hashing([0])])
        let start = MeshInstant(nanoseconds: 1_000_000_000)
        var scheduler = TransferScheduler(seed: 1)
        var leftAt: (NodeID, MeshInstant) -> MeshInstant? = { _, _ in nil }

        mutating func verdict(_ peer: NodeID, after: Duration, admitted: Bool = true) -> TransferScheduler.SeedingVerdict {
            let now = start + after
            let verdict = scheduler.seedingVerdict(attachment: manifest.id, index: 0, to: peer, seeding: true, seeders: [],
                                                   now: now, leftAt: { [leftAt] in leftAt($0, now) })
            if verdict != .leave, admitted { scheduler.noteSeeded(attachment: manifest.id, index: 0, to: peer, now: now) }
            return verdict
        }
    }

    @Test("super-seeding: the member a chunk went to gets its lost pieces again; another member hears busy")
    func seedingServesGapsToTheSameMember() {
        let first = NodeID(high: 1, low: 1), second = NodeID(high: 2, low: 2)
        var uploader = Seed()
        #expect(uploader.verdict(first, after: .zero) == .serve)
        // The re-ask for the pieces lost on the way, well inside the seeding interval.
        #expect(uploader.verdict(first, after: .milliseconds(10)) == .serve, "a re-ask for lost pieces would wait out the interval")
        #expect(uploader.verdict(second, after: .milliseconds(20)) == .leave, "a second member is sent to the first")
        #expect(uploader.verdict(second, after: uploader.scheduler.settings.seedingInterval + .milliseconds(20))
                == .serveAgain(.firstCopyLost))
    }

    /// Timed from the want, the interval ran out while a slow member's copy was still queued, and
    /// a second member got a second copy (an upload to 10 on loopback sent 1.1–1.3× the file).
    @Test("super-seeding: a chunk still leaving for one member goes to no other until the interval after its last piece")
    func seedingWaitsForTheCopyToLeave() {
        let first = NodeID(high: 1, low: 1), second = NodeID(high: 2, low: 2)
        var uploader = Seed()
        let start = uploader.start
        // Queued until 5 s; nobody else asks meanwhile (nothing saw it leaving).
        uploader.leftAt = { member, now in member == first ? min(now, start + .seconds(5)) : nil }
        #expect(uploader.verdict(first, after: .zero) == .serve)
        #expect(uploader.verdict(second, after: .seconds(3)) == .leave, "a second copy while the first is still queued")
        #expect(uploader.verdict(second, after: .milliseconds(5_100)) == .leave,
                "the interval counts from when the copy's last piece left, not from the want")
        #expect(uploader.verdict(second, after: .milliseconds(7_100)) == .serveAgain(.firstCopyLost),
                "a copy gone for the interval was lost: sent again")
    }

    @Test("super-seeding: once the patience has passed since the first member asked, the chunk goes to another too")
    func seedingPatienceEnds() {
        let slow = NodeID(high: 1, low: 1), other = NodeID(high: 2, low: 2)
        var uploader = Seed()
        uploader.leftAt = { member, now in member == slow ? now : nil }
        let patience = uploader.scheduler.settings.seedingPatience
        #expect(uploader.verdict(slow, after: .zero) == .serve)
        // The slow member's re-ask does not restart the patience.
        #expect(uploader.verdict(slow, after: patience / 2) == .serve)
        #expect(uploader.verdict(other, after: patience - .milliseconds(1)) == .leave)
        #expect(uploader.verdict(other, after: patience) == .serveAgain(.firstCopyTooSlow),
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
        #expect(uploader.verdict(other, after: .milliseconds(100)) == .serve, "nothing is on its way to the refused member")
    }

    @Test("super-seeding: only a member that added the content seeds; it leaves a chunk to a member seen fetching, not to a claim of the whole file")
    func onlyTheContentsAddersSeed() {
        let chunks = [SHA256Digest.hashing([0]), SHA256Digest.hashing([1])]
        let manifest = Manifest(size: 2048, chunkSize: 1024, chunks: chunks)
        let uploader = NodeID(high: 9, low: 9), other = NodeID(high: 1, low: 1), asker = NodeID(high: 2, low: 2)
        let start = MeshInstant(nanoseconds: 1_000_000_000)
        var first = ChunkBitmap(count: 2)
        first.insert(0)
        func verdict(_ scheduler: inout TransferScheduler, seeding: Bool, seeders: Set<NodeID>,
                     after: Duration = .zero) -> TransferScheduler.SeedingVerdict {
            scheduler.seedingVerdict(attachment: manifest.id, index: 0, to: asker, seeding: seeding, seeders: seeders,
                                     now: start + after, leftAt: { _ in nil })
        }
        // A member that fetched the attachment whole serves it, whoever else holds it.
        var holder = TransferScheduler(seed: 1)
        holder.setAvailability(first, of: manifest.id, at: uploader)
        #expect(verdict(&holder, seeding: false, seeders: [uploader]) == .serve)
        // The uploader leaves a chunk to a member still fetching that announced it.
        var seed = TransferScheduler(seed: 2)
        seed.setAvailability(first, of: manifest.id, at: other)
        #expect(verdict(&seed, seeding: true, seeders: [uploader]) == .leave, "the chunk is left to the member fetching it")
        #expect(verdict(&seed, seeding: true, seeders: [uploader], after: seed.settings.busyGrace) == .serveAgain(.turnedAwayTooLong),
                "a member that does not pass it on must not starve the asker")
        #expect(verdict(&seed, seeding: true, seeders: [uploader], after: seed.settings.busyGrace + .milliseconds(1))
                == .serveAgain(.turnedAwayTooLong), "a want the queue refused is no copy: the grace still stands")
        seed.noteSeeded(attachment: manifest.id, index: 0, to: asker, now: start + seed.settings.busyGrace)
        #expect(verdict(&seed, seeding: true, seeders: [uploader], after: seed.settings.busyGrace + .seconds(1)) == .serve,
                "its asks for pieces it lost are served too (one copy, counted once), not turned away 5 s again")
        // Once that member holds it whole, the chunk is still left to it (before, any whole copy
        // turned seeding off, and the uploader served all it was asked)...
        var fetched = TransferScheduler(seed: 2)
        fetched.setAvailability(first, of: manifest.id, at: other)
        fetched.setAvailability(.full(2), of: manifest.id, at: other)
        #expect(verdict(&fetched, seeding: true, seeders: [uploader], after: .seconds(1)) == .leave)
        // ...but a claim of the whole file at once turns nobody away (it may be a liar's), and
        // does not turn seeding off either: a chunk just sent to one member still waits for it.
        var claimed = TransferScheduler(seed: 3)
        claimed.setAvailability(.full(2), of: manifest.id, at: other)
        #expect(verdict(&claimed, seeding: true, seeders: [uploader]) == .serve)
        claimed.noteSeeded(attachment: manifest.id, index: 0, to: NodeID(high: 3, low: 3), now: start)
        #expect(verdict(&claimed, seeding: true, seeders: [uploader], after: .milliseconds(100)) == .leave)
        // Another member that added the same content seeds like us: asked of both, each would
        // send the asker to the other.
        var twin = TransferScheduler(seed: 4)
        twin.setAvailability(.full(2), of: manifest.id, at: other)
        twin.noteSeeded(attachment: manifest.id, index: 0, to: NodeID(high: 3, low: 3), now: start)
        #expect(verdict(&twin, seeding: true, seeders: [uploader, other], after: .milliseconds(100)) == .serve,
                "with another seed, a chunk just sent to one member still goes to the next")
    }
}
