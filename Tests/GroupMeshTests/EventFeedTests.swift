import Foundation
@testable import GroupMesh
@testable import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// What the node reports, turned into numbered events (`groupmesh events`, event handlers).
@Suite("Event feed")
struct EventFeedTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func member(_ index: UInt8, _ status: MemberStatus, incarnation: UInt64 = 1) -> Member {
        let identity = try! NodeIdentity(seed: [UInt8](repeating: index, count: 32))  // safe: 32 bytes
        let record = MemberRecord(
            signingKey: identity.publicKey, name: "m\(index)",
            addresses: [PeerAddress(ipv4: [127, 0, 0, 1], port: 4000 + UInt16(index))],
            incarnation: incarnation, bootID: 1, ephemeralKey: [UInt8](repeating: 0, count: 32))
        return Member(
            record: record, status: status, incarnation: incarnation, lastChange: .zero, rtt: nil, suspicion: nil)
    }

    static func entry(_ id: UInt64, content: UInt8 = 1) -> AttachmentEntry {
        AttachmentEntry(
            id: AttachmentID(high: id, low: id), content: SHA256Digest.hashing([content]), size: 10,
            chunkCount: 1, metadata: [], addedBy: NodeID(high: 1, low: 1), clock: 1)
    }

    @Test("member changes: joined, suspect, a refuted suspicion says nothing, dead, rejoined, left; removed once")
    func members() {
        var feed = EventFeed()
        feed.start(session: SessionID(value: 1), removed: [])
        var kinds: [MeshEvent.Kind] = []
        for (status, incarnation) in [
            (MemberStatus.alive, 1), (.suspect, 1), (.alive, 2), (.suspect, 2), (.dead, 2),
            (.alive, 3), (.left, 3),
        ] as [(MemberStatus, UInt64)] {
            kinds += feed.memberChanged(Self.member(1, status, incarnation: incarnation), now: Self.now).map(\.type)
        }
        #expect(kinds == [.memberJoined, .memberSuspect, .memberSuspect, .memberDead, .memberRejoined, .memberLeft])
        let removal = feed.epochChanged(
            SessionID(value: 2), removed: [Self.member(2, .alive).id],
            members: [Self.member(2, .alive)], time: Self.now)
        #expect(removal.map(\.type) == [.keyEpochChanged, .memberRemoved])
        #expect(removal.last?.member?.name == "m2")
        // Its death that follows is the removal's, not another event.
        #expect(feed.memberChanged(Self.member(2, .dead), now: Self.now).isEmpty)
        #expect(
            feed.epochChanged(SessionID(value: 2), removed: [Self.member(2, .alive).id], members: [], time: Self.now)
                .isEmpty)
    }

    @Test("attachments: added, complete here, removed; each once")
    func attachments() {
        var feed = EventFeed()
        var kinds: [MeshEvent.Kind] = []
        kinds += feed.attachmentsChanged([(Self.entry(1), false, .available)], now: Self.now).map(\.type)
        kinds += feed.attachmentsChanged([(Self.entry(1), false, .available)], now: Self.now).map(\.type)
        kinds += feed.attachmentsChanged([(Self.entry(1), true, .available)], now: Self.now).map(\.type)
        kinds += feed.attachmentsChanged(
            [(Self.entry(1), true, .available), (Self.entry(2), false, .unavailable)],
            now: Self.now
        ).map(\.type)
        let removed = feed.attachmentsChanged([(Self.entry(2), false, .unavailable)], now: Self.now)
        kinds += removed.map(\.type)
        #expect(kinds == [.attachmentAdded, .attachmentComplete, .attachmentAdded, .attachmentRemoved])
        #expect(
            removed.first?.attachment?.id == AttachmentID(high: 1, low: 1).hex && removed.first?.attachment?.size == 10)
    }

    @Test("an add is not unavailable before its holders are heard of; a loss is said once, and availability after it")
    func availability() {
        var feed = EventFeed()
        func kinds(_ state: AttachmentAvailability.State) -> [MeshEvent.Kind] {
            feed.attachmentsChanged([(Self.entry(3), false, state)], now: Self.now).map(\.type)
        }
        #expect(kinds(.unavailable) == [.attachmentAdded], "an ordinary upload: heard of before its uploader's holding")
        #expect(kinds(.available) == [])
        #expect(kinds(.partial) == [], "its last whole holder died; parts are still held")
        #expect(kinds(.unavailable) == [.attachmentUnavailable])
        #expect(kinds(.unavailable) == [])
        #expect(kinds(.partial) == [])
        #expect(kinds(.available) == [.attachmentAvailable], "a holder came back")
        #expect(kinds(.available) == [])
        #expect(kinds(.unavailable) == [.attachmentUnavailable], "lost again, said again")
    }

    @Test("sequence numbers increase by one; after N gives what follows, and says what fell out of the ring")
    func ringAndResume() {
        var feed = EventFeed()
        for index in 0..<(EventFeed.capacity + 10) {
            _ = feed.attachmentsChanged([(Self.entry(UInt64(index)), false, .available)], now: Self.now)
        }
        #expect(feed.ring.count == EventFeed.capacity)
        #expect(zip(feed.ring, feed.ring.dropFirst()).allSatisfy { $0.seq + 1 == $1.seq })
        let recent = feed.events(after: feed.nextSeq - 3)
        #expect(recent.events.map(\.seq) == [feed.nextSeq - 2, feed.nextSeq - 1] && recent.missed == 0)
        let all = feed.events(after: 0)
        #expect(all.events.count == EventFeed.capacity && all.missed == feed.nextSeq - 1 - UInt64(EventFeed.capacity))
        #expect(all.missed > 0)
        #expect(feed.events(after: feed.nextSeq - 1).events.isEmpty)
    }

    @Test(
        "a handler spec: types before '=' when all are event types, a mistyped type refused, else the whole text is the command"
    )
    func handlerSpecs() throws {
        let typed = try EventHandlerSpec(parsing: "member-joined,member-dead=notify.sh --loud")
        #expect(typed.types == [.memberJoined, .memberDead] && typed.command == "notify.sh --loud")
        let bare = try EventHandlerSpec(parsing: "FOO=1 ./script.sh")
        #expect(bare.types == nil && bare.command == "FOO=1 ./script.sh")
        #expect(throws: GroupMeshError.self) { try EventHandlerSpec(parsing: "member-joined=") }
        #expect(throws: GroupMeshError.self) { try EventHandlerSpec(parsing: "  ") }
        // A mistyped type is refused, naming it, rather than run as a command for every event.
        for typo in ["member-jion=notify.sh", "member-joined,member-ded=notify.sh", "Member-Joined=notify.sh"] {
            #expect {
                try EventHandlerSpec(parsing: typo)
            } throws: {
                "\($0)".lowercased().contains("no event type 'member-")
                    && "\($0)".contains("the types are member-joined")
            }
        }
        let lowercase = try EventHandlerSpec(parsing: "x=1 ./script.sh")
        #expect(lowercase.types == nil && lowercase.command == "x=1 ./script.sh")
    }
}
