import MeshCrypto
import NIOCore

/// Something a member says and signs with its identity key (its record, a key rotation): the
/// signature covers a domain string, then every field but the signature.
package protocol SignedStatement {
    static var signingDomain: [UInt8] { get }
    var signingKey: PublicSigningKey { get }
    var signature: [UInt8] { get set }
    func encodeUnsigned(into buffer: inout ByteBuffer)
}

extension SignedStatement {
    package var signedBytes: [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeBytes(Self.signingDomain)
        encodeUnsigned(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// Signed by `authority` (valid only if it holds the statement's signing key: tests sign
    /// with the wrong one on purpose).
    package func signed(by authority: some RecordAuthority) -> Self {
        var copy = self
        copy.signature = authority.sign(signedBytes)
        return copy
    }

    package func hasValidSignature(_ authority: some RecordAuthority) -> Bool {
        authority.isValid(signature: signature, message: signedBytes, signingKey: signingKey)
    }
}
