import NIOCore

/// "Send me a probe of this size": the requester of chunks measures the path that its pieces
/// will take (from the holder to itself) by asking the holder for a datagram of exactly `size`
/// bytes of UDP payload (DPLPMTUD, RFC 8899, driven by the receiver: the side that picks the
/// piece size is the side that learns what fits).
package struct PathProbeRequest: WireBody {
    package var token: UInt32
    /// The whole sealed datagram's size asked for, in bytes of UDP payload.
    package var size: Int

    package init(token: UInt32, size: Int) {
        self.token = token
        self.size = size
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt32.self, "probe request token")
        size = Int(try buffer.readWire(UInt16.self, "probe request size"))
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(token)
        buffer.writeInteger(UInt16(size))
    }
}

/// The answer to a `PathProbeRequest`: the token, then zeros that pad the sealed datagram to
/// the size asked for. Its arrival proves the path carries that size; a lost one proves
/// nothing (a probe is never retransmitted as data is, only asked for again).
package struct PathProbe: WireBody {
    /// Frame header, token: what a probe costs before its padding.
    package static let overhead = FrameCodec.headerLength + 4

    package var token: UInt32
    package var padding: Int

    package init(token: UInt32, padding: Int) {
        self.token = token
        self.padding = padding
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        token = try buffer.readWire(UInt32.self, "probe token")
        // Zeros only: one encoding per probe, and nothing can ride in the padding.
        guard buffer.withUnsafeReadableBytes(Self.isZeros) else { throw .invalidField(what: "probe padding") }
        padding = buffer.readableBytes
        buffer.moveReaderIndex(forwardBy: padding)
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(token)
        buffer.writeRepeatingByte(0, count: max(0, padding))
    }

    /// An indexed loop, not `allSatisfy` over the bytes' view: a probe pads up to 9 KB, and in a
    /// debug build (the simulations of `make test`) the generic iteration cost a call per byte.
    private static func isZeros(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        while index < bytes.count {
            guard bytes[index] == 0 else { return false }
            index += 1
        }
        return true
    }
}
