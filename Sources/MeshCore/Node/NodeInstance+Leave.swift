import MeshCrypto

/// A graceful leave that strands nothing (PROTOCOL.md §6, leaving): before the departure goes
/// out, the reliable messages this node sent must be acknowledged (at most `leaveDrain`), and
/// every attachment this node alone holds whole must be held whole by another member that
/// is alive. Members are asked to fetch it (`JournalMessage.replicate`, which a `--lazy` member
/// obeys too), one at a time per attachment, another when the one asked dies or takes too long;
/// the node serves them meanwhile as always. It goes once nothing is at risk, or at a deadline
/// that grows with the bytes at risk, saying what became unavailable.
package struct LeaveHandover: Sendable {
    /// The leaves waiting (a second `leave` waits with the first).
    var requests: [RequestID]
    var deadline: MeshInstant
    /// What was at risk when the leave began, for the report.
    let atStart: Set<SHA256Digest>
    /// Who was asked to take each attachment, and when.
    var asked: [SHA256Digest: (member: NodeID, at: MeshInstant)] = [:]
    /// Everyone asked for each attachment, so the next ask goes to someone else.
    var tried: [SHA256Digest: Set<NodeID>] = [:]
}

/// How far a leave's handover is, for `status` and `leave`.
package struct LeaveProgress: Sendable, Equatable {
    /// Attachments only this node holds whole, still.
    package var attachments: [AttachmentID]
    package var bytes: UInt64
    /// Members asked to take them.
    package var askedMembers: [NodeID]
    package var remaining: Duration
}

/// What a leave did: which attachments other members took first, and which no member that
/// stays holds whole (they are unavailable until a holder comes back).
package struct LeaveReport: Sendable, Equatable {
    package var handedOver: [AttachmentID]
    package var unavailable: [AttachmentID]
    /// No other member was alive: nothing could be handed over.
    package var alone: Bool

    package init(handedOver: [AttachmentID] = [], unavailable: [AttachmentID] = [], alone: Bool = false) {
        self.handedOver = handedOver
        self.unavailable = unavailable
        self.alone = alone
    }
}

extension NodeInstance {
    /// A leave: at once when nothing is at risk, nobody is left to take it, or the caller said
    /// not to wait (`leave --now`, which also cuts a handover under way short).
    mutating func leave(waitingForReplication: Bool, request: RequestID, now: MeshInstant) {
        if closing.handover != nil {
            closing.handover?.requests.append(request)
            if !waitingForReplication { depart(now: now) }
            return
        }
        let atRisk = soleHeldAttachments()
        let others = aliveMemberIDs
        let undelivered = delivery.pendingSends
        guard waitingForReplication, !atRisk.isEmpty || undelivered > 0, !others.isEmpty else {
            closing.handover = LeaveHandover(requests: [request], deadline: now, atStart: Set(atRisk))
            return depart(now: now)
        }
        if atRisk.isEmpty {
            closing.handover = LeaveHandover(requests: [request], deadline: now + settings.leaveDrain, atStart: [])
            return log(.info, "leaving once the messages sent are acknowledged", ["sends": "\(undelivered)"])
        }
        let bytes = atRisk.reduce(UInt64(0)) { $0 + (journal.state.entry(content: $1)?.size ?? 0) }
        let seconds = Double(bytes) / Double(max(1, settings.leaveHandoverBytesPerSecond))
        let bound = max(
            settings.leaveHandoverBase + .milliseconds(Int64(min(seconds, 86_400) * 1000)), settings.leaveDrain)
        closing.handover = LeaveHandover(requests: [request], deadline: now + bound, atStart: Set(atRisk))
        log(
            .notice, "leaving once other members hold what only this node holds",
            ["attachments": "\(atRisk.count)", "bytes": "\(bytes)", "within": "\(bound)"])
        advanceHandover(now: now)
    }

    /// Asks for what is still at risk, or departs once nothing is (or the time is up).
    mutating func advanceHandover(now: MeshInstant) {
        guard var state = closing.handover, phase.isActive else { return }
        let atRisk = soleHeldAttachments()
        let alive = aliveMemberIDs
        if (atRisk.isEmpty && delivery.pendingSends == 0) || alive.isEmpty || now >= state.deadline {
            return depart(now: now)
        }
        // Nothing at risk any more: the sends still waiting get `leaveDrain` from now, no longer.
        if atRisk.isEmpty, state.deadline > now + settings.leaveDrain {
            state.deadline = now + settings.leaveDrain
            closing.handover = state
            return
        }
        var asks: [NodeID: [SHA256Digest]] = [:]
        for id in atRisk {
            if let asked = state.asked[id], alive.contains(asked.member), now < asked.at + settings.leaveHandoverReask {
                continue
            }
            let fresh = alive.filter { !(state.tried[id]?.contains($0) ?? false) }
            let pool = fresh.isEmpty ? alive : fresh
            let member = pool[Int(random.next() % UInt64(pool.count))]
            state.asked[id] = (member, now)
            state.tried[id, default: []].insert(member)
            asks[member, default: []].append(id)
        }
        closing.handover = state
        for (member, ids) in asks.sorted(by: { $0.key < $1.key }) {
            log(
                .info, "asking a member to take attachments before leaving",
                ["member": displayName(of: member), "attachments": "\(ids.count)"])
            sendJournal(.replicate(ids), to: member, now: now)
        }
    }

    /// The departure goes out and every waiting leave completes with what became of the
    /// attachments; the driver then lets the datagrams leave the host and calls `stop`.
    private mutating func depart(now: MeshInstant) {
        guard let state = closing.handover else { return }
        closing.handover = nil
        let unavailable = soleHeldAttachments()
        let alone = aliveMemberIDs.isEmpty
        let report = LeaveReport(
            handedOver: attachmentIDs(of: state.atStart.subtracting(unavailable)),
            unavailable: attachmentIDs(of: unavailable), alone: alone)
        if !unavailable.isEmpty {
            log(
                .warning,
                alone
                    ? "leaving with no other member alive: attachments only this node held are unavailable"
                    : "leaving before other members held every attachment: some are unavailable",
                ["attachments": report.unavailable.map(\.hex).joined(separator: ",")])
        }
        // What is still unacknowledged is reported per member, as a send's own deadline would.
        let givenUp = delivery.giveUpAll(now: now)
        apply(givenUp, now: now)
        let departure = membership.leave(now: now)
        apply(departure, now: now)
        phase = .leaving
        for request in state.requests { complete(request, .success(.left(report))) }
    }

    /// A member leaving asks us to hold these whole before it goes: fetched even when lazy,
    /// and at once (an earlier failure's wait does not apply).
    mutating func replicateRequested(_ ids: [SHA256Digest], now: MeshInstant) {
        for id in Set(ids).sorted() where journal.state.hasContent(id) && !library.complete.contains(id) {
            fetchTable.retries[id] = nil
            startFetch(id, forReplication: true, now: now)
        }
    }

    /// Attachments in the journal that this node holds whole and no other alive member does
    /// (a suspect one may be dead: it does not count).
    func soleHeldAttachments() -> [SHA256Digest] {
        let alive = Set(aliveMemberIDs)
        return journal.state.presentContents.filter { id in
            library.complete.contains(id) && !journal.holders(of: id).contains(where: alive.contains)
        }.sorted()
    }

    /// The present attachments of these contents.
    func attachmentIDs(of contents: some Collection<SHA256Digest>) -> [AttachmentID] {
        contents.flatMap { journal.state.attachments(withContent: $0).map(\.id) }.sorted()
    }

    /// Members other than this node whose status is alive.
    var aliveMemberIDs: [NodeID] {
        membership.view.dropFirst().filter { $0.status == .alive }.map(\.id)
    }

    /// The handover under way, if a leave waits for one.
    package func leaveProgress(now: MeshInstant) -> LeaveProgress? {
        guard let state = closing.handover else { return nil }
        let atRisk = soleHeldAttachments()
        let bytes = atRisk.reduce(UInt64(0)) { $0 + (journal.state.entry(content: $1)?.size ?? 0) }
        let asked = Set(atRisk.compactMap { state.asked[$0]?.member }).sorted()
        return LeaveProgress(
            attachments: attachmentIDs(of: atRisk), bytes: bytes, askedMembers: asked,
            remaining: now < state.deadline ? state.deadline - now : .zero)
    }

    /// When the handover must look again: its deadline, or the next re-ask.
    var handoverDeadline: MeshInstant? {
        guard let state = closing.handover else { return nil }
        let reasks = state.asked.values.map { $0.at + settings.leaveHandoverReask }
        return ([state.deadline] + reasks).min()
    }
}

extension NodeInstance {
    /// How available an attachment is, as this node knows: who holds it whole, and whether the
    /// rest of the session could still load it (PROTOCOL.md §6).
    package func availability(of entry: AttachmentEntry) -> AttachmentAvailability {
        let wholeHolders = holders(of: entry.content)
        if !wholeHolders.isEmpty { return AttachmentAvailability(holders: wholeHolders, state: .available) }
        let live = Set(activeMemberIDs)
        let partial =
            chunksHeld(of: entry) > 0 || transfer.peersWithChunks(of: entry.content).contains(where: live.contains)
        return AttachmentAvailability(holders: [], state: partial ? .partial : .unavailable)
    }
}

/// Who holds an attachment and whether it can be loaded.
package struct AttachmentAvailability: Sendable, Equatable {
    package enum State: String, Sendable, Codable, CaseIterable {
        /// A live member (maybe this node) holds every chunk.
        case available
        /// Nobody live holds it whole, but some of its chunks are held: a holder may come back.
        case partial
        /// No live member is known to hold any of it.
        case unavailable
    }

    /// Live members known to hold every chunk, this node included.
    package var holders: [NodeID]
    package var state: State
}
