import MeshCrypto

/// The downlink's congestion control as the node applies it: the controller's rate becomes
/// the chunks the swarm may have in flight, the pace each holder is asked for (its share of the
/// rate, by its share of those chunks), and the patience of the waits that follow from both.
extension NodeInstance {
    /// Before requests go out: the window, timeouts and silences that follow from the rate.
    mutating func applyDownlinkLimits() {
        // A holder ticks per pacing slice: with nothing to fetch there is nothing to limit.
        guard !fetchTable.fetches.isEmpty else { return }
        receiving.downlink.setPriority(fetchTable.loadWaiters.isEmpty ? .background : .foreground)
        let chunk = max(1, settings.chunkSize)
        // One more than the budget (the chunk being finished beside those in full flow), and two
        // per holder, so that every holder always has pieces queued and their paces add up to
        // the rate instead of coming and going with each chunk.
        // At a trickle, fewer: each chunk must still come well within the longest wait.
        let trickle = max(1, Int(receiving.downlink.rate * settings.maximumPacedWait.milliseconds / 2000) / chunk)
        let flowing = min(
            settings.transfer.maximumFlowing, trickle,
            max((receiving.downlink.inFlightBudget + chunk - 1) / chunk + 1, 2 * transfer.holderCount))
        // Chunks that wait only for a lost piece asked again hold no bytes on the line: counted
        // against the budget, on a lossy long path they would take every slot and idle the line.
        // At most as many again: at a trickle, chunks open without bound are asked again and
        // again, and holders send the file more than once.
        // Only those whose request is still in flight: one that timed out holds no slot either.
        let repairing = transfer.setRepairing(
            receiving.assembler.repairingChunks.flatMap { chunk in
                (fetchTable.requested[chunk.digest] ?? []).map {
                    TransferScheduler.Request(
                        peer: chunk.holder, attachment: $0.attachment, index: $0.index, digest: chunk.digest)
                }
            })
        let limit = min(settings.transfer.maximumInFlight, flowing + min(repairing, flowing))
        transfer.inFlightLimit = limit
        let rate = max(1, receiving.downlink.rate)
        // With `sharing` chunks sharing the rate, each takes this long, and a holder's pieces of
        // one chunk come this far apart. After a cut, the chunks open are more than the new
        // budget: timed by the budget alone, their pieces were asked again while still queued.
        let sharing = max(flowing, receiving.assembler.activeCount)
        let perChunk = Duration.seconds(Double(sharing * chunk) / rate)
        // Bounded, so that a holder gone quiet still loses its requests in time.
        transfer.minimumTimeout = min(
            settings.maximumPacedWait,
            perChunk * 2 + receiving.downlink.assumedRoundTrip * 2)
        receiving.assembler.minimumSilence = min(
            settings.maximumPacedWait / 4,
            .seconds(Double(receiving.assembler.largestPieceSize * sharing) / rate * 4))
    }

    /// The pace to ask of `peer`: the rate shared equally by the holders with chunks in flight
    /// (each has a queue of them, so each sends its whole share).
    func paceShare(for peer: NodeID, inFlight: [NodeID: Int]) -> Int {
        let holders = inFlight.count + (inFlight[peer] == nil ? 1 : 0)
        return Int(receiving.downlink.rate / Double(holders))
    }

    /// A want carrying the pace asked of its holder, who is then counted as told.
    mutating func sendWant(_ want: ChunkWant, to peer: NodeID, now: MeshInstant) {
        var want = want
        let share = paceShare(for: peer, inFlight: transfer.inFlightByPeer)
        want.rate = ChunkPace.representable(share)
        notePaceTold(share, to: peer, now: now)
        sendPairwise([.chunkWant(want)], to: peer)
    }

    /// `peer` is told `share` now: what it sends from a round trip on is checked against it.
    private mutating func notePaceTold(_ share: Int, to peer: NodeID, now: MeshInstant) {
        receiving.toldRates[peer] = ToldPace(rate: share, at: now, showsAfter: paceShowsAfter)
    }

    /// How long after a pace is told the pieces sent at it arrive: a round trip and the queue.
    var paceShowsAfter: Duration {
        receiving.downlink.assumedRoundTrip + receiving.downlink.queueingDelay
    }

    /// Whether a holder told `told` must hear `share`: a cut of more than a thirty-second, a rise
    /// of more than an eighth. A rise can wait for the next want (retold finely, every probe's
    /// step and every rise would reach the holders); a cut cannot: delay mode's cuts at its target
    /// are a few percent, and retold only past an eighth they would never reach the holders,
    /// whose queue would grow on until a larger cut (Docs/DESIGN-NOTES.md).
    ///
    /// A rise of more than a thirty-second is retold too once the last pace is `settled` (told
    /// `paceSettlesAfter` control intervals ago): delay mode grows at most an eighth past what
    /// arrives, and what arrives is a little under the pace told (a lost piece, the last of a
    /// chunk), so with wants far apart (a holder with several chunks queued at a low pace) its
    /// rises would never reach the holders, and a fetch after a cut would stay below its line.
    static func paceNeedsRetelling(told: Int, share: Int, settled: Bool = false) -> Bool {
        // What the wire would carry must change too (whole KiB/s).
        guard ChunkPace.representable(share) != ChunkPace.representable(told) else { return false }
        return share < told - told / 32 || share > told + told / (settled ? 32 : 8)
    }

    /// Control intervals after which a pace is retold for a small rise.
    static let paceSettlesAfter = 4

    /// Holders with chunks in flight whose share moved enough since they were told hear the new
    /// pace (`paceNeedsRetelling`), and so do those that send well past the pace told, which
    /// they cannot have heard (`ToldPace`).
    mutating func retunePacing(now: MeshInstant) {
        let inFlight = transfer.inFlightByPeer
        for peer in receiving.toldRates.keys where inFlight[peer] == nil { receiving.toldRates[peer] = nil }
        // Replication nobody waits for takes its small rises with the next want: retold, it
        // would grow past a loss-bound TCP beside it and take from that flow's share.
        let foreground = receiving.downlink.priority == .foreground
        let settles = receiving.downlink.interval * Self.paceSettlesAfter
        for peer in inFlight.keys.sorted() {
            let share = paceShare(for: peer, inFlight: inFlight)
            guard let told = receiving.toldRates[peer] else { continue }
            if !Self.paceNeedsRetelling(told: told.rate, share: share, settled: foreground && now >= told.at + settles)
            {
                guard receiving.toldRates[peer]?.unheard(now: now, window: receiving.downlink.interval) == true else {
                    continue
                }
                counters.pacesRetold += 1
            }
            notePaceTold(share, to: peer, now: now)
            sendPairwise([.chunkPace(ChunkPace(rate: share))], to: peer)
        }
    }

    /// What pacing knew of a member that is gone or restarted: its queue here, its clock and
    /// datagram numbers, the pace it was told.
    mutating func forgetPacing(of id: NodeID) {
        serving.pacer.remove(id)
        receiving.downlink.removeHolder(id)
        receiving.toldRates[id] = nil
        links.pathMTU.remove(id)
        receiving.assembler.setPieceSize(nil, for: id)
        links.probeAnswers[id] = nil
    }
}
