import MeshCrypto

/// Which of two rotations out of the same epoch stands when each removes the other's author
/// (two members removing each other at once). Every member must pick the same one, and the
/// author of either must not be able to pick it.
///
/// Release 0.9.0 takes the smaller new session id, which the author chooses: a member just
/// removed could draw secrets until its answer removing its remover came first. So an author
/// draws its new secret until the session id carries a rank it cannot choose, fixed by the
/// epoch left and its own id (`rank(leaving:author:)`): the id starts with `zeroBits` zero
/// bits, then the rank's `rankBits`. Such a rotation is *ranked*. A ranked rotation stands
/// over one that is not; of two ranked ones, the smaller session id, which orders them by
/// rank first. Release 0.9.0, comparing the ids alone, picks the same one in nearly every case:
/// a ranked id is smaller than an unranked one of 0.9.0 unless that one also starts with
/// `zeroBits` zero bits (one in 256).
package enum RotationOrder {
    package static let zeroBits = 8
    package static let rankBits = 6
    /// Draws before giving up on a ranked id (2^14 expected): the rotation is then unranked,
    /// which costs it ties only.
    package static let maxDraws = 1 << 20

    /// The rank of a rotation by `author` out of `leaving`: neither the author nor anyone else
    /// chooses it once the epoch left exists (a member's id is fixed when it joins).
    package static func rank(leaving: SessionID, author: NodeID) -> UInt64 {
        var bytes = Array("groupmesh rotation rank v1".utf8)
        withUnsafeBytes(of: leaving.value.bigEndian) { bytes += $0 }
        bytes += author.bytes
        let digest = SHA256Digest.hashing(bytes).bytes
        return UInt64(digest[0] >> (8 - rankBits))
    }

    /// Whether `session`, opened by `author` out of `leaving`, carries the author's rank.
    package static func isRanked(_ session: SessionID, leaving: SessionID, author: NodeID) -> Bool {
        session.value >> (64 - zeroBits - rankBits) == rank(leaving: leaving, author: author)
    }

    package static func isRanked(_ rotation: KeyRotation) -> Bool {
        isRanked(rotation.nextSession, leaving: rotation.previousSession, author: rotation.author)
    }

    /// Whether `rotation` stands over `other`, both out of the same epoch: not one whose author
    /// the other removes (unless each removes the other's); else a ranked one over one that is
    /// not; else the smaller new session id.
    package static func wins(_ rotation: KeyRotation, over other: KeyRotation) -> Bool {
        let removedByOther = other.removed.contains(rotation.author)
        let removesOther = rotation.removed.contains(other.author)
        if removedByOther != removesOther { return removesOther }
        let ranked = isRanked(rotation), otherRanked = isRanked(other)
        if ranked != otherRanked { return ranked }
        return rotation.nextSession.value < other.nextSession.value
    }

    /// A new secret whose session id carries `author`'s rank out of `leaving`, drawn from
    /// `draw` (the core's seeded randomness).
    package static func rankedSecret(
        leaving: SessionID, author: NodeID, draw: () -> SessionSecret
    ) -> SessionSecret {
        let wanted = rank(leaving: leaving, author: author)
        var secret = draw()
        var draws = 1
        while secret.sessionID.value >> (64 - zeroBits - rankBits) != wanted, draws < maxDraws {
            secret = draw()
            draws += 1
        }
        return secret
    }
}
