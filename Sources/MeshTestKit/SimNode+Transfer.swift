import MeshCore
import MeshCrypto
import NIOCore

/// Chunks on the wire for a simulated node, as `MeshNode+Transfer`: wants go to a holder, the
/// holder answers with the chunk in pieces (one sealed datagram each), the asker puts them
/// together (`ChunkAssembler`), and the store verifies the whole before keeping it.
extension SimNode {
    var pieceSize: Int { codec.maxPairwisePayload - ChunkPiece.overhead }

    /// Transfer frames of a datagram sealed by `peer`'s pairwise key.
    func receiveTransfer(_ frames: [Frame], from peer: NodeID) {
        var progressed = false
        for frame in frames {
            switch frame {
            case let .chunkWant(want):
                serve(want, to: peer)
            case let .chunkPiece(piece):
                if case let .complete(bytes, contributors) = assembler.onPiece(piece, from: peer, now: now) {
                    receiveChunk(piece.digest, bytes: bytes, from: peer, contributors: contributors)
                    progressed = true
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
        guard want.pieceSize <= pieceSize else {
            return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld)), to: peer)
        }
        // Initial seeding: a chunk only we hold goes to one member at a time.
        if let ref = location(of: want.digest),
           !transfer.shouldServe(attachment: ref.attachment, index: ref.index, to: peer,
                                 holdingAll: complete.contains(ref.attachment), now: now) {
            return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .busy)), to: peer)
        }
        // Served only after verification: the store hashes every chunk it reads.
        guard let bytes = store.read(want.digest), let destination = peerAddresses[peer] else {
            return sendTransfer(.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld)), to: peer)
        }
        for piece in ChunkAssembly.pieces(of: ByteBuffer(bytes: bytes), digest: want.digest,
                                          pieceSize: want.pieceSize, only: want.missing) {
            guard let datagram = codec.seal([.chunkPiece(piece)], to: peer) else { return }
            send(datagram, to: destination)
        }
    }

    /// Where a chunk sits (the first attachment, by id, that uses it).
    private func location(of digest: SHA256Digest) -> ChunkRef? {
        for (id, manifest) in manifests.sorted(by: { $0.key < $1.key }) {
            if let index = manifest.chunks.firstIndex(of: digest) { return ChunkRef(attachment: id, index: index) }
        }
        return nil
    }

    func sendTransfer(_ frame: Frame, to peer: NodeID) {
        guard let destination = peerAddresses[peer], let datagram = codec.seal([frame], to: peer) else { return }
        send(datagram, to: destination)
    }

    /// Sends the scheduler's requests.
    func pumpTransfers() {
        for request in transfer.nextRequests(now: now) {
            requested[request.digest, default: []].append(ChunkRef(attachment: request.attachment, index: request.index))
            if let length = manifests[request.attachment]?.length(ofChunk: request.index),
               let want = assembler.begin(request.digest, length: length, from: request.peer, now: now) {
                sendTransfer(.chunkWant(want), to: request.peer)
            } else {
                transfer.onBusy(attachment: request.attachment, index: request.index, from: request.peer, now: now)
            }
        }
    }

    /// Tells the scheduler who holds what: members that announced whole attachments, as full bitmaps.
    func refreshAvailability() {
        for id in Set(transfer.activeAttachments).union(manifests.keys).sorted() {
            guard let count = manifests[id]?.chunks.count else { continue }
            for holder in holders(of: id) where holder != self.id {
                transfer.setAvailability(.full(count), of: id, at: holder)
            }
        }
    }

    /// A chunk whose last piece came from `peer`, put together from pieces of `contributors`:
    /// the store hashes it before keeping it.
    private func receiveChunk(_ digest: SHA256Digest, bytes: [UInt8], from peer: NodeID, contributors: Set<NodeID>) {
        guard let refs = requested.removeValue(forKey: digest), !refs.isEmpty else { return }
        guard store.write(bytes, expected: digest) else {
            // Never stored, never served: whoever sent pieces of it is not asked for it again.
            chunksRejected += 1
            for ref in refs {
                requested[digest, default: []].append(ref)
                for sender in contributors.sorted() {
                    transfer.onChunk(attachment: ref.attachment, index: ref.index, from: sender, valid: false)
                }
            }
            return
        }
        for ref in refs {
            localBitmaps[ref.attachment]?.insert(ref.index)
            dirtyBitmaps.insert(ref.attachment)
            lastProgress[ref.attachment] = now
            if transfer.onChunk(attachment: ref.attachment, index: ref.index, from: peer, valid: true),
               let manifest = manifests[ref.attachment] {
                finishFetch(ref.attachment, manifest)
            }
        }
    }

    func receiveAvailability(_ bitmap: ChunkBitmap, of attachment: SHA256Digest, from peer: NodeID) {
        transfer.setAvailability(bitmap, of: attachment, at: peer)
        if !complete.contains(attachment), !fetching.contains(attachment), journal.state.isPresent(attachment) {
            startFetch(attachment)
        }
        pumpTransfers()
    }

    /// Periodic transfer work: time out requests, announce new chunks, give up on what nobody holds.
    func transferTick() {
        transfer.onTick(now: now)
        for (peer, want) in assembler.onTick(now: now) { sendTransfer(.chunkWant(want), to: peer) }
        if now >= nextBitmapAnnouncement {
            nextBitmapAnnouncement = now + .milliseconds(250)
            for id in dirtyBitmaps.sorted() {
                guard let bitmap = localBitmaps[id] else { continue }
                for peer in activeMemberIDs { sendJournal(.chunks(id, bitmap), to: peer) }
            }
            dirtyBitmaps = []
        }
        for id in fetching.sorted() where manifestFetches[id] == nil {
            guard let last = lastProgress[id], now >= last + configuration.unavailableTimeout,
                  !transfer.hasRequestsInFlight(id) else { continue }
            finishFetch(id, nil)
        }
        pumpTransfers()
    }
}
