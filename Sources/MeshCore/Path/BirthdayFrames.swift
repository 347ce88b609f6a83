import MeshCrypto
import NIOCore

/// One step of a birthday round between two members that reach each other only through a relay
/// or TURN (frame 0x59, PROTOCOL.md §1c): sent pairwise, through whatever path the pair uses.
/// `offer` proposes a round (the member with the lower id does); `ready` says the sender's many
/// sockets are open (or that it opens none), so the other may start probing. Each side says what
/// its NAT is, so both derive the same roles (`BirthdayPunching.roles`), and where it is: the
/// address a hard side aims its sockets at, or the host an easy side probes.
package struct BirthdayRound: WireBody {
    package enum Step: UInt8, Sendable {
        case offer = 0
        case ready = 1
    }

    package static let maxAddresses = MemberRecord.maxAddresses

    /// Chosen by the leader; both steps of one round carry it.
    package var token: UInt64
    package var step: Step
    package var nat: NATBehaviour
    /// The sender's public addresses, best first (its own words: what a side probes is only
    /// ever where the other said it is).
    package var addresses: [PeerAddress]

    package init(token: UInt64, step: Step, nat: NATBehaviour, addresses: [PeerAddress]) {
        self.token = token
        self.step = step
        self.nat = nat
        self.addresses = Array(addresses.prefix(Self.maxAddresses))
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt64.self, "birthday token")
        guard let step = Step(rawValue: try buffer.readWire(UInt8.self, "birthday step")) else {
            throw .invalidField(what: "birthday step")
        }
        self.step = step
        guard let nat = NATBehaviour(wireValue: try buffer.readWire(UInt8.self, "birthday NAT")) else {
            throw .invalidField(what: "birthday NAT")
        }
        self.nat = nat
        addresses = try PeerAddress.decodeList(from: &buffer, atMost: Self.maxAddresses, "birthday address count")
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(token)
        buffer.writeInteger(step.rawValue)
        buffer.writeInteger(nat.wireValue)
        PeerAddress.encode(addresses, into: &buffer)
    }
}

extension NATBehaviour {
    /// The number a `BirthdayRound` carries.
    var wireValue: UInt8 {
        switch self {
        case .unknown: 0
        case .none: 1
        case .endpointIndependent: 2
        case .symmetric: 3
        }
    }

    init?(wireValue: UInt8) {
        switch wireValue {
        case 0: self = .unknown
        case 1: self = .none
        case 2: self = .endpointIndependent
        case 3: self = .symmetric
        default: return nil
        }
    }
}
