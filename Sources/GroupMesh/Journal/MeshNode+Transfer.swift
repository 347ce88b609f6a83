import MeshCore
import MeshCrypto
import NIOCore

/// Chunks on the wire: a want goes to a holder, the holder answers with the chunk cut into
/// pieces (one sealed datagram each, written in one burst), and the asker puts them together,
/// asks again only for what did not come, and verifies the whole before storing it.
extension MeshNode {
    /// Chunks read and sent at once; more wants are answered "busy" (a member cannot make us
    /// read without bound).
    static let maxConcurrentServes = 32
    /// Reads for one member at once: a member that floods wants takes no more than its share
    /// (the scheduler never has more than 8 chunks in flight to one holder).
    static let maxServesPerPeer = 8
    /// Chunks kept after serving them, for re-asks of lost pieces (4 MiB at 256 KiB chunks).
    static let recentChunkCapacity = 16

    /// The piece size that fills one pairwise datagram.
    var pieceSize: Int { codec.maxPairwisePayload - ChunkPiece.overhead }

    /// Transfer frames of a datagram sealed by `peer`'s pairwise key.
    func receiveTransfer(_ frames: [Frame], from peer: NodeID) {
        var progressed = false
        for frame in frames {
            switch frame {
            case let .chunkWant(want):
                serve(want, to: peer)
            case let .chunkPiece(piece):
                switch assembler.onPiece(piece, from: peer, now: now) {
                case let .complete(bytes, contributors):
                    receiveChunk(piece.digest, bytes: bytes, from: peer, contributors: contributors)
                    progressed = true
                case .unsolicited:
                    counters.piecesUnsolicited += 1
                case .accepted, .duplicate:
                    break
                }
            case let .chunkAbsent(absent):
                assembler.onAbsent(absent.digest, from: peer)
                for ref in requested[absent.digest] ?? [] {
                    switch absent.reason {
                    case .busy: transfer.onBusy(attachment: ref.attachment, index: ref.index, from: peer, now: now)
                    case .notHeld: transfer.onMissing(attachment: ref.attachment, index: ref.index, from: peer)
                    }
                }
                progressed = true
            default:
                continue
            }
        }
        if progressed { pumpTransfers() }
    }

    private func serve(_ want: ChunkWant, to peer: NodeID) {
        guard want.pieceSize <= pieceSize, want.pieceSize >= ChunkWant.minPieceSize else {
            return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld)), to: peer)
        }
        // Initial seeding: a chunk only we hold goes to one member at a time.
        if Self.superSeeding, let ref = chunkLocations[want.digest],
           !transfer.shouldServe(attachment: ref.attachment, index: ref.index, to: peer,
                                  holdingAll: complete.contains(ref.attachment), now: now) {
            return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .busy)), to: peer)
        }
        // The same want again while its pieces are on their way: they will do.
        let key = ServeBudget.Key(peer: peer, digest: want.digest)
        guard !serving.contains(key) else { return }
        // Admission: a full send queue or too many reads answers "busy", so that holders under
        // load shed wants instead of queueing bursts that arrive after the asker gave up.
        guard serving.count < Self.maxConcurrentServes, isWritable, let store,
              serving.lazy.filter({ $0.peer == peer }).count < Self.maxServesPerPeer else {
            counters.wantsRefused += 1
            return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .busy)), to: peer)
        }
        // Kept chunks answer re-asks for lost pieces; past two copies a second to one member, its
        // wants wait for a read like any other (one at a time per chunk), as a flood should.
        if serveBudget.allows(key, now: now), let chunk = recentChunks[want.digest] {
            return sendPieces(of: chunk, want: want, to: peer)
        }
        serving.insert(key)
        Task {
            // Served only after verification: the store hashes every chunk it reads.
            let bytes = await store.read(want.digest)
            serving.remove(key)
            guard let bytes else {
                return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld)), to: peer)
            }
            let chunk = channelAllocator.buffer(bytes: bytes)
            recentChunks.insert(chunk, for: want.digest)
            sendPieces(of: chunk, want: want, to: peer)
        }
    }

    /// Datagrams per segmented write: the kernel takes up to 64 segments and 64 KiB.
    static let maxSegments = 64
    static let maxSegmentedBytes = 65_000

    /// Seals the wanted pieces back to back into batches of equal-sized datagrams, writes each
    /// batch as one segmented send, and flushes once.
    private func sendPieces(of chunk: ByteBuffer, want: ChunkWant, to peer: NodeID) {
        guard let address = peerAddresses[peer] else { return }
        let pieces = ChunkAssembly.pieces(of: chunk, digest: want.digest, pieceSize: want.pieceSize, only: want.missing)
        var payloadBytes = 0
        var batch = channelAllocator.buffer(capacity: Self.maxSegmentedBytes)
        var segmentSize = 0, count = 0
        for piece in pieces {
            let before = batch.readableBytes
            guard codec.seal([.chunkPiece(piece)], to: peer, appendingTo: &batch) else { return }
            let length = batch.readableBytes - before
            payloadBytes += piece.payload.readableBytes
            if count == 0 { segmentSize = length }
            count += 1
            // A batch ends after a shorter datagram (only the last may be), or when full.
            if length != segmentSize || count == Self.maxSegments
                || batch.readableBytes + segmentSize > Self.maxSegmentedBytes {
                sendSegmented(batch, segmentSize: segmentSize, count: count, to: address)
                batch = channelAllocator.buffer(capacity: Self.maxSegmentedBytes)
                count = 0
            }
        }
        if count > 0 { sendSegmented(batch, segmentSize: segmentSize, count: count, to: address) }
        flushDatagrams()
        if want.missing == nil { counters.chunksServed += 1 }
        counters.chunkPayloadBytesSent += UInt64(payloadBytes)
        serveBudget.charge(payloadBytes, of: chunk.readableBytes, to: .init(peer: peer, digest: want.digest), now: now)
    }

    func sendTransfer(_ frame: Frame, to peer: NodeID) {
        guard let address = peerAddresses[peer],
              let datagram = codec.seal([frame], to: peer, allocator: channelAllocator) else { return }
        send(datagram, to: address)
    }
}
