import MeshCrypto
import NIOCore

/// One unit of protocol inside a sealed datagram: `type(1) | length(2, big-endian) | body`.
/// A datagram carries one or more frames; each protocol (membership, delivery, journal,
/// transfer) adds its frame types here and its body codec beside its state machine.
package enum Frame: Equatable, Sendable {
    case ping(Ping)
    case pong(Pong)
    // Membership (SWIM with Lifeguard).
    case probe(Probe)
    case probeAck(ProbeAck)
    case probeNack(ProbeNack)
    case probeRequest(ProbeRequest)
    case alive(MemberRecord)
    case suspect(Accusation)
    case dead(Accusation)
    case left(Departure)
    case syncRequest(SyncRequest)
    case stateDigest(StateDigest)
    case introduction(Introduction)
    case introductionRequest(IntroductionRequest)
    case introductionRefusal(IntroductionRefusal)
    // Messenger (reliable and unreliable delivery).
    case data(DataChunk)
    case ack(DeliveryAck)
    case forwardTSN(ForwardTSN)
    case fragment(UnreliableFragment)
    // Transfer (chunks in pieces).
    case chunkWant(ChunkWant)
    case chunkPiece(ChunkPiece)
    case chunkAbsent(ChunkAbsent)
    case chunkPace(ChunkPace)
    case chunkCancel(ChunkCancel)
    // Key epochs (member removal).
    case epochHandover(EpochHandover)
    /// To a removed member, in the epoch it is still in: the signed rotation that removed it (no
    /// secret), so that it stops instead of staying up alone.
    case removalNotice(KeyRotation)
    /// A session's signed end, to a member still in it that did not hear it: alone in a hello
    /// datagram of the epoch it ends.
    case sessionEnd(SessionEnd)
    // Paths (how large a datagram a member's path to us carries).
    case pathProbeRequest(PathProbeRequest)
    case pathProbe(PathProbe)
    // Addresses (where a member saw our datagram come from).
    case observedAddress(ObservedAddress)
    // Hole punching (a mutual member introduces two members that do not hear each other).
    case punchRequest(PunchRequest)
    case punchIntroduction(PunchIntroduction)
    case punch(Punch)
    // Relays (a member carries sealed datagrams between two members that cannot meet).
    case relayForward(RelayedDatagram)
    case relayDelivery(RelayedDatagram)
    case relayRefusal(RelayRefusal)
    // Birthday punching (a symmetric NAT against an endpoint-independent one).
    case birthdayRound(BirthdayRound)
    // Protocol versions (alone in a pairwise datagram; protocol 2 on).
    case protocolVersion(VersionAnnouncement)

    package var type: FrameType {
        switch self {
        case .ping: return .ping
        case .pong: return .pong
        case .probe: return .probe
        case .probeAck: return .probeAck
        case .probeNack: return .probeNack
        case .probeRequest: return .probeRequest
        case .alive: return .alive
        case .suspect: return .suspect
        case .dead: return .dead
        case .left: return .left
        case .syncRequest: return .syncRequest
        case .stateDigest: return .stateDigest
        case .introduction: return .introduction
        case .introductionRequest: return .introductionRequest
        case .introductionRefusal: return .introductionRefusal
        case let .data(chunk): return chunk.stream == .journal ? .journalData : .data
        case .ack: return .ack
        case .forwardTSN: return .forwardTSN
        case .fragment: return .fragment
        case .chunkWant: return .chunkWant
        case .chunkPiece: return .chunkPiece
        case .chunkAbsent: return .chunkAbsent
        case .chunkPace: return .chunkPace
        case .chunkCancel: return .chunkCancel
        case .epochHandover: return .epochHandover
        case .removalNotice: return .removalNotice
        case .sessionEnd: return .sessionEnd
        case .pathProbeRequest: return .pathProbeRequest
        case .pathProbe: return .pathProbe
        case .observedAddress: return .observedAddress
        case .punchRequest: return .punchRequest
        case .punchIntroduction: return .punchIntroduction
        case .punch: return .punch
        case .relayForward: return .relayForward
        case .relayDelivery: return .relayDelivery
        case .relayRefusal: return .relayRefusal
        case .birthdayRound: return .birthdayRound
        case .protocolVersion: return .protocolVersion
        }
    }

    fileprivate var body: any WireBody {
        switch self {
        case let .ping(body): return body
        case let .pong(body): return body
        case let .probe(body): return body
        case let .probeAck(body): return body
        case let .probeNack(body): return body
        case let .probeRequest(body): return body
        case let .alive(body): return body
        case let .suspect(body): return body
        case let .dead(body): return body
        case let .left(body): return body
        case let .syncRequest(body): return body
        case let .stateDigest(body): return body
        case let .introduction(body): return body
        case let .introductionRequest(body): return body
        case let .introductionRefusal(body): return body
        case let .data(body): return body
        case let .ack(body): return body
        case let .forwardTSN(body): return body
        case let .fragment(body): return body
        case let .chunkWant(body): return body
        case let .chunkPiece(body): return body
        case let .chunkAbsent(body): return body
        case let .chunkPace(body): return body
        case let .chunkCancel(body): return body
        case let .epochHandover(body): return body
        case let .removalNotice(body): return body
        case let .sessionEnd(body): return body
        case let .pathProbeRequest(body): return body
        case let .pathProbe(body): return body
        case let .observedAddress(body): return body
        case let .punchRequest(body): return body
        case let .punchIntroduction(body): return body
        case let .punch(body): return body
        case let .relayForward(body): return body
        case let .relayDelivery(body): return body
        case let .relayRefusal(body): return body
        case let .birthdayRound(body): return body
        case let .protocolVersion(body): return body
        }
    }

    fileprivate func encodeBody(into buffer: inout ByteBuffer) {
        body.encode(into: &buffer)
    }

    fileprivate static func decodeBody(type: FrameType, _ body: inout ByteBuffer) throws(WireError) -> Frame {
        switch type {
        case .ping: return .ping(try Ping(decoding: &body))
        case .pong: return .pong(try Pong(decoding: &body))
        case .probe: return .probe(try Probe(decoding: &body))
        case .probeAck: return .probeAck(try ProbeAck(decoding: &body))
        case .probeNack: return .probeNack(try ProbeNack(decoding: &body))
        case .probeRequest: return .probeRequest(try ProbeRequest(decoding: &body))
        case .alive: return .alive(try MemberRecord(decoding: &body))
        case .suspect: return .suspect(try Accusation(decoding: &body))
        case .dead: return .dead(try Accusation(decoding: &body))
        case .left: return .left(try Departure(decoding: &body))
        case .syncRequest: return .syncRequest(try SyncRequest(decoding: &body))
        case .stateDigest: return .stateDigest(try StateDigest(decoding: &body))
        case .introduction: return .introduction(try Introduction(decoding: &body))
        case .introductionRequest: return .introductionRequest(try IntroductionRequest(decoding: &body))
        case .introductionRefusal: return .introductionRefusal(try IntroductionRefusal(decoding: &body))
        case .data: return .data(try DataChunk(decoding: &body))
        case .journalData:
            var chunk = try DataChunk(decoding: &body)
            chunk.stream = .journal
            return .data(chunk)
        case .ack: return .ack(try DeliveryAck(decoding: &body))
        case .forwardTSN: return .forwardTSN(try ForwardTSN(decoding: &body))
        case .fragment: return .fragment(try UnreliableFragment(decoding: &body))
        case .chunkWant: return .chunkWant(try ChunkWant(decoding: &body))
        case .chunkPiece: return .chunkPiece(try ChunkPiece(decoding: &body))
        case .chunkAbsent: return .chunkAbsent(try ChunkAbsent(decoding: &body))
        case .chunkPace: return .chunkPace(try ChunkPace(decoding: &body))
        case .chunkCancel: return .chunkCancel(try ChunkCancel(decoding: &body))
        case .epochHandover: return .epochHandover(try EpochHandover(decoding: &body))
        case .removalNotice: return .removalNotice(try KeyRotation(decoding: &body))
        case .sessionEnd: return .sessionEnd(try SessionEnd(decoding: &body))
        case .pathProbeRequest: return .pathProbeRequest(try PathProbeRequest(decoding: &body))
        case .pathProbe: return .pathProbe(try PathProbe(decoding: &body))
        case .observedAddress: return .observedAddress(try ObservedAddress(decoding: &body))
        case .punchRequest: return .punchRequest(try PunchRequest(decoding: &body))
        case .punchIntroduction: return .punchIntroduction(try PunchIntroduction(decoding: &body))
        case .punch: return .punch(try Punch(decoding: &body))
        case .relayForward: return .relayForward(try RelayedDatagram(decoding: &body))
        case .relayDelivery: return .relayDelivery(try RelayedDatagram(decoding: &body))
        case .relayRefusal: return .relayRefusal(try RelayRefusal(decoding: &body))
        case .birthdayRound: return .birthdayRound(try BirthdayRound(decoding: &body))
        case .protocolVersion: return .protocolVersion(try VersionAnnouncement(decoding: &body))
        }
    }
}

/// Frame type numbers are part of the wire format (Docs/PROTOCOL.md §3).
package enum FrameType: UInt8, Sendable, CaseIterable {
    case ping = 0x01
    case pong = 0x02
    case probe = 0x10
    case probeAck = 0x11
    case probeNack = 0x12
    case probeRequest = 0x13
    case alive = 0x14
    case suspect = 0x15
    case dead = 0x16
    case left = 0x17
    case syncRequest = 0x18
    case stateDigest = 0x19
    case introduction = 0x1A
    case introductionRequest = 0x1B
    case introductionRefusal = 0x1C
    case data = 0x20
    case ack = 0x21
    case forwardTSN = 0x22
    case fragment = 0x23
    /// A `data` frame of the journal's stream (`DeliveryStream.journal`).
    case journalData = 0x24
    case chunkWant = 0x30
    case chunkPiece = 0x31
    case chunkAbsent = 0x32
    case chunkPace = 0x33
    case chunkCancel = 0x34
    case epochHandover = 0x40
    case removalNotice = 0x41
    case sessionEnd = 0x42
    case pathProbeRequest = 0x50
    case pathProbe = 0x51
    case observedAddress = 0x52
    case punchRequest = 0x53
    case punchIntroduction = 0x54
    case punch = 0x55
    case relayForward = 0x56
    case relayDelivery = 0x57
    case relayRefusal = 0x58
    case birthdayRound = 0x59
    case protocolVersion = 0x5A
}

/// A body that can be written to and read from the wire.
package protocol WireBody: Equatable, Sendable {
    init(decoding buffer: inout ByteBuffer) throws(WireError)
    func encode(into buffer: inout ByteBuffer)
}

/// A liveness check carrying an opaque token that the pong echoes.
package struct Ping: WireBody {
    /// The token of a node's own path check (a new member's path, before journal sync starts),
    /// which no `groupmesh ping` uses: its ping and pong count as membership traffic.
    package static let pathCheckToken: UInt64 = 0
    package var token: UInt64
    package init(token: UInt64) { self.token = token }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt64.self, "ping token")
    }
    package func encode(into buffer: inout ByteBuffer) { buffer.writeInteger(token) }
}

package struct Pong: WireBody {
    package var token: UInt64
    package init(token: UInt64) { self.token = token }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt64.self, "pong token")
    }
    package func encode(into buffer: inout ByteBuffer) { buffer.writeInteger(token) }
}

package enum FrameCodec {
    package static let headerLength = 3

    package static func encodedLength(of frame: Frame) -> Int {
        var scratch = ByteBufferAllocator().buffer(capacity: 64)
        encode(frame, into: &scratch)
        return scratch.readableBytes
    }

    package static func encode(_ frame: Frame, into buffer: inout ByteBuffer) {
        buffer.writeInteger(frame.type.rawValue)
        let lengthIndex = buffer.writerIndex
        buffer.writeInteger(UInt16(0))
        let bodyStart = buffer.writerIndex
        frame.encodeBody(into: &buffer)
        let length = buffer.writerIndex - bodyStart
        precondition(length <= Int(UInt16.max), "frame body over 64 KiB")
        buffer.setInteger(UInt16(length), at: lengthIndex)
    }

    /// Decodes every frame in `buffer`. An empty payload, a length that runs past the end, an
    /// unknown type, or a body that does not fill its length exactly is an error.
    package static func decodeAll(_ buffer: inout ByteBuffer) -> Result<[Frame], WireError> {
        guard buffer.readableBytes > 0 else { return .failure(.truncated(what: "frame list")) }
        var frames: [Frame] = []
        while buffer.readableBytes > 0 {
            switch decodeOne(&buffer) {
            case let .success(frame): frames.append(frame)
            case let .failure(error): return .failure(error)
            }
        }
        return .success(frames)
    }

    package static func decodeOne(_ buffer: inout ByteBuffer) -> Result<Frame, WireError> {
        guard let typeByte: UInt8 = buffer.readInteger(), let length: UInt16 = buffer.readInteger() else {
            return .failure(.truncated(what: "frame header"))
        }
        guard let type = FrameType(rawValue: typeByte) else { return .failure(.unknownFrameType(typeByte)) }
        guard var body = buffer.readSlice(length: Int(length)) else {
            return .failure(.truncated(what: "frame body"))
        }
        do {
            let frame = try Frame.decodeBody(type: type, &body)
            guard body.readableBytes == 0 else { return .failure(.trailingBytes(body.readableBytes)) }
            return .success(frame)
        } catch {
            return .failure(error)
        }
    }
}

extension ByteBuffer {
    /// Reads a fixed-width integer or reports which field was cut short.
    @inlinable
    package mutating func readWire<T: FixedWidthInteger>(
        _: T.Type, _ what: @autoclosure () -> String
    ) throws(WireError) -> T {
        guard let value: T = readInteger() else { throw .truncated(what: what()) }
        return value
    }

    /// Reads exactly `count` bytes or reports which field was cut short.
    @inlinable
    package mutating func readWireBytes(_ count: Int, _ what: @autoclosure () -> String) throws(WireError) -> [UInt8] {
        guard count >= 0, let bytes = readBytes(length: count) else { throw .truncated(what: what()) }
        return bytes
    }

    /// Reads a 32-byte SHA-256 digest or reports which field was cut short.
    @inlinable
    package mutating func readDigest(_ what: @autoclosure () -> String) throws(WireError) -> SHA256Digest {
        // Four integer reads: no array, no generic collection code on the per-datagram path.
        guard readableBytes >= SHA256Digest.byteCount, let w0: UInt64 = readInteger(), let w1: UInt64 = readInteger(),
            let w2: UInt64 = readInteger(), let w3: UInt64 = readInteger()
        else { throw .truncated(what: what()) }
        return SHA256Digest(words: w0, w1, w2, w3)
    }
}
