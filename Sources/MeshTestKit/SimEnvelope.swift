import MeshCore
import MeshCrypto
import NIOCore

/// How simulated protocols frame a datagram: the sender's id, an 8-byte FNV-1a checksum of id and
/// payload standing in for the AEAD tag (so a corrupted datagram is dropped, as sealing would drop
/// it), then the payload.
package enum SimEnvelope {
    package static let overhead = NodeID.byteCount + 8

    package static func seal(from sender: NodeID, payload: [UInt8]) -> [UInt8] {
        let id = sender.bytes
        return id + checksum(id[...] + payload[...]) + payload
    }

    /// The sender and payload, or nil for a datagram that is too short or was corrupted.
    package static func open(_ datagram: [UInt8]) -> (sender: NodeID, payload: ArraySlice<UInt8>)? {
        guard datagram.count > overhead,
            Array(datagram[16..<24]) == checksum(datagram[0..<16] + datagram[24...])
        else { return nil }
        return (NodeID(bytes: datagram[0..<16]), datagram[24...])
    }

    /// The simulated datagram of `frames`, encoded with the real frame codec.
    package static func seal(from sender: NodeID, frames: [Frame]) -> [UInt8] {
        var buffer = ByteBuffer()
        for frame in frames { FrameCodec.encode(frame, into: &buffer) }
        return seal(from: sender, payload: Array(buffer.readableBytesView))
    }

    /// The sender and frames, or nil for a corrupted datagram or frames that do not decode.
    package static func openFrames(_ datagram: [UInt8]) -> (sender: NodeID, frames: [Frame])? {
        guard let (sender, payload) = open(datagram) else { return nil }
        var buffer = ByteBuffer(bytes: payload)
        guard case let .success(frames) = FrameCodec.decodeAll(&buffer) else { return nil }
        return (sender, frames)
    }

    static func checksum(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01B3
        }
        return (0..<8).map { UInt8(truncatingIfNeeded: hash >> UInt64(8 * $0)) }
    }
}
