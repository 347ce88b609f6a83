import MeshCore
import MeshCrypto
import NIOCore

/// The bytes of a pack file: many chunks appended to one file, so that storing a chunk makes no
/// new file (making files was what a 100 MiB fetch waited on: see ChunkStore).
///
///     pack   = header record*
///     header = "GMPACK\0\2" durable:u64le           (16 bytes)
///     record = state:u32le length:u32le digest:32 bytes:length
///
/// `durable` is how far the pack was synced when it was last written: records past it are
/// hashed when the store opens (one that does not verify is marked dead), and a tail past it
/// that is no record is cut off. A removed record's state says so (its bytes are freed where
/// the file system can punch holes); its length still leads to the next record.
enum PackFormat {
    static let magic: [UInt8] = Array("GMPACK".utf8) + [0, 2]
    static let headerSize = 16
    static let durableOffset: Int64 = 8
    static let recordHeaderSize = 40
    static let fileSuffix = ".pack"
    /// The longest record a pack takes (a chunk is at most 4 MiB): a longer length read back is
    /// damage, not a record to load into memory.
    static let maximumLength = 64 << 20

    enum State: UInt32 {
        /// "CHNK": a stored chunk.
        case live = 0x4B4E_4843
        /// "DEAD": removed.
        case dead = 0x4441_4544
    }

    struct RecordHeader {
        var state: State
        var length: Int
        var digest: SHA256Digest
    }

    static func fileName(_ id: UInt64) -> String {
        let hex = String(id, radix: 16)
        return String(repeating: "0", count: max(0, 16 - hex.utf8.count)) + hex + fileSuffix
    }

    /// The pack number a file name stands for, or nil for any other name.
    static func id(ofFileName name: String) -> UInt64? {
        guard name.hasSuffix(fileSuffix) else { return nil }
        let stem = name.dropLast(fileSuffix.utf8.count)
        // Exactly as `fileName` writes it (no upper case, no sign), and with room for a next one.
        guard let id = UInt64(stem, radix: 16), id < UInt64.max >> 1, fileName(id) == name else { return nil }
        return id
    }

    static func header(durable: Int64) -> [UInt8] {
        magic + durableBytes(durable)
    }

    /// The header's durable field, rewritten in place after each sync.
    static func durableBytes(_ durable: Int64) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt64(durable), endianness: .little)
        return Array(buffer.readableBytesView)
    }

    /// The durable length a pack header holds, or nil for bytes that are not one.
    static func durable(inHeader bytes: [UInt8]) -> Int64? {
        var buffer = ByteBuffer(bytes: bytes)
        guard bytes.count == headerSize, buffer.readBytes(length: magic.count) == magic,
            let value = buffer.readInteger(endianness: .little, as: UInt64.self), value <= UInt64(Int64.max)
        else { return nil }
        return Int64(value)
    }

    static func recordHeader(_ header: RecordHeader) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeInteger(header.state.rawValue, endianness: .little)
        buffer.writeInteger(UInt32(header.length), endianness: .little)
        buffer.writeBytes(header.digest.bytes)
        return Array(buffer.readableBytesView)
    }

    private static func stateBytes(_ state: State) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeInteger(state.rawValue, endianness: .little)
        return Array(buffer.readableBytesView)
    }

    static let liveMark = stateBytes(.live)
    static let deadMark = stateBytes(.dead)

    /// A record header, or nil for bytes that are not one (a torn or foreign tail).
    static func recordHeader(decoding bytes: [UInt8]) -> RecordHeader? {
        var buffer = ByteBuffer(bytes: bytes)
        guard bytes.count == recordHeaderSize,
            let state = buffer.readInteger(endianness: .little, as: UInt32.self).flatMap(State.init(rawValue:)),
            let length = buffer.readInteger(endianness: .little, as: UInt32.self), Int(length) <= maximumLength,
            let digest = try? buffer.readDigest("record digest")
        else { return nil }
        return RecordHeader(state: state, length: Int(length), digest: digest)
    }
}
