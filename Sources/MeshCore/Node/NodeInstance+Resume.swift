import MeshCrypto

/// Careful resume as the node applies it: what a fetch reached over its holders' paths is saved
/// when it ends, and offered to the downlink when a fetch over the same paths starts.
extension NodeInstance {
    /// The paths of the holders a fetch of `id` asks: each one's address, relay and boot, so that
    /// a path that changed finds nothing saved.
    func resumeKey(of id: SHA256Digest) -> SavedPathCapacities.Key {
        SavedPathCapacities.Key(
            holders(of: id).filter { $0 != localID }.map { member in
                let path = links.paths.paths[member]
                return .init(member: member, address: path?.learned, relay: path?.relay, boot: path?.boot ?? 0)
            })
    }

    /// A fetch's chunks are about to be asked: the downlink hears what is known of its holders'
    /// paths (used if the fetch starts from idle), and the longest round trip membership probes
    /// measured to them.
    mutating func offerResume(for id: SHA256Digest, now: MeshInstant) {
        let lifetime = settings.downlink.resumeLifetime
        receiving.savedPaths.forgetExpired(lifetime: lifetime, now: now)
        let key = resumeKey(of: id)
        let probed = key.paths.compactMap { membership.members[$0.member]?.rtt }.max()
        receiving.downlink.offerResume(
            receiving.savedPaths.capacity(for: key, lifetime: lifetime, now: now), probedRoundTrip: probed,
            now: now)
    }

    /// A fetch ended well: what the downlink reached is saved for its holders' paths.
    mutating func saveCapacity(of id: SHA256Digest, now: MeshInstant) {
        guard let capacity = receiving.downlink.capacityToSave(now: now) else { return }
        receiving.savedPaths.save(capacity, for: resumeKey(of: id))
    }
}
