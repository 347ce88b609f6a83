import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// The swarm's scheduling on the seeded network: real `TransferScheduler`s (and the uploader's
/// `SeedingPolicy`), small chunks, datagrams that are lost, duplicated and reordered (a lost
/// request or chunk is asked again after the request timeout). Node 0 uploads; the others join late and fetch.
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
    /// The serving side of the uploader (`seeds`): which wants it leaves to others.
    var seeding = SeedingPolicy()
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
            guard
                corrupt || !seeds
                    || seeding.verdict(
                        attachment: manifest.id, index: index, to: peer,
                        seeders: [Self.id(SimAddress(0))],
                        holders: scheduler.announced(manifest.id), now: now,
                        leftAt: { _ in nil }) != .leave
            else {
                context.send(Self.encode(.busy(index: index)), to: sender)
                return
            }
            if seeds { seeding.admitted(attachment: manifest.id, index: index, to: peer, now: now) }
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
            seeding.onAnnounced(bitmap, of: manifest.id, at: peer)
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
        let manifest = Manifest(
            size: UInt64(chunkCount * chunkSize), chunkSize: chunkSize,
            chunks: chunks.map { SHA256Digest.hashing($0) })
        return (manifest, chunks)
    }

    /// Node 0 holds everything; `joiners` start empty, staggered.
    static func swarm(seed: UInt64, joiners: Int, link: LinkConditions) -> (Simulator, [SwarmProcess]) {
        let (manifest, content) = attachment(seed: seed)
        let simulator = Simulator(seed: seed, defaultLink: link)
        var processes: [SwarmProcess] = []
        for index in 0...joiners {
            processes.append(
                SwarmProcess(manifest: manifest, content: content, holdsAll: index == 0, seed: seed &+ UInt64(index)))
        }
        let addresses = processes.enumerated().map { index, process in
            simulator.addNode(process, startingAt: .zero + .milliseconds(index == 0 ? 0 : 50 + 10 * index))
        }
        for process in processes {
            process.peers = addresses.filter { $0 != addresses[processes.firstIndex { $0 === process }!] }
        }
        return (simulator, processes)
    }

    static let lossy = LinkConditions(
        delay: .milliseconds(2), jitter: .milliseconds(3), lossProbability: 0.1,
        duplicationProbability: 0.02, reorderProbability: 0.1)

    @Test(
        "1 uploader and 20 late joiners under loss all end with every chunk; the uploader sends < 1.5× the size",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func lateJoinersSwarm(seed: UInt64) {
        let (simulator, processes) = Self.swarm(seed: seed, joiners: 20, link: Self.lossy)
        let outcome = simulator.run(for: .seconds(120), checkEvery: .milliseconds(100)) { _ in
            processes.allSatisfy { $0.have.isComplete }
        }
        #expect(outcome == .satisfied, "\(SimulationSeeds.replay(seed)): \(processes.map { $0.have.held })")
        let size = Self.chunkCount * Self.chunkSize
        let ratio = Double(processes[0].payloadSent) / Double(size)
        #expect(
            ratio < 1.5,
            "\(SimulationSeeds.replay(seed)): uploader sent \(ratio)× the attachment; served per chunk \(processes[0].servedCount.values.sorted())"
        )
        #expect(processes.allSatisfy { $0.maxInFlightOverWindow <= 0 }, "a window was exceeded")
    }

    @Test(
        "a holder serving corrupted chunks is detected and avoided; the transfer completes from the others",
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
            #expect(
                process.scheduler.isAvoided(SwarmProcess.id(SimAddress(1))) || process.rejected < 3,
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
}
