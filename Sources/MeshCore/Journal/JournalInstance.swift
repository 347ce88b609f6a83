import MeshCrypto

/// Keeps this node's journal in step with the others (pure; the shell sends the messages over
/// the reliable messenger and stores what changed). Local operations go to every member at
/// once; a member that joins, and one random member every `syncInterval`, get our operation ids
/// and answer with what we lack (anti-entropy), so every member ends with the same operations.
/// It also tracks which member holds which attachment whole.
package struct JournalInstance: Sendable {
    package enum Directive: Sendable, Equatable {
        case send(to: NodeID, JournalMessage)
        /// New operations were applied: the attachment set may have changed.
        case applied([JournalOperation])
        /// Who holds what changed.
        case holdersChanged
    }

    package private(set) var state = JournalState()
    private let authority: any RecordAuthority
    package let syncInterval: Duration
    private var members: [NodeID] = []
    private var random: SplitMix64
    private var nextSyncAt: MeshInstant
    /// Attachments each member said it holds whole.
    private var holdings: [NodeID: Set<SHA256Digest>] = [:]
    /// What members declared dead held. One that refutes with the same boot still holds it, and
    /// says nothing again: it never knew it was thought dead.
    private var departedHoldings: [NodeID: Set<SHA256Digest>] = [:]
    private var ownHoldings: Set<SHA256Digest> = []

    package init(authority: some RecordAuthority, syncInterval: Duration = .seconds(10), seed: UInt64, now: MeshInstant)
    {
        self.authority = authority
        self.syncInterval = syncInterval
        self.random = SplitMix64(seed: seed)
        self.nextSyncAt = now + syncInterval
    }

    package var localID: NodeID { authority.signingKey.nodeID }
    package var nextDeadline: MeshInstant { nextSyncAt }

    /// Loads operations stored earlier (they were valid when stored; they are checked again).
    package mutating func restore(_ operations: [JournalOperation]) {
        for operation in operations { state.apply(operation, authority: authority) }
    }

    // MARK: members

    /// A member joined, or came back: `sameBoot` when it is the process we knew (a false death),
    /// whose holdings stand as they were.
    package mutating func memberJoined(_ id: NodeID, sameBoot: Bool = false) -> [Directive] {
        guard id != localID, !members.contains(id) else { return [] }
        members.append(id)
        members.sort()
        var directives: [Directive] = [
            .send(to: id, .have(state.operationIDs)), .send(to: id, .holding(ownHoldings.sorted())),
        ]
        if let held = departedHoldings.removeValue(forKey: id), sameBoot, !held.isEmpty, holdings[id] == nil {
            holdings[id] = held
            directives.append(.holdersChanged)
        }
        return directives
    }

    package mutating func memberLeft(_ id: NodeID) -> [Directive] {
        members.removeAll { $0 == id }
        guard let held = holdings.removeValue(forKey: id) else { return [] }
        departedHoldings[id] = held
        return [.holdersChanged]
    }

    /// A member forgotten for good: nothing of it is kept.
    package mutating func memberForgotten(_ id: NodeID) {
        departedHoldings[id] = nil
        holdings[id] = nil
    }

    /// Members known to hold `attachment` whole (this node included).
    package func holders(of attachment: SHA256Digest) -> [NodeID] {
        var result = holdings.filter { $0.value.contains(attachment) }.map(\.key)
        if ownHoldings.contains(attachment) { result.append(localID) }
        return result.sorted()
    }

    /// Tells everyone which attachments we now hold whole.
    package mutating func setHoldings(_ attachments: Set<SHA256Digest>) -> [Directive] {
        guard attachments != ownHoldings else { return [] }
        ownHoldings = attachments
        let message = JournalMessage.holding(attachments.sorted())
        return members.map { .send(to: $0, message) } + [.holdersChanged]
    }

    // MARK: local changes

    // A local change is made in two steps, so that the shell can store the operation before
    // anything (here or at a member) sees it: `prepare…` signs it without applying it, and
    // `publish` applies and sends it. A change whose storing fails is then never seen at all.

    /// An add by this node, signed, not yet applied.
    package func prepareAdd(
        _ id: AttachmentID, content: SHA256Digest, size: UInt64, chunkCount: Int,
        metadata: [UInt8]
    ) -> JournalOperation {
        state.makeAdd(
            id, content: content, size: size, chunkCount: chunkCount, metadata: metadata, authority: authority)
    }

    /// A remove by this node of every add of the attachment seen so far, not yet applied; nil
    /// when the attachment is not in the journal.
    package func prepareRemove(_ attachment: AttachmentID) -> JournalOperation? {
        state.makeRemove(attachment, authority: authority)
    }

    /// Applies a prepared local operation and sends it to every member.
    package mutating func publish(_ operation: JournalOperation) -> [Directive] {
        state.apply(operation, authority: authority)
        return members.map { .send(to: $0, .operations([operation])) } + [.applied([operation])]
    }

    package mutating func add(
        _ id: AttachmentID, content: SHA256Digest, size: UInt64, chunkCount: Int,
        metadata: [UInt8]
    ) -> [Directive] {
        publish(prepareAdd(id, content: content, size: size, chunkCount: chunkCount, metadata: metadata))
    }

    /// Nil when the attachment is not in the journal.
    package mutating func remove(_ attachment: AttachmentID) -> [Directive]? {
        prepareRemove(attachment).map { publish($0) }
    }

    // MARK: input

    package mutating func onMessage(_ message: JournalMessage, from peer: NodeID) -> [Directive] {
        switch message {
        case let .operations(operations):
            let applied = operations.filter { state.apply($0, authority: authority) }
            return applied.isEmpty ? [] : [.applied(applied)]
        case let .have(ids):
            var out: [Directive] = []
            let theirs = Set(ids)
            let extra = state.operationIDs.filter { !theirs.contains($0) }.compactMap(state.operation)
            out += batches(extra).map { .send(to: peer, .operations($0)) }
            let lacking = state.missing(ids)
            if !lacking.isEmpty { out.append(.send(to: peer, .want(lacking))) }
            return out
        case let .want(ids):
            return batches(ids.compactMap(state.operation)).map { .send(to: peer, .operations($0)) }
        case let .holding(digests):
            let set = Set(digests)
            guard holdings[peer] != set else { return [] }
            holdings[peer] = set
            return [.holdersChanged]
        case .chunkRequest, .chunk, .noChunk, .chunks, .replicate, .end:
            return []  // the shell's transfer handles chunks
        }
    }

    package mutating func onTick(now: MeshInstant) -> [Directive] {
        guard now >= nextSyncAt else { return [] }
        nextSyncAt = now + syncInterval
        guard !members.isEmpty else { return [] }
        let peer = members[Int(random.next() % UInt64(members.count))]
        return [.send(to: peer, .have(state.operationIDs)), .send(to: peer, .holding(ownHoldings.sorted()))]
    }

    /// Splits operations into messages that stay under the messenger's size limit.
    private func batches(_ operations: [JournalOperation]) -> [[JournalOperation]] {
        var result: [[JournalOperation]] = []
        var current: [JournalOperation] = []
        var size = 0
        for operation in operations {
            let cost = 128 + operation.metadata.count + 16 * operation.observedAdds.count
            if size + cost > JournalMessage.operationBudget, !current.isEmpty {
                result.append(current)
                current = []
                size = 0
            }
            current.append(operation)
            size += cost
        }
        if !current.isEmpty { result.append(current) }
        return result
    }
}
