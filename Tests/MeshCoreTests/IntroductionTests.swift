import Foundation
import MeshCore
import MeshCrypto
import NIOCore
import Testing

/// Introductions as values (PROTOCOL.md §3, "Introductions"): both signatures hold or the
/// introduction is refused; the wire form round-trips; the book keeps one per member, the same
/// one everywhere, and asks its door a bounded number of times.
@Suite("introductions")
struct IntroductionTests {
    static func authority(_ index: UInt8) throws -> Ed25519Authority {
        Ed25519Authority(identity: try NodeIdentity(seed: [index] + [UInt8](repeating: 3, count: 31)))
    }

    static let session = SessionID(value: 0x0102_0304_0506_0708)

    static func roundTrip(_ introduction: Introduction) throws -> Introduction {
        var buffer = ByteBuffer()
        FrameCodec.encode(.introduction(introduction), into: &buffer)
        let frames = try FrameCodec.decodeAll(&buffer).get()
        guard case let .introduction(decoded) = frames.first, frames.count == 1 else {
            Issue.record("decoded \(frames)")
            return introduction
        }
        return decoded
    }

    /// Whether `bytes` decode as one introduction, exactly.
    static func decodes(_ bytes: [UInt8]) -> Bool {
        var buffer = ByteBuffer(bytes: bytes)
        return (try? Introduction(decoding: &buffer)) != nil && buffer.readableBytes == 0
    }

    @Test("signed by the door and countersigned by the member: valid, and the same after the wire")
    func bothSignaturesHold() throws {
        let (door, member) = (try Self.authority(1), try Self.authority(2))
        let offered = Introduction.signed(by: door, admitting: member.signingKey.nodeID, in: Self.session)
        #expect(offered.isSignedByDoor(door))
        #expect(!offered.isCountersigned)
        #expect(!offered.isValid(memberKey: member.signingKey, door), "valid before the member signed")
        #expect(try Self.roundTrip(offered) == offered)

        let accepted = offered.countersigned(by: member)
        #expect(accepted.isValid(memberKey: member.signingKey, door))
        #expect(accepted.door == door.signingKey.nodeID)
        let decoded = try Self.roundTrip(accepted)
        #expect(decoded == accepted)
        #expect(decoded.isValid(memberKey: member.signingKey, door))
    }

    @Test("an introduction nobody signed, or one moved to another member or door, is refused")
    func forgeriesAreRefused() throws {
        let (door, member, other) = (try Self.authority(1), try Self.authority(2), try Self.authority(3))
        let accepted = Introduction.signed(by: door, admitting: member.signingKey.nodeID, in: Self.session)
            .countersigned(by: member)
        // Another member claims the door let it in, with the door's signature of someone else.
        var moved = accepted
        moved.member = other.signingKey.nodeID
        #expect(!moved.countersigned(by: other).isValid(memberKey: other.signingKey, door))
        // A member claims a door that never signed (the inventor's own signature under its key).
        var claimed = accepted
        claimed.doorKey = other.signingKey
        #expect(!claimed.isValid(memberKey: member.signingKey, door))
        // The member's key must be the member's.
        #expect(!accepted.isValid(memberKey: other.signingKey, door))
        // Another session.
        var elsewhere = accepted
        elsewhere.epoch = SessionID(value: 9)
        #expect(!elsewhere.isValid(memberKey: member.signingKey, door))
        // A door cannot introduce itself.
        let itself = Introduction.signed(by: door, admitting: door.signingKey.nodeID, in: Self.session)
        #expect(!itself.isSignedByDoor(door))
    }

    @Test("flags other than countersigned, a short body or trailing bytes do not decode")
    func malformedBodies() throws {
        let (door, member) = (try Self.authority(1), try Self.authority(2))
        let accepted = Introduction.signed(by: door, admitting: member.signingKey.nodeID, in: Self.session)
            .countersigned(by: member)
        var body = ByteBuffer()
        accepted.encode(into: &body)
        let bytes = Array(body.readableBytesView)
        // The flags byte follows session (8), member (16), door key (32) and its signature (64).
        var flagged = bytes
        flagged[120] |= 0x80
        #expect(Self.decodes(bytes))
        #expect(!Self.decodes(flagged))
        for cut in [0, 8, 56, 119, 121, bytes.count - 1] {
            #expect(!Self.decodes(Array(bytes.prefix(cut))), "cut at \(cut)")
        }
        var frame = ByteBuffer()
        FrameCodec.encode(.introduction(accepted), into: &frame)
        frame.writeBytes([0])
        frame.setInteger(UInt16(bytes.count + 1), at: 1)
        guard case .failure = FrameCodec.decodeAll(&frame) else {
            Issue.record("a frame with a trailing byte decoded")
            return
        }
    }

    @Test("the book keeps one introduction per member, the one its member told last")
    func bookAgreesOnOneDoor() throws {
        let member = try Self.authority(2)
        let doors = try [Self.authority(1), Self.authority(4)].sorted {
            $0.signingKey.nodeID < $1.signingKey.nodeID
        }
        let introductions = doors.map {
            Introduction.signed(by: $0, admitting: member.signingKey.nodeID, in: Self.session)
                .countersigned(by: member)
        }
        var first = IntroductionBook()
        var second = IntroductionBook()
        let taken = [
            first.take(introductions[0]), first.take(introductions[0]),
            second.take(introductions[1]), second.take(introductions[0]),
        ]
        #expect(taken == [true, false, true, true], "the same one counted as new, or a new one not taken")
        #expect(first[member.signingKey.nodeID] == second[member.signingKey.nodeID])
        #expect(first[member.signingKey.nodeID]?.door == doors[0].signingKey.nodeID)
        first.forget(member.signingKey.nodeID)
        #expect(first[member.signingKey.nodeID] == nil)
    }

    @Test("the file keeps the introductions of this node and of remembered members, and reads them back")
    func rememberedIntroductions() throws {
        let (door, member, stranger) = (try Self.authority(1), try Self.authority(2), try Self.authority(3))
        let ours = Introduction.signed(by: door, admitting: member.signingKey.nodeID, in: Self.session)
            .countersigned(by: member)
        let theirs = Introduction.signed(by: door, admitting: stranger.signingKey.nodeID, in: Self.session)
            .countersigned(by: stranger)
        var remembered = RememberedMembers()
        remembered.keepIntroductions([ours, theirs], localID: member.signingKey.nodeID)
        #expect(remembered.introductions == [ours], "a member not remembered kept its introduction")
        remembered.members = [.init(id: stranger.signingKey.nodeID.hex, name: "s", addresses: [])]
        remembered.keepIntroductions([ours, theirs], localID: member.signingKey.nodeID)
        let decoded = try JSONDecoder().decode(RememberedMembers.self, from: JSONEncoder().encode(remembered))
        #expect(Set(decoded.introductions) == [ours, theirs])
        // A damaged record is passed over, not fatal.
        var damaged = decoded
        damaged.introductionsHex.append("zz")
        damaged.introductionsHex.append(String(damaged.introductionsHex[0].dropLast(2)))
        #expect(Set(damaged.introductions) == [ours, theirs])
        // A file of an earlier release has no such key.
        let old = try JSONDecoder().decode(RememberedMembers.self, from: Data(#"{"incarnation":3,"members":[]}"#.utf8))
        #expect(old.introductions.isEmpty)
    }
}
