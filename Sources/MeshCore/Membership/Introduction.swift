import MeshCrypto
import NIOCore

/// A member's word that it let another in, and the newcomer's word that it came in through that
/// door (PROTOCOL.md §3, "Introductions"). Both sign with their identity keys: nobody is charged
/// with a newcomer it did not sign for, and no member can name itself the door of another, that
/// did not countersign. `epoch` is the session id of the key epoch the door was in when it signed:
/// it names the session, and is not checked (a member that joined later knows no epoch before its
/// own).
///
/// The door signs first and hands it to the newcomer alone (`memberSignature` empty); the
/// newcomer countersigns, keeps it, and tells every member.
package struct Introduction: WireBody, Hashable {
    package static let doorDomain = Array("groupmesh introduction v1".utf8)
    package static let memberDomain = Array("groupmesh introduction accepted v1".utf8)

    package var epoch: SessionID
    package var member: NodeID
    /// The door's signing key: its node id is the key's hash.
    package var doorKey: PublicSigningKey
    package var doorSignature: [UInt8]
    /// Empty until the newcomer countersigns.
    package var memberSignature: [UInt8]

    package var door: NodeID { doorKey.nodeID }
    package var isCountersigned: Bool { !memberSignature.isEmpty }

    package init(
        epoch: SessionID, member: NodeID, doorKey: PublicSigningKey, doorSignature: [UInt8] = [],
        memberSignature: [UInt8] = []
    ) {
        self.epoch = epoch
        self.member = member
        self.doorKey = doorKey
        self.doorSignature = doorSignature
        self.memberSignature = memberSignature
    }

    /// What both sign, each after its own domain.
    private func statement(_ domain: [UInt8]) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(domain)
        buffer.writeInteger(epoch.value)
        member.encode(into: &buffer)
        buffer.writeBytes(doorKey.bytes)
        return Array(buffer.readableBytesView)
    }

    /// Made by the door, whose authority holds `doorKey`.
    package static func signed(
        by door: some RecordAuthority, admitting member: NodeID, in epoch: SessionID
    ) -> Introduction {
        var introduction = Introduction(epoch: epoch, member: member, doorKey: door.signingKey)
        introduction.doorSignature = door.sign(introduction.statement(doorDomain))
        return introduction
    }

    /// Countersigned by the newcomer, whose authority holds the key of `member`.
    package func countersigned(by newcomer: some RecordAuthority) -> Introduction {
        var copy = self
        copy.memberSignature = newcomer.sign(statement(Self.memberDomain))
        return copy
    }

    /// Whether the door signed it, and it names someone other than the door.
    package func isSignedByDoor(_ authority: some RecordAuthority) -> Bool {
        door != member
            && authority.isValid(signature: doorSignature, message: statement(Self.doorDomain), signingKey: doorKey)
    }

    /// Whether both signed: the door, and the member whose signing key is `memberKey`.
    package func isValid(memberKey: PublicSigningKey, _ authority: some RecordAuthority) -> Bool {
        memberKey.nodeID == member && isCountersigned && isSignedByDoor(authority)
            && authority.isValid(
                signature: memberSignature, message: statement(Self.memberDomain), signingKey: memberKey)
    }

    /// Flag bits; the others must be zero.
    static let countersignedFlag: UInt8 = 1

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(epoch.value)
        member.encode(into: &buffer)
        buffer.writeBytes(doorKey.bytes)
        buffer.writeBytes(doorSignature)
        buffer.writeInteger(isCountersigned ? Self.countersignedFlag : 0)
        buffer.writeBytes(memberSignature)
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        epoch = SessionID(value: try buffer.readWire(UInt64.self, "introduction epoch"))
        member = try NodeID(decoding: &buffer)
        let keyBytes = try buffer.readWireBytes(PublicSigningKey.byteCount, "introduction door key")
        doorKey = try! PublicSigningKey(bytes: keyBytes)  // safe: exactly 32 bytes were read
        doorSignature = try buffer.readWireBytes(NodeIdentity.signatureByteCount, "introduction door signature")
        let flags = try buffer.readWire(UInt8.self, "introduction flags")
        guard flags & ~Self.countersignedFlag == 0 else { throw .invalidField(what: "introduction flags") }
        memberSignature =
            flags & Self.countersignedFlag != 0
            ? try buffer.readWireBytes(NodeIdentity.signatureByteCount, "introduction member signature") : []
    }
}

/// `introductionRequest` (0x1B): "introduce me", from a member that holds no introduction, to the
/// member it came in through or, when that one refused or went, to the next. Pairwise only, so
/// the request is the member's own.
package struct IntroductionRequest: WireBody {
    package init() {}
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {}
    package func encode(into buffer: inout ByteBuffer) {}
}

/// `introductionRefusal` (0x1C): "not I", from a member asked to introduce another; the asker
/// asks the next member. Pairwise only, so it is the refuser's own.
package struct IntroductionRefusal: WireBody {
    package enum Reason: Equatable, Sendable {
        /// The refuser introduced as many live members as one may.
        case full
        /// The asker let the refuser in, directly or through the refuser's doors.
        case loop
        /// Both asked each other at once: the smaller id answers, the larger refuses.
        case crossing
        /// One a later protocol added: a refusal all the same. Only for codes this protocol does
        /// not name (`.other(1)` is sent as 1 and read back as `.full`).
        case other(UInt8)

        var code: UInt8 {
            switch self {
            case .full: 1
            case .loop: 2
            case .crossing: 3
            case let .other(code): code
            }
        }

        init(code: UInt8) {
            switch code {
            case 1: self = .full
            case 2: self = .loop
            case 3: self = .crossing
            default: self = .other(code)
            }
        }
    }

    package var reason: Reason

    package init(reason: Reason) { self.reason = reason }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        reason = Reason(code: try buffer.readWire(UInt8.self, "introduction refusal reason"))
    }

    package func encode(into buffer: inout ByteBuffer) { buffer.writeInteger(reason.code) }
}
