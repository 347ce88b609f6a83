import MeshCrypto
import NIOCore

/// Chunks on the wire: a want goes to a holder, the holder answers with the chunk cut into
/// pieces (one sealed datagram each, in segmented batches), and the asker puts them together,
/// asks again only for what did not come, and has the store verify the whole before keeping it.
extension NodeInstance {

    /// Transfer frames of a datagram sealed by `peer`'s pairwise key.
    mutating func receiveTransfer(_ frames: [Frame], from peer: NodeID, datagramSize: Int, now: MeshInstant) {
        var progressed = false
        // The downlink's rate changes only when an interval closes (or, once, at the first round trip).
        var rateMayHaveChanged = false
        for frame in frames {
            switch frame {
            case let .chunkWant(want):
                serve(want, to: peer, now: now)
            case let .chunkPace(pace):
                serving.pacer.setRate(pace.rate, for: peer)
            case let .chunkCancel(cancel):
                let key = ServeBudget.Key(peer: peer, digest: cancel.digest)
                // A read still under way is sent nothing when it ends.
                if serving.reads.contains(key) { serving.cancelled.insert(key) }
                counters.chunkPayloadBytesCancelled += UInt64(serving.pacer.cancel(cancel.digest, for: peer))
            case let .chunkPiece(piece):
                let result = receiving.assembler.onPiece(piece, from: peer, now: now)
                // A round trip is measured by us alone: any holder's first answer will do, when
                // nothing of ours was queued there ahead of the want (`ChunkAssembler`).
                // On a short path the first round trip raises the rate many times over: the
                // window and the holders' paces follow at once, not an interval later, or the
                // holders would keep the first rate for a good part of a short `get`
                // (Docs/DESIGN-NOTES.md).
                if let sample = receiving.assembler.takeRoundTripSample(),
                    receiving.downlink.onRoundTrip(sample, now: now)
                {
                    progressed = true
                }
                // Only pieces asked for, of members whose chunks proved right, tell the controller
                // about the line: anyone can send others, and a liar's timestamps are lies too.
                // Others' pieces asked for count only in intervals no proven holder fed, and there
                // they can hold slow start back and drain its overshoot once, no lasting cut
                // (`DownlinkController.onPiece`).
                switch result {
                case .accepted, .complete:
                    // A holder opens its window by bytes only once a chunk of its proved right:
                    // before that its pieces could be anyone's, and the controller is not yet
                    // braking on its delays, so its window stays as it began.
                    // A chunk two attachments share counts once.
                    let proven = receiving.provenHolders.contains(peer)
                    if proven {
                        for ref in fetchTable.requested[piece.digest] ?? [] {
                            if transfer.onPieceBytes(
                                piece.payload.readableBytes, of: ref.attachment, index: ref.index, from: peer)
                            {
                                break
                            }
                        }
                    }
                    // Whether the holder keeps to the pace it was told shows in what it sends.
                    receiving.toldRates[peer]?.onPiece(bytes: piece.payload.readableBytes, now: now)
                    if receiving.downlink.onPiece(
                        bytes: piece.payload.readableBytes, sentAt: piece.sentAt, from: peer, now: now,
                        trusted: proven)
                    {
                        rateMayHaveChanged = true
                        if logs(.debug) { logDownlink() }
                    }
                case .duplicate, .unsolicited:
                    break
                }
                switch result {
                case let .complete(bytes, contributors, stillSending):
                    sendCancels(of: piece.digest, to: stillSending)
                    links.pathMTU.onPieces(from: peer)
                    receiveChunk(piece.digest, bytes: bytes, from: peer, contributors: contributors)
                    progressed = true
                case .unsolicited:
                    counters.piecesUnsolicited += 1
                case .accepted, .duplicate:
                    break
                }
            case let .chunkAbsent(absent):
                receiving.assembler.onAbsent(absent.digest, from: peer)
                for ref in fetchTable.requested[absent.digest] ?? [] {
                    switch absent.reason {
                    case .busy: transfer.onBusy(attachment: ref.attachment, index: ref.index, from: peer, now: now)
                    case .notHeld: transfer.onMissing(attachment: ref.attachment, index: ref.index, from: peer)
                    case .leftToOthers:
                        transfer.onLeftToOthers(attachment: ref.attachment, index: ref.index, from: peer, now: now)
                    }
                }
                progressed = true
            case let .pathProbeRequest(request):
                answerProbeRequest(request, from: peer, now: now)
            case let .pathProbe(probe):
                applyPath(links.pathMTU.onProbe(probe, from: peer, datagramSize: datagramSize, now: now), now: now)
            default:
                continue
            }
        }
        if progressed {
            pumpTransfers(now: now)
        } else if rateMayHaveChanged {
            retunePacing(now: now)
        }
    }

    /// Tells members asked for a chunk to send no more of it (`ChunkCancel`).
    mutating func sendCancels(of digest: SHA256Digest, to members: [NodeID]) {
        for member in members { sendPairwise([.chunkCancel(ChunkCancel(digest: digest))], to: member) }
    }

    mutating func logDownlink() {
        let interval = receiving.downlink.lastInterval
        log(
            .debug, "downlink",
            [
                "rate": "\(Int(receiving.downlink.rate) >> 10) KiB/s",
                "delivered": "\(Int(interval.delivered) >> 10) KiB/s",
                "queue": "\(receiving.downlink.queueingDelay)",
                "unprovenQueue": receiving.downlink.lastUnprovenQueue.map { "\($0)" } ?? "-",
                "lost": "\(interval.lost)/\(interval.received + interval.lost)",
                "slowStart": "\(receiving.downlink.slowStart)",
                "competing": receiving.downlink.competingSlowStart ? "starting" : "\(receiving.downlink.competing)",
                "slowdowns": "\(receiving.downlink.slowdowns)/\(receiving.downlink.slowdownsFoundAnotherFlow)",
                "testLowest": receiving.downlink.lastSlowdownLowest.map { "\($0)" } ?? "-",
                "probeGain": receiving.downlink.lastProbeGain.map { "\($0)×" } ?? "-",
                "roundTrip": receiving.downlink.roundTrip.map { "\($0)" } ?? "-",
                "cap": receiving.downlink.backgroundCap.map { "\(Int($0) >> 10) KiB/s" } ?? "-",
                "inFlight": "\(transfer.inFlightByPeer.values.reduce(0, +))/\(transfer.inFlightLimit ?? 0)",
                "storing": "\(transfer.storingCount)",
            ])
    }

    private mutating func serve(_ want: ChunkWant, to peer: NodeID, now: MeshInstant) {
        // Pieces under the minimum would turn one want into hundreds of thousands of datagrams.
        guard want.pieceSize <= maxPieceSize, want.pieceSize >= ChunkWant.minPieceSize else {
            counters.wantsMisshapen += 1
            return sendPairwise([.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld))], to: peer)
        }
        serving.pacer.setRate(want.rate, for: peer)
        // Initial seeding: a member that added the content sends each chunk about once.
        var seeded: (ref: ChunkRef, verdict: SeedingPolicy.Verdict)?
        if settings.superSeeding, let ref = chunkLocations[want.digest], library.complete.contains(ref.attachment) {
            let seeders = Set(journal.state.attachments(withContent: ref.attachment).map(\.addedBy))
            if seeders.contains(localID) {
                let verdict = serving.seeding.verdict(
                    attachment: ref.attachment, index: ref.index, to: peer, seeders: seeders,
                    holders: transfer.announced(ref.attachment), now: now
                ) { member in
                    serving.reads.contains(ServeBudget.Key(peer: member, digest: want.digest))
                        ? now : serving.pacer.leftAt(want.digest, for: member, now: now)
                }
                guard verdict != .leave else {
                    counters.seedingRefusals += 1
                    return sendPairwise(
                        [.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .leftToOthers))], to: peer)
                }
                seeded = (ref, verdict)
            }
        }
        // The same want again while its pieces are on their way: they will do.
        let key = ServeBudget.Key(peer: peer, digest: want.digest)
        serving.cancelled.remove(key)
        guard !serving.reads.contains(key) else { return }
        // Admission: a full send queue or too many reads answers "busy", so that holders under
        // load shed wants instead of queueing bursts that arrive after the asker gave up. A read
        // under way counts as a chunk queued: its pieces are queued the moment it ends.
        let readingForPeer = serving.reads.lazy.filter({ $0.peer == peer }).count
        guard serving.reads.count < settings.maxConcurrentServes, serving.writable,
            readingForPeer < settings.maxServesPerPeer,
            serving.pacer.queuedBytes + serving.reads.count * settings.chunkSize < settings.maxPacedBytes,
            serving.pacer.queuedBytes(for: peer) + readingForPeer * settings.chunkSize < settings.maxPacedBytesPerPeer,
            serving.pacer.queuedChunks(for: peer) < settings.transfer.maximumInFlight
        else {
            counters.wantsRefused += 1
            return sendPairwise([.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .busy))], to: peer)
        }
        // Recorded once admitted: a want refused here leaves nothing on its way to the member
        // (a second member's first want is within its budget below).
        if let (ref, verdict) = seeded {
            serving.seeding.admitted(attachment: ref.attachment, index: ref.index, to: peer, now: now)
            // Counted once: a member served after its grace stays served, but a member whose first
            // copy was passed over may still ask for its lost pieces.
            if case let .serveAgain(reason) = verdict, want.missing == nil || reason == .turnedAwayTooLong {
                counters.seedingSecondCopies += 1
                log(.debug, "seeding", ["secondCopy": reason.rawValue, "chunk": "\(ref.index)", "to": "\(peer)"])
            }
        }
        // Kept chunks answer re-asks for lost pieces; past two copies a second to one member, its
        // wants wait for a read like any other (one at a time per chunk), as a flood should.
        let withinBudget = serving.budget.allows(key, now: now)
        if withinBudget, let chunk = serving.recentChunks[want.digest] {
            return sendPieces(of: chunk, want: want, to: peer, now: now)
        }
        // Past the budget, the whole chunk again is what only a flood asks for: busy. A re-ask for
        // lost pieces still waits for a read (busy there stalled joiners whose bursts overflowed
        // a small receive buffer).
        guard withinBudget || want.missing != nil else {
            counters.wantsRefused += 1
            return sendPairwise([.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .busy))], to: peer)
        }
        serving.reads.insert(key)
        // Served only verified: the store hashes every chunk it reads, except those it hashed
        // itself as it stored them lately (and the asker verifies every chunk it gets).
        store(.readChunk(want.digest), .serveChunk(want, to: peer))
    }

    mutating func chunkReadForServing(
        _ result: Result<StorageOutcome, StorageFailure>, want: ChunkWant,
        to peer: NodeID, now: MeshInstant
    ) {
        let key = ServeBudget.Key(peer: peer, digest: want.digest)
        serving.reads.remove(key)
        guard serving.cancelled.remove(key) == nil, phase.isActive else { return }
        guard case let .success(.read(chunk?)) = result else {
            // A chunk of an attachment we hold whole that cannot be read was damaged on disk (the
            // store discarded it): the attachment is fetched again.
            for id in library.complete.sorted() where manifests[id]?.chunks.contains(want.digest) == true {
                attachmentDamaged(id, detail: "chunk \(want.digest.hex.prefix(16)) did not verify", now: now)
            }
            return sendPairwise([.chunkAbsent(ChunkAbsent(digest: want.digest, reason: .notHeld))], to: peer)
        }
        serving.recentChunks.insert(chunk, for: want.digest)
        sendPieces(of: chunk, want: want, to: peer, now: now)
    }

    /// Queues the wanted pieces at the rate the member asked for, and sends what is due.
    private mutating func sendPieces(of chunk: ByteBuffer, want: ChunkWant, to peer: NodeID, now: MeshInstant) {
        var pieces = ChunkAssembly.pieces(of: chunk, digest: want.digest, pieceSize: want.pieceSize, only: want.missing)
        // A queued piece is a view of the whole chunk: a few pieces of many chunks would hold
        // every chunk in memory while they wait for a slow pace. Few pieces get their own bytes.
        if pieces.count * want.pieceSize * 2 < chunk.readableBytes {
            for index in pieces.indices {
                pieces[index].payload = ByteBuffer(bytes: pieces[index].payload.readableBytesView)
            }
        }
        let bytes = serving.pacer.enqueue(pieces, digest: want.digest, to: peer)
        if want.missing == nil { counters.chunksServed += 1 }
        serving.budget.charge(
            bytes, of: chunk.readableBytes, to: ServeBudget.Key(peer: peer, digest: want.digest), now: now)
        releasePieces(now: now)
    }

    /// Sends the pieces whose time has come (`PiecePacer`).
    mutating func releasePieces(now: MeshInstant) {
        for (peer, pieces) in serving.pacer.due(now: now) { transmit(pieces, to: peer, now: now) }
    }

    /// Seals pieces back to back into batches of equal-sized datagrams, each batch one
    /// segmented send, stamped with our clock (the requester measures queueing with it).
    private mutating func transmit(_ pieces: [ChunkPiece], to peer: NodeID, now: MeshInstant) {
        guard let address = directory.addresses[peer] else { return }
        let stamp = UInt32(truncatingIfNeeded: now.nanoseconds / 1000)
        if let relay = links.paths.relay(of: peer) {
            // One wrapped datagram each: a relay forwards datagrams, not segmented batches.
            for var piece in pieces {
                piece.sentAt = stamp
                guard let datagram = keying.codec.seal([.chunkPiece(piece)], to: peer) else { return }
                sendThroughRelay(datagram, to: peer, via: relay, kind: .transfer)
                counters.chunkPayloadBytesSent += UInt64(piece.payload.readableBytes)
            }
            return
        }
        var batch = PieceBatch(capacity: settings.maxSegmentedBytes)
        for var piece in pieces {
            piece.sentAt = stamp
            // Only the last datagram of a segmented send may be shorter, and pieces of several
            // chunks take turns: a batch ends after a shorter datagram, before a longer one, or
            // when full.
            if batch.count > 0, batch.closed || piece.payload.readableBytes > batch.segmentPayload {
                send(&batch, to: address)
            }
            let before = batch.bytes.readableBytes
            guard keying.codec.seal([.chunkPiece(piece)], to: peer, appendingTo: &batch.bytes) else { return }
            batch.added(
                length: batch.bytes.readableBytes - before, payload: piece.payload.readableBytes,
                maxSegments: settings.maxSegments)
        }
        if batch.count > 0 { send(&batch, to: address) }
    }

    private mutating func send(_ batch: inout PieceBatch, to address: PeerAddress) {
        transmit(segments: batch.bytes, segmentSize: batch.segmentSize, count: batch.count, to: address)
        counters.chunkPayloadBytesSent += UInt64(batch.payloadBytes)
        batch = PieceBatch(capacity: batch.capacity)
    }
}

/// Sealed pieces on their way into one segmented send.
struct PieceBatch {
    let capacity: Int
    var bytes: ByteBuffer
    var count = 0
    var segmentSize = 0
    var segmentPayload = 0
    var payloadBytes = 0
    /// Takes no more: it ended with a shorter datagram, or another would not fit.
    var closed = false

    init(capacity: Int) {
        self.capacity = capacity
        bytes = ByteBuffer()
        bytes.reserveCapacity(capacity)
    }

    mutating func added(length: Int, payload: Int, maxSegments: Int) {
        if count == 0 { segmentSize = length; segmentPayload = payload }
        count += 1
        payloadBytes += payload
        closed = length != segmentSize || count == maxSegments || bytes.readableBytes + segmentSize > capacity
    }
}
