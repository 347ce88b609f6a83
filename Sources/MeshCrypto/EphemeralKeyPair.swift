import CSodium

/// A node's per-boot X25519 key pair (crypto_kx). Its public half travels in the node's
/// signed membership record; a restart makes a new one, so old traffic keys die with the boot.
package struct EphemeralKeyPair: Sendable {
    package static let byteCount = 32
    package let publicKey: [UInt8]
    fileprivate let secretKey: [UInt8]

    package static func generate() -> EphemeralKeyPair {
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: Int(crypto_kx_PUBLICKEYBYTES))
        var sk = [UInt8](repeating: 0, count: Int(crypto_kx_SECRETKEYBYTES))
        crypto_kx_keypair(&pk, &sk)
        return EphemeralKeyPair(publicKey: pk, secretKey: sk)
    }

    /// Deterministic key pair, for simulations and known-answer tests.
    package init(seed: [UInt8]) throws(MeshCryptoError) {
        guard seed.count == Int(crypto_kx_SEEDBYTES) else {
            throw .invalidKeyLength(what: "kx seed", expected: Int(crypto_kx_SEEDBYTES), actual: seed.count)
        }
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: Int(crypto_kx_PUBLICKEYBYTES))
        var sk = [UInt8](repeating: 0, count: Int(crypto_kx_SECRETKEYBYTES))
        crypto_kx_seed_keypair(&pk, &sk, seed)
        self.init(publicKey: pk, secretKey: sk)
    }

    private init(publicKey: [UInt8], secretKey: [UInt8]) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}

/// The two traffic keys between this node and one peer for the current pair of boots:
/// one to seal what we send, one to open what we receive.
package struct PairwiseKeys: Sendable {
    package let sending: PacketSealer
    package let receiving: PacketSealer

    /// Both sides compute the same pair, mirrored: the side with the smaller ephemeral public
    /// key plays crypto_kx's client. Each kx key is then bound to the session with keyed BLAKE2b,
    /// so a peer's ephemeral key from another session yields nothing usable here.
    /// Returns nil when the peer's public key is malformed or a low-order point.
    package static func derive(
        session: SessionSecret, local: EphemeralKeyPair, peerPublicKey: [UInt8],
        purpose: KeyPurpose = .pairwiseBinding
    ) -> PairwiseKeys? {
        Sodium.ensureInitialized()
        guard peerPublicKey.count == EphemeralKeyPair.byteCount, peerPublicKey != local.publicKey else { return nil }
        var rx = [UInt8](repeating: 0, count: Int(crypto_kx_SESSIONKEYBYTES))
        var tx = [UInt8](repeating: 0, count: Int(crypto_kx_SESSIONKEYBYTES))
        let isClient = local.publicKey.lexicographicallyPrecedes(peerPublicKey)
        let status =
            isClient
            ? crypto_kx_client_session_keys(&rx, &tx, local.publicKey, local.secretKey, peerPublicKey)
            : crypto_kx_server_session_keys(&rx, &tx, local.publicKey, local.secretKey, peerPublicKey)
        guard status == 0 else { return nil }
        let binding = session.key(for: purpose)
        return PairwiseKeys(
            sending: PacketSealer(unchecked: bind(tx, with: binding)),
            receiving: PacketSealer(unchecked: bind(rx, with: binding)))
    }

    private static func bind(_ key: [UInt8], with binding: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: PacketSealer.keyByteCount)
        crypto_generichash(&out, out.count, key, UInt64(key.count), binding, binding.count)
        return out
    }
}
