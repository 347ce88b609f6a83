@testable import MeshCore
import MeshCrypto
import Testing

/// A push-pull's datagrams are never resent on their own: the member that started it sends its
/// summary again until the partner answered and what it showed us lacking has come.
@Suite("anti-entropy exchanges")
struct AntiEntropyExchangeTests {
    /// Three members that know each other, and a fourth (index 3) that knows only the first:
    /// it learns of the other two only by push-pull (nothing about them is news to gossip).
    static func clusterWithLateMember() throws -> ManualCluster {
        var cluster = ManualCluster(count: 3)
        var (identity, late) = try ManualCluster.standalone(70, now: cluster.now)
        late.assume([cluster.instance(0).me], now: cluster.now)
        cluster.nodes[identity.nodeID] = late
        cluster.identities[identity.nodeID] = identity
        cluster.addresses[identity.nodeID] = ManualCluster.address(70)
        cluster.order.append(identity.nodeID)
        cluster.nodes[cluster[0]]!.assume([late.me], now: cluster.now)
        return cluster
    }

    static func summaries(in log: [ManualCluster.Datagram], from sender: NodeID) -> Int {
        log.filter { datagram in
            datagram.from == sender
                && datagram.frames.contains { if case let .stateDigest(d) = $0 { d.summary != nil } else { false } }
        }.count
    }

    /// Advances until the late member has sent its first summary (its first periodic push-pull).
    static func advanceToFirstSummary(
        _ cluster: inout ManualCluster, drop: (ManualCluster.Datagram) -> Bool
    ) {
        let late = cluster[3]
        for _ in 0..<600 where summaries(in: cluster.log, from: late) == 0 {
            cluster.advance(by: .milliseconds(100), drop: drop)
        }
    }

    @Test("a push-pull whose answers are lost is tried again until the records it showed missing come")
    func lostAnswersAreTriedAgain() throws {
        var cluster = try Self.clusterWithLateMember()
        let late = cluster[3]
        let lateAddress = ManualCluster.address(70)
        let others = Set([cluster[1], cluster[2]])
        var digestsDropped = 0
        var recordsDropped = 0
        // The partner's first digest to the late member is lost, then the first datagram with
        // the records it lacks.
        let drop: (ManualCluster.Datagram) -> Bool = { datagram in
            guard datagram.to == lateAddress else { return false }
            if digestsDropped < 1,
                datagram.frames.contains(where: { if case .stateDigest = $0 { true } else { false } })
            {
                digestsDropped += 1
                return true
            }
            if recordsDropped < 1, datagram.frames.aliveRecords.contains(where: { others.contains($0.id) }) {
                recordsDropped += 1
                return true
            }
            return false
        }
        Self.advanceToFirstSummary(&cluster, drop: drop)
        #expect(Self.summaries(in: cluster.log, from: late) == 1)
        // Well before the next periodic push-pull (three quarters of the interval at the least).
        cluster.advance(by: .seconds(3), drop: drop)
        #expect(digestsDropped == 1 && recordsDropped == 1, "the losses happened")
        for other in others {
            #expect(cluster.nodes[late]?.member(other)?.status == .alive, "the late member learned of \(other)")
        }
        #expect(Self.summaries(in: cluster.log, from: late) == 3, "one summary and two more")
    }

    @Test("a partner that never answers gets the summary three times in all, and views that agree end at once")
    func resendsAreBoundedAndAgreementEndsThem() throws {
        var cluster = try Self.clusterWithLateMember()
        let late = cluster[3]
        let partnerAddress = ManualCluster.address(1)
        // No summary of the late member's reaches its partner.
        let silent: (ManualCluster.Datagram) -> Bool = { datagram in
            datagram.from == late && datagram.to == partnerAddress
                && datagram.frames.contains { if case .stateDigest = $0 { true } else { false } }
        }
        Self.advanceToFirstSummary(&cluster, drop: silent)
        cluster.advance(by: .seconds(5), drop: silent)
        #expect(Self.summaries(in: cluster.log, from: late) == 3)

        // The others meet the late member; once views agree, a push-pull costs a summary and
        // the agreement, and nothing goes again.
        var agreeing = ManualCluster(count: 3)
        agreeing.advance(by: .seconds(1))
        let first = agreeing[0]
        for _ in 0..<600 where Self.summaries(in: agreeing.log, from: first) == 0 {
            agreeing.advance(by: .milliseconds(100))
        }
        agreeing.advance(by: .seconds(3))
        #expect(Self.summaries(in: agreeing.log, from: first) == 1)
        let agreements = agreeing.log.filter { datagram in
            datagram.to == ManualCluster.address(1)
                && datagram.frames.contains { if case let .stateDigest(d) = $0 { d.isAgreement } else { false } }
        }
        #expect(agreements.count == 1, "the partner said the views agree")
    }

    @Test("a partner's answer counts once its digests cover every id: one of several lost is no answer")
    func answerCoversEveryRange() {
        var exchange = AntiEntropyExchange(partner: NodeID(high: 9, low: 9), checkAt: .zero, resendsLeft: 2)
        let (a, b) = (NodeID(high: 1, low: 0), NodeID(high: 2, low: 0))
        #expect(!exchange.answered)
        exchange.rangesAnswered = [(NodeID(high: 0, low: 0), a), (b, nil)]
        #expect(!exchange.answered, "the range from a to b was lost")
        exchange.rangesAnswered.append((a, b))
        #expect(exchange.answered)
        exchange.rangesAnswered = [(NodeID(high: 0, low: 0), nil)]
        #expect(exchange.answered)
    }
}
