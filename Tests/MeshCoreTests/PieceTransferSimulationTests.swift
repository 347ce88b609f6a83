import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// Chunks in pieces over the seeded network: a holder answers wants with piece frames; an
/// asker puts chunks together with a real `ChunkAssembler` and asks again only for what is
/// missing. Datagrams are `SimEnvelope`s: the real frame codec, a checksum standing in for the
/// AEAD tag so a corrupted datagram is dropped as sealing would drop it.
final class PieceHolder: SimulatedProcess {
    static let id = NodeID(high: 1, low: 1)
    let chunks: [SHA256Digest: [UInt8]]
    var piecesSent = 0

    init(chunks: [[UInt8]]) {
        var table: [SHA256Digest: [UInt8]] = [:]
        for chunk in chunks { table[SHA256Digest.hashing(chunk)] = chunk }
        self.chunks = table
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        for case let .chunkWant(want) in SimEnvelope.openFrames(datagram)?.frames ?? [] {
            guard let bytes = chunks[want.digest] else { continue }
            for piece in ChunkAssembly.pieces(
                of: ByteBuffer(bytes: bytes), digest: want.digest,
                pieceSize: want.pieceSize, only: want.missing)
            {
                context.send(SimEnvelope.seal(from: Self.id, frames: [.chunkPiece(piece)]), to: sender)
                piecesSent += 1
            }
        }
    }
}

final class PieceAsker: SimulatedProcess {
    static let id = NodeID(high: 2, low: 2)
    let holder: SimAddress
    let wanted: [SHA256Digest]
    let lengths: [SHA256Digest: Int]
    var assembler: ChunkAssembler
    var complete: [SHA256Digest: [UInt8]] = [:]
    var bad = 0

    init(holder: SimAddress, wanted: [(digest: SHA256Digest, length: Int)], pieceSize: Int) {
        self.holder = holder
        self.wanted = wanted.map(\.digest)
        lengths = Dictionary(uniqueKeysWithValues: wanted.map { ($0.digest, $0.length) })
        assembler = ChunkAssembler(settings: .init(pieceSize: pieceSize))
    }

    func start(now: MeshInstant, context: inout SimContext) {
        for digest in wanted {
            if let want = assembler.begin(digest, length: lengths[digest] ?? 0, from: PieceHolder.id, now: now) {
                send(want, context: &context)
            }
        }
        context.schedule(timer: 1, after: .milliseconds(5))
    }

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        for (_, want) in assembler.onTick(now: now) { send(want, context: &context) }
        if complete.count < wanted.count { context.schedule(timer: 1, after: .milliseconds(5)) }
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        for case let .chunkPiece(piece) in SimEnvelope.openFrames(datagram)?.frames ?? [] {
            switch assembler.onPiece(piece, from: PieceHolder.id, now: now) {
            case let .complete(bytes, _, _):
                if SHA256Digest.hashing(bytes) == piece.digest { complete[piece.digest] = bytes } else { bad += 1 }
            case .accepted, .duplicate, .unsolicited:
                break
            }
        }
    }

    private func send(_ want: ChunkWant, context: inout SimContext) {
        context.send(SimEnvelope.seal(from: Self.id, frames: [.chunkWant(want)]), to: holder)
    }
}

@Suite("Chunks in pieces over a lossy network")
struct PieceTransferSimulationTests {
    static let link = LinkConditions(
        delay: .milliseconds(1), jitter: .milliseconds(2), lossProbability: 0.1,
        duplicationProbability: 0.02, reorderProbability: 0.1, corruptionProbability: 0.01)

    @Test(
        "10% loss, duplication, reordering, corruption: every chunk arrives whole, and only missing pieces are sent again",
        arguments: SimulationSeeds.from(defaultCount: 4))
    func lossyLink(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let chunks = (0..<8).map { index in
            random.bytes(20_000 + index * 777)
        }
        let pieceSize = 1000
        let (outcome, holder, asker) = Self.pull(chunks, pieceSize: pieceSize, over: Self.link, seed: seed)
        #expect(
            outcome == .satisfied, "\(SimulationSeeds.replay(seed)): \(asker.complete.count) of \(chunks.count) chunks")
        #expect(chunks.allSatisfy { asker.complete[SHA256Digest.hashing($0)] == $0 }, "\(SimulationSeeds.replay(seed))")
        let pieces = chunks.reduce(0) { $0 + ChunkPiece.pieceCount(chunkLength: $1.count, pieceSize: pieceSize) }
        let ratio = Double(holder.piecesSent) / Double(pieces)
        // With 10% loss each way (wants are lost too) about 1.2× is the floor; whole chunks sent
        // again would be 2× or more; 12 seeds measured 1.09 to 1.28.
        #expect(ratio < 1.4, "\(SimulationSeeds.replay(seed)): the holder sent \(ratio)× the pieces")
        #expect(asker.assembler.activeCount == 0)
        #expect(asker.bad == 0, "\(SimulationSeeds.replay(seed)): a chunk put together wrong")
    }

    /// One asker pulls `chunks` from one holder over `link` for at most 30 simulated seconds.
    static func pull(
        _ chunks: [[UInt8]], pieceSize: Int, over link: LinkConditions,
        seed: UInt64
    ) -> (SimRunOutcome, PieceHolder, PieceAsker) {
        let simulator = Simulator(seed: seed, defaultLink: link)
        let holder = PieceHolder(chunks: chunks)
        let holderAddress = simulator.addNode(holder)
        let asker = PieceAsker(
            holder: holderAddress, wanted: chunks.map { (SHA256Digest.hashing($0), $0.count) },
            pieceSize: pieceSize)
        _ = simulator.addNode(asker)
        let outcome = simulator.run(for: .seconds(30), checkEvery: .milliseconds(10)) { _ in
            asker.complete.count == chunks.count
        }
        return (outcome, holder, asker)
    }

    static let wideArea = LinkConditions(delay: .milliseconds(40), jitter: .milliseconds(4), lossProbability: 0.05)

    @Test(
        "40 ms each way, 5% loss: the wait before asking again follows the holder's answer time, not a LAN-sized constant",
        arguments: SimulationSeeds.from(defaultCount: 3))
    func wideAreaLink(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let chunks = (0..<8).map { _ in random.bytes(40_000) }
        let pieceSize = 1000
        let (outcome, holder, asker) = Self.pull(chunks, pieceSize: pieceSize, over: Self.wideArea, seed: seed)
        #expect(
            outcome == .satisfied, "\(SimulationSeeds.replay(seed)): \(asker.complete.count) of \(chunks.count) chunks")
        let ratio = Double(holder.piecesSent) / Double(chunks.count * 40)
        // Measured over 40 seeds: at most 13 re-asks and 1.09× the pieces. With a fixed 5 ms
        // wait (re-asking while the answer is still 80 ms away): 24 to 28 re-asks, up to 1.14×.
        #expect(
            asker.assembler.reasks < 20,
            "\(SimulationSeeds.replay(seed)): \(asker.assembler.reasks) re-asks for 8 chunks")
        #expect(ratio < 1.15, "\(SimulationSeeds.replay(seed)): the holder sent \(ratio)× the pieces")
    }
}
