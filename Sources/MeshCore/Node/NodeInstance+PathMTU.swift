import MeshCrypto

/// Path MTU discovery as the node applies it (`PathMTUDiscovery`): the holders we pull chunks
/// from are asked for probes, proven sizes become the piece sizes we ask them for, and a
/// member's requests for probes are answered within a budget.
extension NodeInstance {
    /// The largest piece any member may ask of us: what fills the largest datagram a node accepts.
    var maxPieceSize: Int { pieceSize(inDatagramOf: settings.wire.maxReceivedDatagramSize) }

    /// The piece that fills a pairwise datagram of `size` bytes.
    func pieceSize(inDatagramOf size: Int) -> Int {
        DatagramCodec.pairwisePayload(inDatagramOf: size) - ChunkPiece.overhead
    }

    /// Starts measuring the path from a holder we are about to pull from (once per member).
    mutating func measurePath(from peer: NodeID, now: MeshInstant) {
        guard !links.pathMTU.isMeasuring(peer), let address = directory.addresses[peer] else { return }
        applyPath(links.pathMTU.begin(peer, ipv6: address.isIPv6, now: now), now: now)
    }

    mutating func applyPath(_ directives: [PathMTUDiscovery.Directive], now: MeshInstant) {
        for directive in directives {
            switch directive {
            case let .request(request, peer):
                sendPairwise([.pathProbeRequest(request)], to: peer)
            case let .sizeChanged(peer, size):
                receiving.assembler.setPieceSize(pieceSize(inDatagramOf: size), for: peer)
                log(.debug, "path size", ["member": "\(peer)", "datagram": "\(size)"])
            }
        }
    }

    /// Whole chunks asked at a larger size that got nothing back count toward a black hole.
    mutating func reportSilences(now: MeshInstant) {
        for (holder, pieceSize) in receiving.assembler.takeSilences() {
            let size = DatagramCodec.pairwiseDatagramSize(payload: pieceSize + ChunkPiece.overhead)
            applyPath(links.pathMTU.onSilence(from: holder, datagramSize: size, now: now), now: now)
        }
    }

    /// A member asks for a probe: a datagram of the size it names, sealed for it and sent to
    /// where it is known to be (never to where the request came from), at most
    /// `maxProbeAnswers` a second: a probe is up to about 108 times the size of its request.
    mutating func answerProbeRequest(_ request: PathProbeRequest, from peer: NodeID, now: MeshInstant) {
        let smallest = DatagramCodec.pairwiseDatagramSize(payload: PathProbe.overhead)
        guard request.size >= smallest, request.size <= settings.wire.maxReceivedDatagramSize else {
            counters.probeRequestsRefused += 1
            return
        }
        var budget = links.probeAnswers[peer] ?? (count: 0, since: now)
        if now >= budget.since + .seconds(1) { budget = (0, now) }
        guard budget.count < settings.maxProbeAnswers else {
            counters.probeRequestsRefused += 1
            return
        }
        budget.count += 1
        links.probeAnswers[peer] = budget
        let padding = DatagramCodec.pairwisePayload(inDatagramOf: request.size) - PathProbe.overhead
        sendPairwise([.pathProbe(PathProbe(token: request.token, padding: padding))], to: peer)
    }
}
