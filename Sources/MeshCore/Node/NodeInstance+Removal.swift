import MeshCrypto

/// Removing members (PROTOCOL.md §3 "Introductions", §7): a rotation that names them, stored
/// before it is entered; more than one rotation names go in rotations that follow one another.
extension NodeInstance {
    /// Removing a member, with the members it introduced if the user says so (PROTOCOL.md §3,
    /// "Introductions"): the new epoch is stored before anything changes (a removal that is not
    /// on disk is not made), then entered and handed to every live member.
    mutating func beginRemoval(
        of id: NodeID, introduced policy: IntroducedMembers, request: RequestID, now: MeshInstant
    ) {
        guard id != localID else { return complete(request, .failure(.cannotRemoveSelf)) }
        guard !keying.epochs.removed.contains(id) else { return complete(request, .failure(.alreadyRemoved(id))) }
        guard keying.pendingRemoval == nil, keying.stagedRemoval == nil else {
            return complete(request, .failure(.removalInProgress))
        }
        let introduced: [NodeID]
        switch policy {
        case .keepAll: introduced = []
        case let .keep(kept):
            let rest = introducedTree(of: id, keeping: kept)
            guard rest.isEmpty else { return complete(request, .failure(.introducedMembers(id, rest))) }
            introduced = []
        case let .remove(kept): introduced = introducedTree(of: id, keeping: kept)
        }
        let limit = KeyRotation.maxRemoved * Self.maxRotationsPerRemoval - 1
        guard introduced.count <= limit else {
            return complete(request, .failure(.tooManyToRemove(id, introduced: introduced.count, limit: limit)))
        }
        // The member goes in the first rotation; what it introduced, as many as fit, in it and
        // in those that follow.
        if introduced.count >= KeyRotation.maxRemoved {
            keying.stagedRemoval = StagedRemoval(request: request, member: id, introduced: introduced)
        }
        rotate(removing: Array(([id] + introduced).prefix(KeyRotation.maxRemoved)), for: request, member: id)
    }

    /// The next rotation of a staged removal, once its pause is over: out of the epoch we are in
    /// (a rival may have won the one the last left, and taken back whom it removed), for those
    /// not removed yet. Done when none is left.
    mutating func continueStagedRemoval(now: MeshInstant) {
        guard var staged = keying.stagedRemoval, let nextAt = staged.nextAt, now >= nextAt else { return }
        let everyone = [staged.member] + staged.introduced
        let left = everyone.filter { !keying.epochs.removed.contains($0) }
        guard !left.isEmpty else {
            keying.stagedRemoval = nil
            let introduced = staged.introduced.filter { keying.epochs.removed.contains($0) }.sorted()
            return complete(
                staged.request,
                .success(.memberRemoved(staged.member, handedTo: staged.handedTo, introduced: introduced)))
        }
        guard staged.rotations < Self.maxRotationsPerRemoval else {
            keying.stagedRemoval = nil
            return complete(staged.request, .failure(cutShort(staged, .removalOutpaced)))
        }
        staged.nextAt = nil
        keying.stagedRemoval = staged
        rotate(removing: Array(left.prefix(KeyRotation.maxRemoved)), for: staged.request, member: staged.member)
    }

    /// A staged removal that stopped after some of its rotations: said with whom they removed.
    func cutShort(_ staged: StagedRemoval, _ failure: NodeError) -> NodeError {
        let everyone = [staged.member] + staged.introduced
        let removed = everyone.filter { keying.epochs.removed.contains($0) }
        guard !removed.isEmpty else { return failure }
        return .removalCutShort(
            staged.member, removed: removed, left: everyone.filter { !removed.contains($0) }, because: failure)
    }

    /// One removal takes at most this many rotations, one after another.
    static let maxRotationsPerRemoval = 16

    /// Makes the rotation that removes `removing` and stores it; entered once stored.
    private mutating func rotate(removing: [NodeID], for request: RequestID, member: NodeID) {
        let transition: KeyEpochs.Transition
        let candidates = rosterCandidates
        do {
            transition = try keying.epochs.rotation(
                removing: Set(removing), to: randomSecret(), live: candidates.live,
                others: candidates.others, authority: authority)
        } catch {
            let failure = NodeError.sessionTooLarge(limit: KeyRotation.maxRoster)
            let staged = keying.stagedRemoval
            keying.stagedRemoval = nil
            return complete(request, .failure(staged.map { cutShort($0, failure) } ?? failure))
        }
        keying.pendingRemoval = request
        let files = keying.epochs.committing(transition).files
        keying.storedRivals = files.rivals
        store(.saveEpochs(files), .saveRemoval(request, transition, member: member))
    }

    mutating func removalSaved(
        _ result: Result<StorageOutcome, StorageFailure>, transition: KeyEpochs.Transition, member: NodeID,
        request: RequestID, now: MeshInstant
    ) {
        guard keying.pendingRemoval == request else { return }
        keying.pendingRemoval = nil
        defer { takeDeferredHandovers(now: now) }
        let staged = keying.stagedRemoval.flatMap { $0.request == request ? $0 : nil }
        if case let .failure(failure) = result {
            // The rivals may be on disk for the epoch that was not entered: stored again as they are.
            keying.storedRivals = nil
            saveRivalsIfChanged()
            keying.stagedRemoval = nil
            let said = NodeError.epochNotStored(failure)
            return complete(request, .failure(staged.map { cutShort($0, said) } ?? said))
        }
        guard phase.isActive else {
            keying.stagedRemoval = nil
            return complete(request, .failure(staged.map { cutShort($0, .stopped) } ?? .stopped))
        }
        keying.epochs.commit(transition)
        let handedTo = enterEpoch(transition, handingOver: true, stored: true, now: now)
        membership.keepExcluded(within: keying.epochs.removed)
        let introduced = transition.rotation.removed.filter { $0 != member }
        if var next = staged {
            // Answered once the rotations are done (`continueStagedRemoval`).
            next.rotations += 1
            next.handedTo = handedTo
            next.nextAt = now + settings.removalNoticeHold
            keying.stagedRemoval = next
            return
        }
        complete(request, .success(.memberRemoved(member, handedTo: handedTo, introduced: introduced)))
    }
}
