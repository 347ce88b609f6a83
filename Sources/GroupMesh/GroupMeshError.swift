import MeshCrypto

/// Everything the runtime can report to a user, each as one readable line.
public enum GroupMeshError: Error, Equatable, Sendable, CustomStringConvertible {
    case dataDirectory(path: String, reason: String)
    case dataDirectoryLocked(path: String, holder: String?)
    case dataDirectoryFormat(path: String, found: String)
    case sessionMismatch(path: String)
    case invalidAddress(String)
    case bindFailed(address: String, reason: String)
    case crypto(MeshCryptoError)
    case noNodeRunning(path: String)
    case control(String)
    case store(String)
    case attachment(String)
    case attachmentTooLarge(size: UInt64, limit: UInt64)
    case unknownAttachment(String)
    case unavailable(String)

    public var description: String {
        switch self {
        case let .dataDirectory(path, reason):
            return "cannot use data dir \(path): \(reason)"
        case let .dataDirectoryLocked(path, holder):
            let who = holder.map { " (pid \($0))" } ?? ""
            return "another groupmesh node\(who) is running on data dir \(path); stop it or pick another --data-dir"
        case let .dataDirectoryFormat(path, found):
            return "data dir \(path) has format '\(found)', which this groupmesh does not read (it reads \(DataDirectory.formatVersion))"
        case let .sessionMismatch(path):
            return "data dir \(path) already belongs to another session; use a fresh --data-dir to join with this invite"
        case let .invalidAddress(text):
            return "invalid address '\(text)': expected HOST:PORT, e.g. 127.0.0.1:7946 or [::1]:7946"
        case let .bindFailed(address, reason):
            return "cannot listen on \(address): \(reason)"
        case let .crypto(error):
            return error.description
        case let .noNodeRunning(path):
            return "no groupmesh node is running on data dir \(path) (start one with: groupmesh run --data-dir \(path))"
        case let .control(message):
            return message
        case let .store(message):
            return message
        case let .attachment(message):
            return message
        case let .attachmentTooLarge(size, limit):
            return "attachment of \(size) bytes is over the limit of \(limit) bytes (\(limit >> 20) MiB); nothing was stored"
        case let .unknownAttachment(text):
            return "unknown attachment '\(text)' (see groupmesh attachments)"
        case let .unavailable(message):
            return "unavailable: \(message)"
        }
    }
}
