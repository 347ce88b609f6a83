import MeshCrypto

/// The name a session's founder gave it (PROTOCOL.md §3, "Founding"): the hash of the founder's
/// id and a nonce it drew when it made the session. The nonce travels to every member: what
/// proves the founder is a pairwise frame of its own that carries it, since only the founder's id
/// hashes with it to the id. Carried, not mixed into any key, so that members of a release
/// without it still open every datagram.
package struct FoundingID: Hashable, Sendable, CustomStringConvertible {
    package static let byteCount = 16
    package static let nonceByteCount = 16
    private static let context = Array("groupmesh founding v1".utf8)

    package let bytes: [UInt8]

    package init?(bytes: some Collection<UInt8>) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = Array(bytes)
    }

    package init?(hex: some StringProtocol) {
        guard let bytes = Hex.decode(hex) else { return nil }
        self.init(bytes: bytes)
    }

    /// The id `founder` names a session by with `nonce`.
    package init(founder: NodeID, nonce: [UInt8]) {
        bytes = Array(SHA256Digest.hashing(Self.context + founder.bytes + nonce).bytes.prefix(Self.byteCount))
    }

    /// Whether `nonce` proves that `founder` made this id.
    package func isMade(by founder: NodeID, nonce: [UInt8]) -> Bool {
        nonce.count == Self.nonceByteCount && FoundingID(founder: founder, nonce: nonce) == self
    }

    package var hex: String { Hex.encode(bytes) }
    package var description: String { hex }
}

/// What a node knows of its session's founding: the id, who founded it once that member proved
/// it to us, and the proof when we did.
package struct SessionFounding: Sendable, Equatable {
    package var id: FoundingID
    /// The member whose nonce hashes with its id to `id`: ourselves when we founded the session;
    /// nil until the founder's own version frame reached us.
    package var founder: NodeID?
    /// Ours, when we founded the session: our version frames carry it.
    package var nonce: [UInt8]?

    package init(id: FoundingID, founder: NodeID? = nil, nonce: [UInt8]? = nil) {
        self.id = id
        self.founder = founder
        self.nonce = nonce
    }

    /// The session we found with `nonce`.
    package init(foundedBy founder: NodeID, nonce: [UInt8]) {
        self.init(id: FoundingID(founder: founder, nonce: nonce), founder: founder, nonce: nonce)
    }
}
