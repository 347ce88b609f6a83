import NIOCore

// Frame bodies of the messenger (Docs/PROTOCOL.md §5). Always sealed with pairwise keys, so the
// receiver knows which member sent them.

/// Which stream a reliable message belongs to. Both share one channel (one TSN space, one
/// window) per pair of members; the stream is told by the frame type (`data` or `journalData`),
/// so no application message can pass for a journal message, whatever its bytes.
package enum DeliveryStream: UInt8, Sendable, Equatable {
    /// Messages of the application (`Messenger`): a `MessageEnvelope`.
    case application
    /// The journal's own messages (`JournalMessage`), never shown to applications.
    case journal
}

/// One fragment of a reliable message. `tsn` numbers fragments per sender→receiver channel;
/// `flags` marks the first (bit 0) and last (bit 1) fragment of a message.
package struct DataChunk: WireBody {
    package static let begins: UInt8 = 1
    package static let ends: UInt8 = 2
    package static let overhead = 8 + 1

    package var tsn: UInt64
    package var flags: UInt8
    package var body: [UInt8]
    /// Not in the body: the frame type carries it (Frame.swift).
    package var stream: DeliveryStream

    package init(tsn: UInt64, flags: UInt8, body: [UInt8], stream: DeliveryStream = .application) {
        self.tsn = tsn
        self.flags = flags
        self.body = body
        self.stream = stream
    }

    package var isFirst: Bool { flags & Self.begins != 0 }
    package var isLast: Bool { flags & Self.ends != 0 }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        tsn = try buffer.readWire(UInt64.self, "data tsn")
        flags = try buffer.readWire(UInt8.self, "data flags")
        guard flags & ~(Self.begins | Self.ends) == 0 else { throw .invalidField(what: "data flags") }
        body = try buffer.readWireBytes(buffer.readableBytes, "data body")
        stream = .application
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(tsn)
        buffer.writeInteger(flags)
        buffer.writeBytes(body)
    }
}

/// Cumulative and selective acknowledgement, with the receiver's free buffer space.
package struct DeliveryAck: WireBody {
    package static let maxRanges = 16

    /// Every TSN up to here was received (or skipped by a forward).
    package var cumulative: UInt64
    /// Bytes the receiver can still buffer.
    package var window: UInt32
    /// Received TSN ranges above `cumulative`, ascending, inclusive.
    package var ranges: [ClosedRange<UInt64>]

    package init(cumulative: UInt64, window: UInt32, ranges: [ClosedRange<UInt64>] = []) {
        self.cumulative = cumulative
        self.window = window
        self.ranges = Array(ranges.prefix(Self.maxRanges))
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        cumulative = try buffer.readWire(UInt64.self, "ack cumulative")
        window = try buffer.readWire(UInt32.self, "ack window")
        let count = try buffer.readWire(UInt8.self, "ack range count")
        guard count <= Self.maxRanges else { throw .invalidField(what: "ack range count") }
        var ranges: [ClosedRange<UInt64>] = []
        var floor = cumulative
        for _ in 0..<count {
            let start = try buffer.readWire(UInt64.self, "ack range start")
            let end = try buffer.readWire(UInt64.self, "ack range end")
            // Ranges lie above the cumulative point, in order, without overlap.
            guard start > floor, end >= start else { throw .invalidField(what: "ack range") }
            ranges.append(start...end)
            floor = end
        }
        self.ranges = ranges
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(cumulative)
        buffer.writeInteger(window)
        buffer.writeInteger(UInt8(ranges.count))
        for range in ranges {
            buffer.writeInteger(range.lowerBound)
            buffer.writeInteger(range.upperBound)
        }
    }
}

/// SCTP's FORWARD-TSN: "I gave up on everything up to here; move your cumulative point".
package struct ForwardTSN: WireBody {
    package var cumulative: UInt64
    package init(cumulative: UInt64) { self.cumulative = cumulative }
    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        cumulative = try buffer.readWire(UInt64.self, "forward tsn")
    }
    package func encode(into buffer: inout ByteBuffer) { buffer.writeInteger(cumulative) }
}

/// One fragment of an unreliable message.
package struct UnreliableFragment: WireBody {
    package static let overhead = 8 + 2 + 2

    package var messageID: UInt64
    package var index: UInt16
    package var count: UInt16
    package var body: [UInt8]

    package init(messageID: UInt64, index: UInt16, count: UInt16, body: [UInt8]) {
        self.messageID = messageID
        self.index = index
        self.count = count
        self.body = body
    }

    package init(decoding buffer: inout ByteBuffer) throws(WireError) {
        messageID = try buffer.readWire(UInt64.self, "fragment message id")
        index = try buffer.readWire(UInt16.self, "fragment index")
        count = try buffer.readWire(UInt16.self, "fragment count")
        guard count > 0, index < count else { throw .invalidField(what: "fragment index") }
        body = try buffer.readWireBytes(buffer.readableBytes, "fragment body")
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(messageID)
        buffer.writeInteger(index)
        buffer.writeInteger(count)
        buffer.writeBytes(body)
    }
}
