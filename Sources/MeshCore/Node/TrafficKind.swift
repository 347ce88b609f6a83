/// What a datagram is for, so that a node's traffic can be told apart in its counters (and in
/// the metrics an operator graphs): a mesh that is busy replicating looks nothing like one
/// whose membership is flapping, though both move the same totals.
package enum TrafficKind: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// SWIM: probes, acknowledgements, gossip of member records, full-state syncs; and the
    /// observed addresses members echo (reachability).
    case membership
    /// The application's messages on the reliable channel and unreliable fragments, and the
    /// channel's acknowledgements.
    case messages
    /// Journal operations and requests, on the same channel in a stream of their own.
    case journal
    /// Chunk wants, pieces and absences, and the path probes that size the pieces.
    case transfer
    /// Key epochs: handovers and beacons in an earlier epoch.
    case keys
    /// `groupmesh ping` and its answers.
    case ping
    /// Datagrams this node carries between two other members as their relay, and its refusals.
    case relay

    package var description: String {
        switch self {
        case .membership: return "membership"
        case .messages: return "messages"
        case .journal: return "journal"
        case .transfer: return "transfer"
        case .keys: return "keys"
        case .ping: return "ping"
        case .relay: return "relay"
        }
    }

    /// The kind of a pairwise datagram, by the first frame that says (acknowledgements ride
    /// along with whatever else goes to the same member, so they decide only when alone).
    package init(pairwise frames: [Frame]) {
        self = Self.kind(ofPairwise: frames)
    }

    private static func kind(ofPairwise frames: [Frame]) -> TrafficKind {
        var kind = TrafficKind.messages
        for frame in frames {
            switch frame {
            case .chunkWant, .chunkPiece, .chunkAbsent, .chunkPace, .chunkCancel, .pathProbeRequest, .pathProbe:
                return .transfer
            case let .data(chunk) where chunk.stream == .journal: return .journal
            case .data, .fragment, .forwardTSN: return .messages
            case let .ping(ping) where ping.token == Ping.pathCheckToken: return .membership
            case let .pong(pong) where pong.token == Ping.pathCheckToken: return .membership
            case .ping, .pong: kind = .ping
            case .probe, .probeAck: return .membership  // with gossip beside it
            case .observedAddress, .punchRequest, .punchIntroduction, .punch, .birthdayRound, .protocolVersion,
                .introduction, .introductionRequest, .introductionRefusal:
                return .membership  // where a member sees us, paths to it, what it speaks, who let it in
            case .relayForward, .relayDelivery, .relayRefusal: return .relay
            default: continue
            }
        }
        return kind
    }

    /// The kind of a hello datagram: membership's, unless it carries a key epoch.
    package init(hello frames: [Frame]) {
        switch frames.first {
        case .epochHandover, .removalNotice, .sessionEnd: self = .keys
        default: self = .membership
        }
    }
}

/// Datagrams and bytes by kind, in one direction. A fixed array: it is counted per datagram.
package struct TrafficCounts: Sendable, Equatable {
    package private(set) var datagrams = [UInt64](repeating: 0, count: TrafficKind.allCases.count)
    package private(set) var bytes = [UInt64](repeating: 0, count: TrafficKind.allCases.count)

    package init() {}

    package mutating func count(_ kind: TrafficKind, datagrams: Int = 1, bytes: Int) {
        self.datagrams[kind.rawValue] &+= UInt64(datagrams)
        self.bytes[kind.rawValue] &+= UInt64(bytes)
    }

    package func datagrams(_ kind: TrafficKind) -> UInt64 { datagrams[kind.rawValue] }
    package func bytes(_ kind: TrafficKind) -> UInt64 { bytes[kind.rawValue] }
}
