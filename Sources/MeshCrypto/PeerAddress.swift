#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A numeric UDP endpoint, IPv4 or IPv6, as carried in invites and membership records.
/// Host names are resolved by the shell before they become a `PeerAddress`.
package struct PeerAddress: Hashable, Sendable, CustomStringConvertible, Comparable {
    package enum Host: Hashable, Sendable {
        case ipv4(UInt32)
        case ipv6(high: UInt64, low: UInt64)
    }

    package var host: Host
    package var port: UInt16

    package init(host: Host, port: UInt16) {
        self.host = host
        self.port = port
    }

    package init(ipv4 bytes: [UInt8], port: UInt16) {
        precondition(bytes.count == 4)
        self.init(host: .ipv4(bytes.reduce(0) { $0 << 8 | UInt32($1) }), port: port)
    }

    package init(ipv6 bytes: [UInt8], port: UInt16) {
        precondition(bytes.count == 16)
        let high = bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let low = bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        self.init(host: .ipv6(high: high, low: low), port: port)
    }

    /// Parses `A.B.C.D:PORT` or `[IPV6]:PORT` (numeric hosts only).
    package init(parsing text: String) throws(MeshCryptoError) {
        guard let (host, port) = Self.split(text), let parsedHost = Self.parseHost(host) else {
            throw .invalidAddress(text)
        }
        self.init(host: parsedHost, port: port)
    }

    /// Splits `HOST:PORT` / `[HOST]:PORT` without interpreting the host.
    package static func split(_ text: String) -> (host: String, port: UInt16)? {
        let hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"),
                text.index(after: close) < text.endIndex, text[text.index(after: close)] == ":"
            else { return nil }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else { return nil }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        guard !hostPart.isEmpty, !portPart.isEmpty,
            portPart.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let port = UInt16(portPart)
        else { return nil }
        return (String(hostPart), port)
    }

    package static func parseHost(_ text: String) -> Host? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return .ipv4(UInt32(bigEndian: v4.s_addr))
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return PeerAddress(ipv6: bytes, port: 0).host
        }
        return nil
    }

    package var isIPv6: Bool { if case .ipv6 = host { return true } else { return false } }

    package var isLoopback: Bool {
        switch host {
        case let .ipv4(value): return value >> 24 == 127
        case let .ipv6(high, low): return high == 0 && low == 1
        }
    }

    package var isUnspecified: Bool {
        switch host {
        case let .ipv4(value): return value == 0
        case let .ipv6(high, low): return high == 0 && low == 0
        }
    }

    /// Network-order address bytes: 4 for IPv4, 16 for IPv6.
    package var hostBytes: [UInt8] {
        switch host {
        case let .ipv4(value):
            return (0..<4).map { UInt8(truncatingIfNeeded: value >> UInt32(24 - 8 * $0)) }
        case let .ipv6(high, low):
            return (0..<16).map { UInt8(truncatingIfNeeded: ($0 < 8 ? high : low) >> UInt64(56 - 8 * ($0 % 8))) }
        }
    }

    package var hostString: String {
        var bytes = hostBytes
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isIPv6 ? AF_INET6 : AF_INET
        guard inet_ntop(family, &bytes, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    package var description: String {
        isIPv6 ? "[\(hostString)]:\(port)" : "\(hostString):\(port)"
    }

    package static func < (lhs: PeerAddress, rhs: PeerAddress) -> Bool {
        (lhs.hostBytes.count, lhs.hostBytes, lhs.port) < (rhs.hostBytes.count, rhs.hostBytes, rhs.port)
    }
}

private func < (lhs: (Int, [UInt8], UInt16), rhs: (Int, [UInt8], UInt16)) -> Bool {
    if lhs.0 != rhs.0 { return lhs.0 < rhs.0 }
    if lhs.1 != rhs.1 { return lhs.1.lexicographicallyPrecedes(rhs.1) }
    return lhs.2 < rhs.2
}
