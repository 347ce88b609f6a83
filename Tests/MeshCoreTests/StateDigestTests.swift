import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// Push-pull by digest: what a member sends back for a partner's digest, and what a
/// digest on the wire may hold.
@Suite("anti-entropy by digest")
struct StateDigestTests {
    static func digest(
        _ instance: MembershipInstance, request: Bool = true, skipping skipped: Set<NodeID> = [],
        overriding overrides: [NodeID: (UInt64, MemberStatus)] = [:]
    ) -> StateDigest {
        let entries = instance.view.filter { !skipped.contains($0.id) }.map { member in
            let (incarnation, status) = overrides[member.id] ?? (member.incarnation, member.status)
            return StateDigest.Entry(member: member.id, incarnation: incarnation, status: status)
        }.sorted { $0.member < $1.member }
        return StateDigest(isRequest: request, lower: NodeID(high: 0, low: 0), upper: nil, entries: entries)
    }

    static func sent(_ directives: [MembershipDirective]) -> [[Frame]] {
        directives.compactMap { if case let .send(frames, _, _) = $0 { frames } else { nil } }
    }

    @Test("a partner as current as we are gets our digest back and no record")
    func currentPartnerGetsNoRecords() {
        let cluster = ManualCluster(count: 4)
        var node = cluster.instance(0)
        let partner = cluster.instance(1)
        let out = Self.sent(
            node.onFrames(
                [.stateDigest(Self.digest(partner))], from: cluster[1],
                address: ManualCluster.address(2), now: cluster.now))
        #expect(out.flatMap(\.aliveRecords).isEmpty, "\(out)")
        let answers = out.flatMap { $0.compactMap { if case let .stateDigest(d) = $0 { d } else { nil } } }
        #expect(answers.count == 1 && !answers[0].isRequest && answers[0].entries.count == 4)
        // The answer asks nothing back: the partner sends records, never another digest.
        var partnerNode = partner
        let back = Self.sent(
            partnerNode.onFrames(
                [.stateDigest(answers[0])], from: cluster[0],
                address: ManualCluster.address(1), now: cluster.now))
        #expect(back.isEmpty, "\(back)")
    }

    @Test("records go only where the partner is behind: a member it lacks, an older incarnation, a weaker status")
    func onlyWhatThePartnerLacks() throws {
        let cluster = ManualCluster(count: 5)
        var node = cluster.instance(0)
        // Node 0 comes to suspect member 4.
        _ = node.onFrames(
            [.suspect(Accusation(member: cluster[4], incarnation: 0, accuser: cluster[2]))],
            from: cluster[2], address: ManualCluster.address(3), now: cluster.now)
        #expect(node.member(cluster[4])?.status == .suspect)
        let partner = cluster.instance(1)
        let digest = Self.digest(partner, skipping: [cluster[2]], overriding: [cluster[3]: (0, .alive)])
        let out = Self.sent(
            node.onFrames(
                [.stateDigest(digest)], from: cluster[1], address: ManualCluster.address(2),
                now: cluster.now))
        let records = Set(out.flatMap(\.aliveRecords).map(\.id))
        #expect(records == [cluster[2], cluster[4]], "lacks 2, holds 4 alive where we suspect it")
        #expect(out.flatMap(\.suspicions).map(\.member) == [cluster[4]])
    }

    @Test(
        "a digest or summary under an id that is no member's draws no digest and no one's records, wherever it comes from"
    )
    func strangersGetNoAnswer() {
        let cluster = ManualCluster(count: 4)
        var node = cluster.instance(0)
        let stranger = NodeID(high: 0xbad, low: 0xbad)
        let full = Self.digest(cluster.instance(1), skipping: [cluster[2], cluster[3]])
        let summary = StateDigest(summarizing: [], lower: NodeID(high: 0, low: 0), upper: nil)
        for digest in [full, summary] {
            let out = Self.sent(
                node.onFrames(
                    [.stateDigest(digest)], from: stranger, address: ManualCluster.address(9),
                    now: cluster.now)
            ).flatMap { $0 }
            // At most the bounded question any stranger gets (who are you?), with our own record.
            #expect(!out.contains { if case .stateDigest = $0 { true } else { false } }, "\(out)")
            #expect(out.aliveRecords.allSatisfy { $0.id == cluster[0] }, "\(out)")
        }
        #expect(node.counters.digestsRefused == 2)
    }

    @Test("a digest that holds us suspect or dead makes us refute and send our new record")
    func accusationInDigestIsRefuted() {
        let cluster = ManualCluster(count: 3)
        var node = cluster.instance(0)
        let before = node.me.incarnation
        let digest = Self.digest(cluster.instance(1), overriding: [cluster[0]: (before, .dead)])
        let out = Self.sent(
            node.onFrames(
                [.stateDigest(digest)], from: cluster[1], address: ManualCluster.address(2),
                now: cluster.now))
        #expect(node.me.incarnation == before + 1)
        #expect(out.flatMap(\.aliveRecords).contains { $0.id == cluster[0] && $0.incarnation == before + 1 })
    }

    @Test(
        "a flood of digests from one member, of made-up ranges or many to a datagram, is answered two views' worth per half join retry interval"
    )
    func digestFloodIsAnsweredSparingly() {
        let cluster = ManualCluster(count: 3)
        var node = cluster.instance(0)
        func answered(_ frames: [Frame], at now: MeshInstant) -> Bool {
            !Self.sent(node.onFrames(frames, from: cluster[1], address: ManualCluster.address(2), now: now)).isEmpty
        }
        // Empty request digests of ever new ranges: each would draw every record in it.
        var count = 0
        for step in 0..<200 {
            let digest = StateDigest(
                isRequest: true, lower: NodeID(high: 0, low: UInt64(step)), upper: nil, entries: [])
            if answered([.stateDigest(digest)], at: cluster.now + .milliseconds(step)) { count += 1 }
        }
        #expect(
            count == 3,
            "\(count) answers: a 3-member view fits one digest, and two views' worth and one more are allowed")
        // Many digests in one datagram: one is taken.
        let later = cluster.now + MembershipSettings.lan.joinRetryInterval
        let many = (0..<29).map {
            Frame.stateDigest(
                StateDigest(
                    isRequest: true, lower: NodeID(high: 1, low: UInt64($0)),
                    upper: nil, entries: []))
        }
        let out = Self.sent(node.onFrames(many, from: cluster[1], address: ManualCluster.address(2), now: later))
        let answers = out.flatMap { $0.compactMap { if case let .stateDigest(d) = $0 { d } else { nil } } }
        #expect(answers.count == 1, "\(answers.count) digests answered from one datagram")
        // Another member is not held back by the first one's flood.
        #expect(
            !Self.sent(
                node.onFrames(
                    [.stateDigest(Self.digest(cluster.instance(2)))], from: cluster[2],
                    address: ManualCluster.address(3), now: cluster.now + .milliseconds(100))
            ).isEmpty)
    }

    @Test(
        "push-pull sends one summary of the view; a partner that agrees says only so, one that differs sends its digest as a request"
    )
    func pushPullSummary() throws {
        let cluster = MembershipCluster.converged(count: 120, seed: 5)
        cluster.simulator.run(for: .seconds(1))
        var node = cluster.process(cluster.nodes[0]).instance
        let due = cluster.simulator.now + .seconds(600)
        let pushPull = Self.sent(node.onTick(now: due)).compactMap { frames -> StateDigest? in
            if case let .stateDigest(digest) = frames.first { digest } else { nil }
        }
        #expect(pushPull.count == 1)
        let summary = try #require(pushPull.first)
        #expect(summary.summary?.count == 120 && summary.entries.isEmpty)
        #expect(summary.lower == NodeID(high: 0, low: 0) && summary.upper == nil)
        let address = PeerAddress(ipv4: [127, 0, 0, 1], port: 9)
        var partner = cluster.process(cluster.nodes[1]).instance
        #expect(
            Self.sent(partner.onFrames([.stateDigest(summary)], from: node.localID, address: address, now: due))
                == [[.stateDigest(.agreement)]])
        // The partner comes to suspect a member: its view no longer hashes the same.
        let suspect = cluster.id(of: cluster.nodes[7])
        _ = partner.onFrames(
            [.suspect(Accusation(member: suspect, incarnation: 0, accuser: cluster.id(of: cluster.nodes[2])))],
            from: cluster.id(of: cluster.nodes[2]), address: address, now: due)
        let out = Self.sent(
            partner.onFrames(
                [.stateDigest(summary)], from: node.localID, address: address,
                now: due + .seconds(10)))
        let requests = out.compactMap { frames -> StateDigest? in
            if case let .stateDigest(digest) = frames.first { digest } else { nil }
        }
        #expect(requests.count == 3 && requests.allSatisfy(\.isRequest), "120 members at 43 a datagram")
        #expect(out.flatMap(\.aliveRecords).isEmpty, "no record before the digests are compared")
        // We are behind on nothing the partner could use: no record, our digests of the ranges back.
        let back = requests.flatMap { request in
            Self.sent(
                node.onFrames([.stateDigest(request)], from: partner.localID, address: address, now: due + .seconds(10))
            )
        }
        #expect(back.flatMap(\.aliveRecords).isEmpty)
        let ours = back.compactMap { frames -> StateDigest? in
            if case let .stateDigest(digest) = frames.first { digest } else { nil }
        }
        #expect(ours.count == 3 && !ours.contains(where: \.isRequest))
        // The partner sees we hold 7 alive where it holds it suspect: its record and suspicion.
        let repair = ours.flatMap { digest in
            Self.sent(
                partner.onFrames([.stateDigest(digest)], from: node.localID, address: address, now: due + .seconds(10)))
        }
        #expect(repair.flatMap(\.aliveRecords).map(\.id) == [suspect])
        #expect(repair.flatMap(\.suspicions).map(\.member) == [suspect])
    }

    @Test("a flood of summaries that disagree draws at most two views' worth of digests per half join retry interval")
    func summaryFloodIsAnsweredSparingly() {
        let cluster = MembershipCluster.converged(count: 120, seed: 6)
        var node = cluster.process(cluster.nodes[0]).instance
        let flooder = cluster.id(of: cluster.nodes[1])
        let now = cluster.simulator.now + .seconds(1)
        var answered = 0
        for step in 0..<100 {
            let summary = StateDigest(summarizing: [], lower: NodeID(high: 0, low: UInt64(step)), upper: nil)
            answered +=
                Self.sent(
                    node.onFrames(
                        [.stateDigest(summary)], from: flooder,
                        address: PeerAddress(ipv4: [127, 0, 0, 1], port: 9),
                        now: now + .milliseconds(step))
                ).count
        }
        // 120 members at 43 a digest: 3 datagrams a view; a budget of 7 is passed by the third.
        #expect(answered >= 3 && answered <= 9, "\(answered) digests answered to 100 summaries")
    }

    @Test(
        "a view larger than a datagram goes as digests of ranges back to back from the first id to the end, and each range is answered alone"
    )
    func largeViewsSplitIntoRanges() throws {
        let cluster = MembershipCluster.converged(count: 120, seed: 5)
        cluster.simulator.run(for: .seconds(1))
        let node = cluster.process(cluster.nodes[0]).instance
        // Our view as a partner that differs sends it (a summary we do not agree with).
        var stranger = cluster.process(cluster.nodes[1]).instance
        let due = cluster.simulator.now + .seconds(600)
        let address = PeerAddress(ipv4: [127, 0, 0, 1], port: 9)
        let disagreeing = StateDigest(summarizing: [], lower: NodeID(high: 0, low: 0), upper: nil)
        let pushPull = Self.sent(
            stranger.onFrames(
                [.stateDigest(disagreeing)], from: node.localID, address: address,
                now: due)
        ).compactMap { frames -> StateDigest? in
            if case let .stateDigest(digest) = frames.first { digest } else { nil }
        }
        #expect(pushPull.count == 3, "120 members at 43 a datagram")
        #expect(pushPull.allSatisfy { $0.isRequest })
        #expect(pushPull.first?.lower == NodeID(high: 0, low: 0) && pushPull.last?.upper == nil)
        #expect(zip(pushPull, pushPull.dropFirst()).allSatisfy { $0.upper == $1.lower })
        #expect(pushPull.flatMap(\.entries).map(\.member) == stranger.view.map(\.id).sorted())
        // A partner as current, answering the first range only: its answer covers that range and
        // sends no record of a member outside it.
        var partner = cluster.process(cluster.nodes[2]).instance
        let first = try #require(pushPull.first)
        let out = Self.sent(partner.onFrames([.stateDigest(first)], from: stranger.localID, address: address, now: due))
        let answers = out.flatMap { $0.compactMap { if case let .stateDigest(d) = $0 { d } else { nil } } }
        #expect(answers.first?.lower == first.lower && answers.last?.upper == first.upper)
        #expect(zip(answers, answers.dropFirst()).allSatisfy { $0.upper == $1.lower })
        #expect(answers.flatMap(\.entries).count == first.entries.count && !answers.contains { $0.isRequest })
        #expect(out.flatMap(\.aliveRecords).isEmpty)
    }

    @Test("a digest on the wire must be sorted, in range, of known statuses; anything else is refused")
    func malformedDigestsAreRefused() {
        let a = NodeID(high: 1, low: 0), b = NodeID(high: 2, low: 0)
        func bytes(_ digest: StateDigest) -> ByteBuffer {
            var buffer = ByteBuffer()
            digest.encode(into: &buffer)
            return buffer
        }
        let good = StateDigest(
            isRequest: true, lower: a, upper: nil,
            entries: [
                .init(member: a, incarnation: 1, status: .alive), .init(member: b, incarnation: 2, status: .dead),
            ])
        var buffer = bytes(good)
        #expect((try? StateDigest(decoding: &buffer)) == good)
        let unsorted = StateDigest(isRequest: false, lower: a, upper: nil, entries: good.entries.reversed())
        buffer = bytes(unsorted)
        #expect(throws: WireError.self) { try StateDigest(decoding: &buffer) }
        let outOfRange = StateDigest(isRequest: false, lower: b, upper: NodeID(high: 3, low: 0), entries: good.entries)
        buffer = bytes(outOfRange)
        #expect(throws: WireError.self) { try StateDigest(decoding: &buffer) }
        var badStatus = bytes(good)
        badStatus.setInteger(UInt8(9), at: badStatus.writerIndex - 1)
        #expect(throws: WireError.self) { try StateDigest(decoding: &badStatus) }
        var badFlags = bytes(good)
        badFlags.setInteger(UInt8(0x80), at: badFlags.readerIndex)
        #expect(throws: WireError.self) { try StateDigest(decoding: &badFlags) }
        // A summary is never also a request (which would ask for the entries it leaves out).
        var summaryRequest = bytes(StateDigest(summarizing: good.entries, lower: a, upper: nil))
        summaryRequest.setInteger(UInt8(4 | 1), at: summaryRequest.readerIndex)
        #expect(throws: WireError.self) { try StateDigest(decoding: &summaryRequest) }
        var summary = bytes(StateDigest(summarizing: good.entries, lower: a, upper: nil))
        #expect((try? StateDigest(decoding: &summary))?.summary == StateDigest.Summary(of: good.entries))
        var shortSummary = bytes(StateDigest(summarizing: good.entries, lower: a, upper: nil))
        shortSummary.moveWriterIndex(to: shortSummary.writerIndex - 1)
        #expect(throws: WireError.self) { try StateDigest(decoding: &shortSummary) }
        var lying = bytes(good)
        lying.setInteger(UInt16(40_000), at: lying.readerIndex + 1 + 32)
        #expect(throws: WireError.self) { try StateDigest(decoding: &lying) }
    }

    @Test(
        "idle anti-entropy costs a fraction of full-state push-pull: 40 members, bytes per node over two push-pull periods"
    )
    func idleAntiEntropyIsCheap() {
        func bytesPerNode(pushPull: Duration) -> Double {
            var settings = MembershipSettings.lan
            settings.pushPullInterval = pushPull
            let cluster = MembershipCluster.converged(count: 40, seed: 9, settings: settings)
            cluster.simulator.run(for: .seconds(5))
            cluster.simulator.resetStatistics()
            cluster.simulator.run(for: .seconds(150))
            return Double(cluster.simulator.statistics.bytesSent) / 40 / 150
        }
        let withPushPull = bytesPerNode(pushPull: .seconds(30))
        let without = bytesPerNode(pushPull: .seconds(100_000))
        // Full records (about 170 bytes each, 40 of them both ways per exchange) cost over 200 B/s
        // per node here; digests of 25 bytes a member, a seventh of that (about 45 B/s); one
        // summary per exchange, when the views agree, a few bytes a second.
        #expect(
            withPushPull - without < 10, "anti-entropy: \(withPushPull - without) B/s per node (\(without) without)")
    }
}
