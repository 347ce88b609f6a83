@testable import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// The gossip queue's choice of what rides on a datagram to a given member.
@Suite("gossip queue")
struct GossipQueueTests {
    @Test("a member's own alive record is passed over on a datagram to it, uncounted; an accusation of it is not")
    func ownRecordIsNotSpentOnItsSubject() {
        let records = MemberTableTests.records(3)
        let (x, y, z) = (records[0], records[1], records[2])
        var queue = GossipQueue()
        queue.enqueue(.alive(x), about: x.id)
        let limit = 2

        #expect(queue.take(budget: 1_200, limit: limit, for: x.id).isEmpty, "nothing for x but its own record")
        #expect(queue.take(budget: 1_200, limit: limit, for: x.id).isEmpty)
        #expect(queue.count == 1, "passing over is not a transmission")
        #expect(queue.take(budget: 1_200, limit: limit, for: y.id) == [.alive(x)])
        #expect(queue.take(budget: 1_200, limit: limit, for: z.id) == [.alive(x)])
        #expect(queue.isEmpty, "sent `limit` times, to members other than x")

        // Only x to tell: nothing can go, so there is no news to hasten rounds for.
        queue.enqueue(.alive(x), about: x.id)
        #expect(!queue.hasUpdates(sentFewerThan: 2, toAnyOf: [x.id]))
        #expect(queue.hasUpdates(sentFewerThan: 2, toAnyOf: [x.id, y.id]))
        #expect(!queue.hasUpdates(sentFewerThan: 2, toAnyOf: []))

        // An accusation makes its subject refute: it goes to x like to anyone.
        let accusation = Accusation(member: x.id, incarnation: x.incarnation, accuser: y.id)
        queue.enqueue(.suspect(accusation), about: x.id)
        #expect(queue.hasUpdates(sentFewerThan: 2, toAnyOf: [x.id]))
        #expect(queue.take(budget: 1_200, limit: limit, for: x.id) == [.suspect(accusation)])
        // Without a recipient (a caller that does not know it) nothing is passed over.
        queue.enqueue(.alive(y), about: y.id)
        #expect(queue.take(budget: 1_200, limit: limit).contains(.alive(y)))
    }
}
