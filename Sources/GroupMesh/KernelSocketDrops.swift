import Foundation
import MeshCrypto

/// Datagrams the kernel dropped for the node's UDP socket because its receive buffer was full:
/// the last column of the socket's line in `/proc/net/udp` (or `udp6`). Nothing else shows them
/// (a flood's drops appear nowhere else); nil where /proc is not readable.
enum KernelSocketDrops {
    static func read(localAddress: PeerAddress) -> UInt64? {
        let table = localAddress.isIPv6 ? "/proc/net/udp6" : "/proc/net/udp"
        guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { return nil }
        return drops(in: text, localAddress: localAddress)
    }

    /// The `drops` of the line whose local address is `localAddress` (the table's header skipped).
    static func drops(in table: String, localAddress: PeerAddress) -> UInt64? {
        let wanted = procAddress(localAddress)
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
            guard fields.count >= 13, fields[1].uppercased() == wanted else { continue }
            return UInt64(fields[12])
        }
        return nil
    }

    /// `0100007F:1F0A` for 127.0.0.1:7946: the address as the kernel stores it (each 32-bit word
    /// in host order, here little-endian), printed in hex, then the port.
    static func procAddress(_ address: PeerAddress) -> String {
        let bytes = address.hostBytes
        var hex = ""
        for word in stride(from: 0, to: bytes.count, by: 4) {
            for byte in bytes[word..<word + 4].reversed() { hex += String(format: "%02X", byte) }
        }
        return hex + ":" + String(format: "%04X", address.port)
    }
}
