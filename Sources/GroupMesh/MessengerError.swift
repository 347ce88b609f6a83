import MeshCore
import MeshCrypto

/// A message as it reached this node: who sent it (authenticated by the pairwise keys), how,
/// and its type tag and body.
public struct InboundMessage: Sendable, Equatable {
    public var from: NodeID
    public var fromName: String
    public var mode: DeliveryInstance.Mode
    public var type: String
    public var body: [UInt8]
}

/// Why a send did not reach everyone, or could not start.
public enum MessengerError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooLarge(size: Int, limit: Int)
    /// Members that did not acknowledge, by name, with the reason.
    case notDelivered([String: DeliveryInstance.Failure])
    case unknownMember(String)
    case ambiguousMember(String, candidates: [String])
    case notRunning

    public var description: String {
        switch self {
        case let .tooLarge(size, limit):
            return "message of \(size) bytes is over the limit of \(limit) bytes (\(limit / 1024) KiB); nothing was sent"
        case let .notDelivered(failures):
            let list = failures.sorted { $0.key < $1.key }.map { name, reason in
                switch reason {
                case .timedOut: return "\(name) (no acknowledgement in time)"
                case .departed: return "\(name) (left or died)"
                case .unknown: return "\(name) (not reachable)"
                }
            }
            return "not delivered to " + list.joined(separator: ", ")
        case let .unknownMember(text):
            return "unknown member '\(text)' (name it by id, unique id prefix, or name; see groupmesh status)"
        case let .ambiguousMember(text, candidates):
            return "'\(text)' matches several members: \(candidates.joined(separator: ", "))"
        case .notRunning:
            return "the node is not running"
        }
    }
}
