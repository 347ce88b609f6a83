import Foundation
import MeshCore
import MeshCrypto

/// An attachment of the session (GroupSessionJournal's `Attachment`), as it was when this value
/// was made: its bytes are loaded with `load(Data.self)`, and `journal.attachments` hands out a
/// new value whenever the set or who holds what changes. Equal when the ids are.
public struct Attachment: Hashable, Sendable, Identifiable {
    /// How available it is: whether some live member holds it whole.
    public enum State: String, Sendable {
        /// A live member (maybe this one) holds every chunk: it can be loaded.
        case available
        /// No live member holds it whole, some chunks are held: a holder may come back.
        case partial
        /// No live member is known to hold any of it.
        case unavailable
    }

    /// This attachment's own id (each add makes one), 32 lowercase hex characters.
    public let id: String
    /// SHA-256 of its content's manifest, 64 lowercase hex characters: the same bytes added
    /// twice are two attachments with one content, stored and sent once.
    public let contentHash: String
    public let size: UInt64
    public let state: State
    /// The live members holding every chunk, this one included when it does.
    public let holders: Set<Participant>
    let attachmentID: AttachmentID
    let digest: SHA256Digest
    let node: MeshNode

    init(_ entry: AttachmentEntry, availability: AttachmentAvailability, holders: Set<Participant>, node: MeshNode) {
        id = entry.id.hex
        contentHash = entry.content.hex
        size = entry.size
        attachmentID = entry.id
        digest = entry.content
        state = State(rawValue: availability.state.rawValue) ?? .unavailable
        self.holders = holders
        self.node = node
    }

    public static func == (lhs: Attachment, rhs: Attachment) -> Bool { lhs.id == rhs.id }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }

    /// The bytes (GroupSessionJournal's `load(Data.self)`), fetched from the members that
    /// hold them when they are not all here.
    public func load(_ type: Data.Type = Data.self) async throws(GroupMeshError) -> Data {
        Data(try await node.loadAttachment(digest, into: .memory) ?? [])
    }

    /// Writes the bytes to `url`, streamed chunk by chunk (never held whole in memory).
    public func load(to url: URL) async throws(GroupMeshError) {
        _ = try await node.loadAttachment(digest, into: .file(path: url.path))
    }

    /// The metadata of the latest add, as bytes (JSON when added with a typed value).
    public func loadMetadata() async throws(GroupMeshError) -> Data {
        guard let entry = await node.attachmentEntries.first(where: { $0.id == attachmentID }) else {
            throw .unknownAttachment(id)
        }
        return Data(entry.metadata)
    }

    /// The metadata decoded as `type` (GroupSessionJournal's `loadMetadata(of:)`): `Data` is the
    /// bytes as they were added, any other type is decoded from JSON. Metadata that is not one
    /// (another member chose it) throws `GroupMeshError.metadataType`, never a value made up.
    public func loadMetadata<Metadata: Decodable>(of type: Metadata.Type) async throws(GroupMeshError) -> Metadata {
        try Journal.decode(type, from: try await loadMetadata(), attachment: id)
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
        let entry = try await session.node.addAttachment(.bytes(Array(data)), metadata: Array(metadata))
        return await session.node.attachment(entry)
    }

    /// Adds a file, streamed: it is chunked and hashed without being loaded whole.
    public func add(contentsOf url: URL, metadata: Data = Data()) async throws -> Attachment {
        let entry = try await session.node.addAttachment(.file(path: url.path), metadata: Array(metadata))
        return await session.node.attachment(entry)
    }

    public func remove(_ attachment: Attachment) async throws {
        try await session.node.removeAttachment(attachment.attachmentID)
    }

    /// The whole attachment set, now and after every change (of the set, or of who holds
    /// what); finishes when the session is invalidated.
    public var attachments: AsyncStream<[Attachment]> {
        get async { await session.node.attachmentUpdates() }
    }

    /// Waits until at least `count` live members other than this one hold the attachment
    /// whole (so it outlives this member), and returns it as it is then. Throws
    /// `unknownAttachment` when it is removed first, `notRunning` when the session ends first.
    @discardableResult
    public func waitForHolders(of attachment: Attachment, atLeast count: Int) async throws(GroupMeshError) -> Attachment
    {
        let me = await session.localParticipant
        for await list in await attachments {
            guard let current = list.first(where: { $0.id == attachment.id }) else {
                throw .unknownAttachment(attachment.id)
            }
            if current.holders.subtracting([me]).count >= count { return current }
        }
        throw .notRunning
    }

    /// The attachment's bytes, fetched from the members that hold them if needed.
    public func load(_ attachment: Attachment) async throws -> Data {
        Data(try await session.node.loadAttachment(attachment.digest, into: .memory) ?? [])
    }

    /// Writes the attachment to `url`, streamed chunk by chunk.
    public func load(_ attachment: Attachment, to url: URL) async throws {
        _ = try await session.node.loadAttachment(attachment.digest, into: .file(path: url.path))
    }

    /// Adds bytes with metadata of any `Encodable` type (stored as JSON; GroupSessionJournal's
    /// typed metadata).
    public func add<Metadata: Encodable>(_ data: Data, metadata: Metadata) async throws -> Attachment {
        try await add(data, metadata: try Self.encode(metadata))
    }

    /// Adds a file, streamed, with metadata of any `Encodable` type (stored as JSON).
    public func add<Metadata: Encodable>(contentsOf url: URL, metadata: Metadata) async throws -> Attachment {
        try await add(contentsOf: url, metadata: try Self.encode(metadata))
    }

    /// The metadata of the latest add of the attachment, as bytes.
    public func loadMetadata(of attachment: Attachment) async throws -> Data {
        guard let entry = await session.node.attachmentEntries.first(where: { $0.id == attachment.attachmentID }) else {
            throw GroupMeshError.unknownAttachment(attachment.id)
        }
        return Data(entry.metadata)
    }

    /// The metadata decoded as `type`; metadata that is not one (another member chose it) throws
    /// `GroupMeshError.metadataType`, never a value made up.
    public func loadMetadata<Metadata: Decodable>(
        _ type: Metadata.Type, of attachment: Attachment
    ) async throws -> Metadata {
        try Self.decode(type, from: try await loadMetadata(of: attachment), attachment: attachment.id)
    }

    /// Metadata given as `Data` is kept as those bytes and read back as them, in generic code too
    /// (where `Data` would otherwise go through JSON as a base64 string).
    static func decode<Metadata: Decodable>(
        _ type: Metadata.Type, from bytes: Data,
        attachment: String
    ) throws(GroupMeshError) -> Metadata {
        if let bytes = bytes as? Metadata { return bytes }
        do {
            return try JSONDecoder().decode(type, from: bytes)
        } catch {
            throw .metadataType(attachment: attachment, type: String(describing: type))
        }
    }

    private static func encode(_ metadata: some Encodable) throws -> Data {
        if let bytes = metadata as? Data { return bytes }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(metadata)
    }
}
