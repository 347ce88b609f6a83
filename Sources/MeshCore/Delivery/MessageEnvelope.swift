/// A message as the messenger carries it: a type tag, so that `messages(of:)` for one type never
/// sees another's, and the body. `tagLength (1) | tag (UTF-8, ≤ 255 bytes) | body`.
package struct MessageEnvelope: Sendable, Equatable {
    package static let maxTagBytes = 255

    package var type: String
    package var body: [UInt8]

    package init(type: String, body: [UInt8]) {
        self.type = type
        self.body = body
    }

    package var encoded: [UInt8] {
        let tag = Array(type.utf8.prefix(Self.maxTagBytes))
        return [UInt8(tag.count)] + tag + body
    }

    package init?(decoding bytes: [UInt8]) {
        guard let length = bytes.first, bytes.count >= 1 + Int(length) else { return nil }
        type = String(decoding: bytes[1..<(1 + Int(length))], as: UTF8.self)
        body = Array(bytes[(1 + Int(length))...])
    }
}
