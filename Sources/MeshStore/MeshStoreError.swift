import MeshCrypto

/// What the store reports; each case is one readable line.
package enum MeshStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case io(path: String, reason: String)
    case diskFull(path: String)
    case notFound(SHA256Digest)
    case corrupt(SHA256Digest)
    case hashMismatch(expected: SHA256Digest, actual: SHA256Digest)
    case formatVersion(path: String, found: String)
    case chunkTooLarge(size: Int, limit: Int)

    package var description: String {
        switch self {
        case let .io(path, reason): return "cannot use \(path): \(reason)"
        case let .diskFull(path):
            return "no space left on the disk of \(path); nothing was lost, free some space and retry"
        case let .notFound(digest): return "chunk \(digest) is not in the store"
        case let .corrupt(digest): return "chunk \(digest) was corrupt on disk and has been discarded"
        case let .hashMismatch(expected, actual): return "chunk bytes hash to \(actual), not the expected \(expected)"
        case let .formatVersion(path, found):
            return "chunk store \(path) has format '\(found)', which this groupmesh does not read"
        case let .chunkTooLarge(size, limit):
            return "a chunk of \(size) bytes is over the store's limit of \(limit) bytes"
        }
    }
}
