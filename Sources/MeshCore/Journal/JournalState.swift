import MeshCrypto

/// One attachment as the journal shows it.
package struct AttachmentEntry: Sendable, Equatable {
    package var id: AttachmentID
    /// The content's manifest digest: chunks are stored, fetched and held by it.
    package var content: SHA256Digest
    package var size: UInt64
    package var chunkCount: Int
    /// The metadata of the latest add still in force.
    package var metadata: [UInt8]
    package var addedBy: NodeID
    package var clock: UInt64
}

/// The set of attachments as an observed-remove set of signed operations: it converges on
/// every member whatever order the operations arrive in. An attachment is present while some
/// add of it is not covered by a remove that saw it; so a remove wins over the adds it has
/// seen. An add of format 2 has an attachment id of its own, so it is its attachment's only add;
/// adds of format 1 of the same content share one (derived) id, and among them the latest (by
/// Lamport clock, then author) gives the metadata, as before. A content is present while some
/// attachment of it is.
package struct JournalState: Sendable {
    private var operations: [OperationID: JournalOperation] = [:]
    /// Adds per attachment, and the adds some remove has covered.
    private var adds: [AttachmentID: Set<OperationID>] = [:]
    private var removed: Set<OperationID> = []
    /// The attachments of each content (present or not), and each attachment's content: the
    /// content of an id is fixed by its first add seen (another claiming a different content
    /// for the same id is refused).
    private var attachmentsOfContent: [SHA256Digest: Set<AttachmentID>] = [:]
    private var contentOf: [AttachmentID: SHA256Digest] = [:]
    package private(set) var clock: UInt64 = 0

    package init() {}

    package var operationCount: Int { operations.count }

    /// Every operation id, sorted: what anti-entropy compares.
    package var operationIDs: [OperationID] { operations.keys.sorted() }

    package func operation(_ id: OperationID) -> JournalOperation? { operations[id] }

    /// All operations in a stable order (by clock, then id), for persistence and transfer.
    package var allOperations: [JournalOperation] {
        operations.values.sorted { ($0.clock, $0.id) < ($1.clock, $1.id) }
    }

    /// Applies an operation; returns true when it is new and valid (and so may change the set).
    @discardableResult
    package mutating func apply(_ operation: JournalOperation, authority: some RecordAuthority) -> Bool {
        let id = operation.id
        guard operations[id] == nil, operation.isValid(authority) else { return false }
        if operation.kind == .add, let content = contentOf[operation.attachmentID], content != operation.attachment {
            return false  // an id already naming other bytes: a forger's, or a collision
        }
        operations[id] = operation
        clock = max(clock, operation.clock)
        switch operation.kind {
        case .add:
            adds[operation.attachmentID, default: []].insert(id)
            contentOf[operation.attachmentID] = operation.attachment
            attachmentsOfContent[operation.attachment, default: []].insert(operation.attachmentID)
        case .remove:
            removed.formUnion(operation.observedAdds)
        }
        return true
    }

    private func liveAdds(of attachment: AttachmentID) -> [OperationID] {
        (adds[attachment] ?? []).subtracting(removed).sorted()
    }

    /// By ids alone: no operation is looked at, let alone hashed.
    package func isPresent(_ attachment: AttachmentID) -> Bool {
        !(adds[attachment] ?? []).isSubset(of: removed)
    }

    /// Whether some present attachment has this content (its chunks are wanted).
    package func hasContent(_ content: SHA256Digest) -> Bool {
        attachmentsOfContent[content]?.contains(where: isPresent) ?? false
    }

    /// The ids of the attachments present, sorted.
    package var presentIDs: [AttachmentID] {
        adds.keys.sorted().filter(isPresent)
    }

    /// The contents of the present attachments, sorted, each once: what replication walks.
    package var presentContents: [SHA256Digest] {
        attachmentsOfContent.keys.sorted().filter(hasContent)
    }

    /// The present attachments of a content.
    package func attachments(withContent content: SHA256Digest) -> [AttachmentEntry] {
        (attachmentsOfContent[content] ?? []).sorted().compactMap(entry)
    }

    /// A present attachment of the content (they all give the same size and chunk count).
    package func entry(content: SHA256Digest) -> AttachmentEntry? {
        (attachmentsOfContent[content] ?? []).sorted().lazy.compactMap(entry).first
    }

    package func entry(_ attachment: AttachmentID) -> AttachmentEntry? {
        // The order's keys once per add (the author's id is a hash of its key).
        let candidates = liveAdds(of: attachment).compactMap { id in
            operations[id].map { operation in (operation: operation, author: operation.authorID, id: id) }
        }
        guard
            let latest = candidates.max(by: {
                ($0.operation.clock, $0.author, $0.id) < ($1.operation.clock, $1.author, $1.id)
            })
        else { return nil }
        let operation = latest.operation
        return AttachmentEntry(
            id: attachment, content: operation.attachment, size: operation.size, chunkCount: Int(operation.chunkCount),
            metadata: operation.metadata, addedBy: latest.author, clock: operation.clock)
    }

    /// The attachments present, by id.
    package var attachments: [AttachmentEntry] {
        adds.keys.sorted().compactMap(entry)
    }

    /// The clock of this node's next operation. Saturates: any member may sign an operation at
    /// `UInt64.max`, and `clock + 1` would then trap on every later add or remove.
    private var nextClock: UInt64 { clock == .max ? .max : clock + 1 }

    /// An add by this node of `content` as the new attachment `id`, signed, not yet applied.
    package func makeAdd(
        _ id: AttachmentID, content: SHA256Digest, size: UInt64, chunkCount: Int, metadata: [UInt8],
        authority: some RecordAuthority
    ) -> JournalOperation {
        JournalOperation(
            kind: .add, attachmentID: id, attachment: content, author: authority.signingKey, clock: nextClock,
            size: size, chunkCount: UInt32(chunkCount), metadata: metadata
        ).signed(by: authority)
    }

    /// A remove by this node covering every add of the attachment it has seen; nil if absent.
    package func makeRemove(_ attachment: AttachmentID, authority: some RecordAuthority) -> JournalOperation? {
        let live = liveAdds(of: attachment)
        guard !live.isEmpty, let content = contentOf[attachment] else { return nil }
        return JournalOperation(
            kind: .remove, attachmentID: attachment, attachment: content, author: authority.signingKey,
            clock: nextClock,
            observedAdds: Array(live.prefix(JournalOperation.maxObservedAdds))
        ).signed(by: authority)
    }

    /// Of `ids`, those this journal does not have.
    package func missing(_ ids: [OperationID]) -> [OperationID] {
        ids.filter { operations[$0] == nil }
    }
}

private func < (lhs: (UInt64, NodeID, OperationID), rhs: (UInt64, NodeID, OperationID)) -> Bool {
    if lhs.0 != rhs.0 { return lhs.0 < rhs.0 }
    if lhs.1 != rhs.1 { return lhs.1 < rhs.1 }
    return lhs.2 < rhs.2
}

private func < (lhs: (UInt64, OperationID), rhs: (UInt64, OperationID)) -> Bool {
    lhs.0 != rhs.0 ? lhs.0 < rhs.0 : lhs.1 < rhs.1
}
