import Foundation
import MeshCore
import MeshCrypto

/// An attachment of the session (GroupSessionJournal's Attachment): same bytes, same id.
public struct Attachment: Hashable, Sendable, Identifiable {
    /// SHA-256 of the manifest, 64 lowercase hex characters.
    public let id: String
    public let size: UInt64
    let digest: SHA256Digest

    init(_ entry: AttachmentEntry) {
        id = entry.id.hex
        size = entry.size
        digest = entry.id
    }
}

/// Large data shared with the whole session, the equivalent of GroupSessionJournal: every
/// member observes the same set of attachments, and any member can load any of them; an
/// attachment outlives its uploader while some member holds it.
///
/// ```swift
/// let journal = Journal(session: session)
/// let attachment = try await journal.add(contentsOf: fileURL, metadata: Data(#"{"title":"x"}"#.utf8))
/// for await attachments in await journal.attachments { … }
/// let bytes = try await journal.load(attachment)
/// ```
public final class Journal: Sendable {
    public let session: MeshSession

    public init(session: MeshSession) {
        self.session = session
    }

    /// Adds bytes; the returned attachment is in every member's set once they hear of it.
    public func add(_ data: Data, metadata: Data = Data()) async throws -> Attachment {
        Attachment(try await session.node.addAttachment(.bytes(Array(data)), metadata: Array(metadata)))
    }

    /// Adds a file, streamed: it is chunked and hashed without being loaded whole.
    public func add(contentsOf url: URL, metadata: Data = Data()) async throws -> Attachment {
        Attachment(try await session.node.addAttachment(.file(path: url.path), metadata: Array(metadata)))
    }

    public func remove(_ attachment: Attachment) async throws {
        try await session.node.removeAttachment(attachment.digest)
    }

    /// The whole attachment set, now and after every change.
    public var attachments: AsyncStream<[Attachment]> {
        get async {
            let updates = await session.node.attachmentUpdates()
            return AsyncStream { continuation in
                let task = Task {
                    for await entries in updates { continuation.yield(entries.map(Attachment.init)) }
                    continuation.finish()
                }
                continuation.onTermination = { _ in task.cancel() }
            }
        }
    }

    /// The attachment's bytes, fetched from the members that hold them if needed.
    public func load(_ attachment: Attachment) async throws -> Data {
        Data(try await session.node.loadAttachment(attachment.digest, into: .memory) ?? [])
    }

    /// Writes the attachment to `url`, streamed chunk by chunk.
    public func load(_ attachment: Attachment, to url: URL) async throws {
        _ = try await session.node.loadAttachment(attachment.digest, into: .file(path: url.path))
    }

    /// The metadata of the latest add of the attachment.
    /// Adds bytes with metadata of any `Encodable` type (stored as JSON; GroupSessionJournal's
    /// typed metadata).
    public func add<Metadata: Encodable>(_ data: Data, metadata: Metadata) async throws -> Attachment {
        try await add(data, metadata: try Self.encode(metadata))
    }

    /// Adds a file, streamed, with metadata of any `Encodable` type (stored as JSON).
    public func add<Metadata: Encodable>(contentsOf url: URL, metadata: Metadata) async throws -> Attachment {
        try await add(contentsOf: url, metadata: try Self.encode(metadata))
    }

    public func loadMetadata(of attachment: Attachment) async throws -> Data {
        guard let entry = await session.node.attachmentEntries.first(where: { $0.id == attachment.digest }) else {
            throw GroupMeshError.unknownAttachment(attachment.id)
        }
        return Data(entry.metadata)
    }

    /// The metadata decoded as `type`; metadata that is not one (another member chose it) throws
    /// `GroupMeshError.metadataType`, never a value made up.
    public func loadMetadata<Metadata: Decodable>(_ type: Metadata.Type, of attachment: Attachment) async throws -> Metadata {
        let bytes = try await loadMetadata(of: attachment)
        do {
            return try JSONDecoder().decode(type, from: bytes)
        } catch {
            throw GroupMeshError.metadataType(attachment: attachment.id, type: String(describing: type))
        }
    }

    private static func encode(_ metadata: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(metadata)
    }
}
