import MeshCore
import MeshCrypto
import MeshTestKit

/// Shared helpers for the journal tests (Manifest, JournalState, JournalMessage,
/// JournalInstance, convergence in simulation).
enum JournalFixtures {
    /// A real Ed25519 authority from a one-byte seed, for tests about signatures.
    static func ed25519(_ seed: UInt8) -> Ed25519Authority {
        // safe: 32-byte seed
        Ed25519Authority(identity: try! NodeIdentity(seed: [UInt8](repeating: seed, count: 32)))
    }

    /// A distinct, stable attachment id.
    static func attachment(_ n: Int) -> SHA256Digest {
        SHA256Digest.hashing(Array("attachment \(n)".utf8))
    }

    /// The manifest of `bytes` cut into `chunkSize` chunks.
    static func manifest(of bytes: [UInt8], chunkSize: Int) -> Manifest {
        let chunks = stride(from: 0, to: bytes.count, by: chunkSize).map {
            SHA256Digest.hashing(Array(bytes[$0..<min($0 + chunkSize, bytes.count)]))
        }
        return Manifest(size: UInt64(bytes.count), chunkSize: chunkSize, chunks: chunks)
    }

    /// Every permutation of `items` (Heap's algorithm); keep `items` small.
    static func permutations<T>(_ items: [T]) -> [[T]] {
        var result: [[T]] = []
        var array = items
        func generate(_ k: Int) {
            if k <= 1 { result.append(array); return }
            generate(k - 1)
            for i in 0..<(k - 1) {
                array.swapAt(k % 2 == 0 ? i : 0, k - 1)
                generate(k - 1)
            }
        }
        generate(array.count)
        return result
    }
}

/// A `RecordAuthority` that claims one key and signs with another: what a member trying to
/// impersonate another would produce. Its operations must be rejected everywhere.
struct ImpersonatingAuthority: RecordAuthority {
    let signingKey: PublicSigningKey
    let signer: Ed25519Authority

    func sign(_ message: [UInt8]) -> [UInt8] { signer.sign(message) }

    func isValid(signature: [UInt8], message: [UInt8], signingKey: PublicSigningKey) -> Bool {
        signingKey.isValidSignature(signature, for: message)
    }
}

extension JournalState {
    /// Applies operations in order; returns how many were accepted.
    @discardableResult
    mutating func applyAll(_ operations: [JournalOperation], authority: some RecordAuthority) -> Int {
        operations.reduce(0) { $0 + (apply($1, authority: authority) ? 1 : 0) }
    }

    /// The contents of the attachments present, in the order of their ids.
    var presentDigests: [SHA256Digest] { attachments.map(\.content) }
}

// The journal tests speak of "attachment N" by a digest, as before attachments had ids of their
// own: these name the attachment whose id derives from that digest (every add of "attachment N"
// is then the same attachment, as the observed-remove tests need), with the digest as content.
extension AttachmentID {
    static func of(_ content: SHA256Digest) -> AttachmentID { AttachmentID(legacyContent: content) }
}

extension JournalState {
    func makeAdd(
        _ attachment: SHA256Digest, size: UInt64, chunkCount: Int, metadata: [UInt8],
        authority: some RecordAuthority
    ) -> JournalOperation {
        makeAdd(
            .of(attachment), content: attachment, size: size, chunkCount: chunkCount, metadata: metadata,
            authority: authority)
    }

    func makeRemove(_ attachment: SHA256Digest, authority: some RecordAuthority) -> JournalOperation? {
        makeRemove(.of(attachment), authority: authority)
    }

    func isPresent(_ attachment: SHA256Digest) -> Bool { isPresent(.of(attachment)) }
    func entry(_ attachment: SHA256Digest) -> AttachmentEntry? { entry(.of(attachment)) }
}

extension JournalInstance {
    mutating func add(_ attachment: SHA256Digest, size: UInt64, chunkCount: Int, metadata: [UInt8]) -> [Directive] {
        add(.of(attachment), content: attachment, size: size, chunkCount: chunkCount, metadata: metadata)
    }

    mutating func remove(_ attachment: SHA256Digest) -> [Directive]? { remove(.of(attachment)) }
    func prepareAdd(_ attachment: SHA256Digest, size: UInt64, chunkCount: Int, metadata: [UInt8]) -> JournalOperation {
        prepareAdd(.of(attachment), content: attachment, size: size, chunkCount: chunkCount, metadata: metadata)
    }
    func prepareRemove(_ attachment: SHA256Digest) -> JournalOperation? { prepareRemove(.of(attachment)) }
}

extension JournalOperation {
    /// Format 2, the attachment's id derived from `attachment` (as `JournalState.makeAdd` above).
    init(
        kind: Kind, attachment: SHA256Digest, author: PublicSigningKey, clock: UInt64, size: UInt64 = 0,
        chunkCount: UInt32 = 0, metadata: [UInt8] = [], observedAdds: [OperationID] = [], signature: [UInt8] = []
    ) {
        self.init(
            kind: kind, attachmentID: .of(attachment), attachment: attachment, author: author, clock: clock,
            size: size, chunkCount: chunkCount, metadata: metadata, observedAdds: observedAdds, signature: signature)
    }
}
