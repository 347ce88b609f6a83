import MeshCrypto

/// Signs the records this node originates and checks the signatures of others'. Injected so
/// large simulations can swap Ed25519 for a cheap stand-in; nodes always use `Ed25519Authority`.
package protocol RecordAuthority: Sendable {
    var signingKey: PublicSigningKey { get }
    func sign(_ message: [UInt8]) -> [UInt8]
    func isValid(signature: [UInt8], message: [UInt8], signingKey: PublicSigningKey) -> Bool
}

package struct Ed25519Authority: RecordAuthority {
    package let identity: NodeIdentity

    package init(identity: NodeIdentity) { self.identity = identity }

    package var signingKey: PublicSigningKey { identity.publicKey }

    package func sign(_ message: [UInt8]) -> [UInt8] { identity.sign(message) }

    package func isValid(signature: [UInt8], message: [UInt8], signingKey: PublicSigningKey) -> Bool {
        signingKey.isValidSignature(signature, for: message)
    }
}
