/// Every failure `MeshCrypto` reports, each with a sentence a person can act on.
package enum MeshCryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidKeyLength(what: String, expected: Int, actual: Int)
    case keyFile(path: String, reason: String)
    case keyFilePermissions(path: String, mode: UInt32)
    case invite(InviteTokenError)
    case invalidAddress(String)
    case invalidHex(String)

    package var description: String {
        switch self {
        case let .invalidKeyLength(what, expected, actual):
            return "\(what) must be \(expected) bytes, got \(actual)"
        case let .keyFile(path, reason):
            return "cannot use key file \(path): \(reason)"
        case let .keyFilePermissions(path, mode):
            return "key file \(path) is readable by others (mode \(String(mode, radix: 8))); run: chmod 600 \(path)"
        case let .invite(error):
            return error.description
        case let .invalidAddress(text):
            return "invalid address '\(text)': expected HOST:PORT, e.g. 192.0.2.7:7946 or [2001:db8::7]:7946"
        case let .invalidHex(text):
            return "invalid hex string '\(text.prefix(80))'"
        }
    }
}
