import Dispatch
import Foundation
import MeshCore
import MeshCrypto

/// A STUN or TURN server: `HOST:PORT` as given, and the address its name resolved to once, at
/// start (`run --stun`, `run --turn`).
public struct TraversalServer: Sendable, Equatable, CustomStringConvertible {
    /// As given (a name, or a numeric address).
    public let name: String
    package let address: PeerAddress

    package init(name: String, address: PeerAddress) {
        self.name = name
        self.address = address
    }

    public var description: String { name == address.description ? name : "\(name) (\(address))" }

    /// The standard STUN and TURN port.
    public static let defaultPort: UInt16 = 3478
    /// How long a name may take to resolve before the start gives up.
    public static let resolveTimeout: Duration = .seconds(5)

    /// `HOST:PORT` (or `HOST`: port 3478) resolved to one address of the family the node listens
    /// on. `what` names the option in errors (`--stun`). A malformed one is an input error
    /// (exit 65); a name that does not resolve within `resolveTimeout` is unavailable (69).
    public static func resolve(_ text: String, ipv6: Bool, what: String) throws(GroupMeshError) -> TraversalServer {
        let host: String, port: UInt16
        if let (splitHost, splitPort) = PeerAddress.split(text) {
            (host, port) = (splitHost, splitPort)
        } else if !text.isEmpty, !text.contains(":"), !text.contains("/") {
            (host, port) = (text, defaultPort)
        } else {
            throw .refused(
                "\(what) \(TerminalText.escaped(text)): expected HOST:PORT, e.g. stun.example.org:3478", kind: .input)
        }
        guard port != 0, !host.isEmpty, host.utf8.count <= 253,
            host.unicodeScalars.allSatisfy({ $0.isASCII && !TerminalText.needsEscape($0) && $0 != " " })
        else {
            throw .refused(
                "\(what) \(TerminalText.escaped(text)): expected HOST:PORT with a host name or address and a port from 1",
                kind: .input)
        }
        if let numeric = PeerAddress.parseHost(host) {
            let address = PeerAddress(host: numeric, port: port)
            guard address.isIPv6 == ipv6 else {
                throw .refused(
                    "\(what) \(text): the node listens on \(ipv6 ? "IPv6" : "IPv4"), and this server's address is not",
                    kind: .input)
            }
            return TraversalServer(name: text, address: address)
        }
        switch lookUp(host, ipv6: ipv6) {
        case let .success(resolved):
            return TraversalServer(name: text, address: PeerAddress(host: resolved, port: port))
        case let .failure(reason):
            throw .refused("\(what) \(text): cannot resolve \(host): \(reason)", kind: .unavailable)
        }
    }

    private final class LookUpResult: @unchecked Sendable {
        var value: Result<PeerAddress.Host, LookUpFailure>?
        let done = DispatchSemaphore(value: 0)
    }

    struct LookUpFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// getaddrinfo on a thread of its own, waited for at most `resolveTimeout` (it cannot be
    /// cancelled: a resolver that hangs is left behind, and the start fails).
    private static func lookUp(_ host: String, ipv6: Bool) -> Result<PeerAddress.Host, LookUpFailure> {
        let result = LookUpResult()
        let thread = Thread {
            var hints = addrinfo()
            hints.ai_family = ipv6 ? AF_INET6 : AF_INET
            hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            let status = getaddrinfo(host, nil, &hints, &list)
            defer { if let list { freeaddrinfo(list) } }
            if status != 0 {
                result.value = .failure(LookUpFailure(description: String(cString: gai_strerror(status))))
            } else if let entry = list?.pointee, let raw = entry.ai_addr {
                if entry.ai_family == AF_INET {
                    let value = raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                        UInt32(bigEndian: $0.pointee.sin_addr.s_addr)
                    }
                    result.value = .success(.ipv4(value))
                } else {
                    let bytes = raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                        withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
                    }
                    result.value = .success(PeerAddress(ipv6: bytes, port: 0).host)
                }
            } else {
                result.value = .failure(LookUpFailure(description: "no address"))
            }
            result.done.signal()
        }
        thread.start()
        let seconds = Double(resolveTimeout.components.seconds)
        guard result.done.wait(timeout: .now() + seconds) == .success, let value = result.value else {
            return .failure(LookUpFailure(description: "no answer from the resolver within \(resolveTimeout)"))
        }
        return value
    }
}

/// `run --turn turn:USER:PASS@HOST:PORT`: a TURN server and the long-term credentials for it.
public struct TurnServerURL: Sendable, Equatable {
    public let username: String
    public let password: String
    /// `HOST:PORT`, resolved by `TraversalServer.resolve`.
    public let server: String

    /// `turn:USER:PASS@HOST:PORT` (the user holds no colon; the password may, and may hold `@`:
    /// the last `@` ends it). Errors never quote the password.
    public init(parsing text: String) throws(GroupMeshError) {
        let shape = "expected turn:USER:PASS@HOST:PORT"
        guard text.hasPrefix("turn:") else { throw .refused("--turn: \(shape)", kind: .input) }
        let rest = text.dropFirst("turn:".count)
        guard let at = rest.lastIndex(of: "@") else { throw .refused("--turn: \(shape) (no @HOST:PORT)", kind: .input) }
        let credentials = rest[..<at], server = rest[rest.index(after: at)...]
        guard let colon = credentials.firstIndex(of: ":") else {
            throw .refused("--turn: \(shape) (no password after the user)", kind: .input)
        }
        let username = String(credentials[..<colon]), password = String(credentials[credentials.index(after: colon)...])
        guard !username.isEmpty, !password.isEmpty, !server.isEmpty else {
            throw .refused("--turn: \(shape)", kind: .input)
        }
        guard !server.contains("?") else {
            throw .refused("--turn: only UDP is spoken (drop ?transport=…): \(shape)", kind: .input)
        }
        // They go into STUN attributes and the key: text a server can compare, nothing that prints.
        for part in [username, password]
        where part.utf8.count > 255 || part.unicodeScalars.contains(where: TerminalText.needsEscape) {
            throw .refused("--turn: the user and password must be up to 255 bytes of printable text", kind: .input)
        }
        self.username = username
        self.password = password
        self.server = String(server)
    }
}

/// The TURN server the node allocates on, resolved, and its credentials.
public struct TurnServerConfiguration: Sendable, Equatable {
    public let server: TraversalServer
    package let credentials: TurnAllocation.Credentials

    public init(server: TraversalServer, username: String, password: String) {
        self.server = server
        credentials = .init(username: username, password: password)
    }
}
