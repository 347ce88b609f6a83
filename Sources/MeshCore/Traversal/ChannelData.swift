/// A TURN ChannelData message (RFC 8656 §12.4): a datagram to or from a peer bound to a channel,
/// with 4 bytes of framing (channel number, length) instead of a Send or Data indication's 36.
package struct ChannelData: Sendable, Equatable {
    /// Channel numbers a client may bind (§12).
    package static let validChannels: ClosedRange<UInt16> = 0x4000...0x4FFF
    package static let headerSize = 4

    package var channel: UInt16
    package var payload: [UInt8]

    package init(channel: UInt16, payload: [UInt8]) {
        self.channel = channel
        self.payload = payload
    }

    /// Whether a server's datagram is framed as ChannelData: its first two bits are 01 (first
    /// byte 0x40–0x7F), where a STUN message's are 00 (§18.3 of RFC 8656; RFC 7983's ranges).
    package static func looksLikeChannelData(_ first: UInt8) -> Bool { first & 0xC0 == 0x40 }

    /// No padding: over UDP it is optional, and the datagram's length already ends the payload.
    package func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.headerSize + payload.count)
        bytes.append16(channel)
        bytes.append16(UInt16(truncatingIfNeeded: payload.count))
        return bytes + payload
    }

    /// The message in `bytes`; up to 3 bytes of padding after the payload are allowed.
    package static func decode(_ bytes: [UInt8]) throws(WireError) -> ChannelData {
        guard bytes.count >= headerSize else { throw .truncated(what: "ChannelData header") }
        guard bytes.count <= StunMessage.maxSize else {
            throw .oversized(length: bytes.count, limit: StunMessage.maxSize)
        }
        let channel = bytes.readUInt16(at: 0)
        guard validChannels.contains(channel) else { throw .invalidField(what: "ChannelData channel number") }
        let length = Int(bytes.readUInt16(at: 2))
        guard headerSize + length <= bytes.count else { throw .truncated(what: "ChannelData payload") }
        guard bytes.count - headerSize - length <= 3 else { throw .trailingBytes(bytes.count - headerSize - length) }
        return ChannelData(channel: channel, payload: Array(bytes[headerSize..<(headerSize + length)]))
    }
}
