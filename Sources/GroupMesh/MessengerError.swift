import MeshCore
import MeshCrypto

/// Why a send did not reach everyone, or could not start.
public enum MessengerError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooLarge(size: Int, limit: Int)
    /// The members that did not acknowledge, and why.
    case notDelivered([Participant: Messenger.DeliveryFailure])
    case unknownMember(String)
    case ambiguousMember(String, candidates: [String])
    case notRunning
    /// The session was ended (by the member named, maybe this one): nothing more is sent.
    case sessionEnded(by: String)
    /// Another member removed this one from the session.
    case removed(by: String)

    public var description: String {
        switch self {
        case let .tooLarge(size, limit):
            return
                "message of \(size) bytes is over the limit of \(limit) bytes (\(limit / 1024) KiB); nothing was sent"
        case let .notDelivered(failures):
            let list = failures.sorted { $0.key.description < $1.key.description }.map { member, reason in
                switch reason {
                // Without an acknowledgement the sender cannot know: the message may have
                // arrived and its acknowledgement been lost (PROTOCOL.md §5).
                case .timedOut: return "\(member) (no acknowledgement in time; it may still have arrived)"
                case .departed: return "\(member) (left or died before acknowledging)"
                case .unreachable: return "\(member) (not reachable: not sent)"
                }
            }
            return "not confirmed by " + list.joined(separator: ", ")
        case let .unknownMember(text):
            return "unknown member '\(text)' (name it by id, unique id prefix, or name; see groupmesh status)"
        case let .ambiguousMember(text, candidates):
            return "'\(text)' matches several members: \(candidates.joined(separator: ", "))"
        case .notRunning:
            return "the node is not running (it stopped or left); start it again with groupmesh run"
        case let .sessionEnded(by):
            return "the session was ended by \(by); nothing was sent"
        case let .removed(by):
            return "this node was removed from the session by \(by); nothing was sent"
        }
    }

    /// The core's failures by member id, for people.
    init(_ failures: [NodeID: DeliveryInstance.Failure], names: (NodeID) -> String) {
        var named: [Participant: Messenger.DeliveryFailure] = [:]
        for (id, failure) in failures {
            named[Participant(id: id, name: names(id))] = Messenger.DeliveryFailure(failure)
        }
        self = .notDelivered(named)
    }
}

extension Messenger.DeliveryFailure {
    init(_ failure: DeliveryInstance.Failure) {
        switch failure {
        case .timedOut: self = .timedOut
        case .departed: self = .departed
        case .unknown: self = .unreachable
        }
    }
}
