import MeshCore
import MeshCrypto

/// What the public API (`MeshSession`, `Messenger`, `Journal`) and the control socket ask of a
/// node: commands that wait for the core's completion, subscriptions, and reading state.
extension MeshNode {
    // MARK: members

    /// Every member this node knows of, itself first.
    package var members: [Member] { core.members }

    /// Snapshots of the member list, now and after every change.
    package func memberUpdates() -> AsyncStream<[Member]> {
        viewSubscribers.add(buffering: .bufferingNewest(1), initial: members)
    }

    package func invite() -> Invite {
        Invite(InviteToken(secret: core.session, addresses: core.inviteCandidates))
    }

    /// A member other than this node, named by its full id, its name, or a unique id prefix;
    /// `removable`: also one that `members.json` remembers, that left or was forgotten
    /// (`remove-member`).
    package func resolveMember(_ text: String, removable: Bool = false) throws(MessengerError) -> NodeID {
        switch removable ? core.resolveRemovable(text) : core.resolveMember(text) {
        case let .success(id): return id
        case let .failure(.unknown(text)), let .failure(.thisNode(text)): throw .unknownMember(text)
        case let .failure(.ambiguous(text, candidates)): throw .ambiguousMember(text, candidates: candidates)
        }
    }

    /// A value of `--keep`: a member of the session as it is (a name may hold commas), else
    /// members separated by commas (empty parts passed over).
    private func resolveKept(_ value: String) throws(MessengerError) -> [NodeID] {
        if case let .success(id) = core.resolveMember(value) { return [id] }
        guard value.contains(",") else { return [try resolveMember(value, removable: true)] }
        var ids: [NodeID] = []
        for part in value.split(separator: ",") where !part.isEmpty {
            ids.append(try resolveMember(String(part), removable: true))
        }
        return ids
    }

    func participant(_ id: NodeID) -> Participant {
        Participant(id: id, name: core.membership.member(id)?.record.name ?? "")
    }

    /// Removes a member (id, unique id prefix or name) with a new key epoch; with the members it
    /// introduced if `withIntroduced`, but those named in `keeping` (or all, `keepingAll`).
    /// Returns the member, how many members were handed the new key at once, and the members it
    /// introduced that went too.
    package func removeMember(
        _ text: String, withIntroduced: Bool = false, keeping: [String] = [], keepingAll: Bool = false
    ) async throws(GroupMeshError) -> (id: NodeID, handedTo: Int, introduced: [NodeID]) {
        if case .failure(.thisNode) = core.resolveRemovable(text) { throw .cannotRemoveSelf }
        let id: NodeID
        var kept: Set<NodeID> = []
        do {
            id = try resolveMember(text, removable: true)
            for value in keeping { kept.formUnion(try resolveKept(value)) }
        } catch {
            throw .refused(error.description, kind: error.kind)
        }
        let policy: IntroducedMembers =
            keepingAll ? .keepAll : withIntroduced ? .remove(keeping: kept) : .keep(kept)
        switch await perform(.removeMember(id, introduced: policy)) {
        case let .success(.memberRemoved(removed, handedTo, introduced)): return (removed, handedTo, introduced)
        case let .failure(error): throw GroupMeshError(error, names: { core.displayName(of: $0) })
        case .success: throw .notRunning
        }
    }

    // MARK: messages

    /// Sends `envelope` to `targets` (nil: every active member but us). Reliable sends return once
    /// every target acknowledged and throw `notDelivered` naming those that did not; unreliable
    /// sends return once the datagrams are out. Returns how many members it went to.
    @discardableResult
    package func sendMessage(
        _ envelope: MessageEnvelope, to targets: [NodeID]?, mode: DeliveryInstance.Mode,
        timeout: Duration? = nil
    ) async throws(MessengerError) -> Int {
        try sendOutcome(await perform(.send(envelope, to: targets, mode: mode, timeout: timeout))).get()
    }

    /// `sendMessage` with its outcome handed to `completion` (on this actor) instead of awaited:
    /// the send reaches the core before this returns, so successive calls keep their order.
    package func submitMessage(
        _ envelope: MessageEnvelope, to targets: [NodeID]?, mode: DeliveryInstance.Mode,
        timeout: Duration?, completion: @escaping @Sendable (Result<Int, MessengerError>) -> Void
    ) {
        submit(.send(envelope, to: targets, mode: mode, timeout: timeout)) { result in
            self.assumeIsolated { node in completion(node.sendOutcome(result)) }
        }
    }

    func sendOutcome(_ result: Result<NodeResult, NodeError>) -> Result<Int, MessengerError> {
        switch result {
        case let .success(.sent(recipients)): return .success(recipients)
        case let .failure(.notDelivered(failures)):
            return .failure(MessengerError(failures, names: { participant($0).name }))
        case let .failure(.messageTooLarge(size, limit)): return .failure(.tooLarge(size: size, limit: limit))
        case let .failure(.sessionEnded(by)):
            return .failure(.sessionEnded(by: by == nodeID ? "this member" : core.displayName(of: by)))
        case .failure, .success: return .failure(notRunningReason)
        }
    }

    /// Why nothing more is sent: the session's end or our removal, when that is what stopped us.
    var notRunningReason: MessengerError {
        switch invalidation {
        case let .ended(by): .sessionEnded(by: by)
        case let .removed(by): .removed(by: by)
        default: .notRunning
        }
    }

    /// Every application message `accepts` takes that this node receives from now on, for one
    /// reader whose pace holds the node as a `listen`'s does (`MessageInbox`).
    func messageInbox(accepting accepts: @escaping @Sendable (NodeMessage) -> Bool) -> MessageInbox {
        let consumer = nextConsumerID()
        let inbox = MessageInbox(consumer: consumer, accepts: accepts) { [weak self] report in
            await self?.reportInbox(consumer, report)
        }
        messageInboxes.add(inbox)
        return inbox
    }

    /// A reader's progress, worked out before the hop to this actor: one that fell behind again
    /// meanwhile (said at once, by `deliverToInboxes`) has not caught up.
    func reportInbox(_ consumer: UInt64, _ report: ConsumerFlow.Report) {
        if report == .caughtUp, messageInboxes.inbox(consumer)?.isBehind == true { return }
        reportConsumer(consumer, report)
    }

    // MARK: attachments

    package var attachmentEntries: [AttachmentEntry] { core.attachments }

    package func attachmentUpdates() -> AsyncStream<[Attachment]> {
        attachmentSubscribers.add(buffering: .bufferingNewest(1), initial: attachmentList())
    }

    /// The attachment set as the Swift API shows it, availability included.
    func attachmentList() -> [Attachment] { core.attachments.map(attachment) }

    func attachment(_ entry: AttachmentEntry) -> Attachment {
        let availability = core.availability(of: entry)
        let holders = Set(
            availability.holders.map { id in
                Participant(
                    id: id, name: id == nodeID ? core.membership.me.name : core.membership.member(id)?.record.name ?? ""
                )
            })
        return Attachment(entry, availability: availability, holders: holders, node: self)
    }

    /// An attachment named by its id or a unique prefix of it.
    package func resolveAttachment(_ text: String) throws(GroupMeshError) -> AttachmentEntry {
        do { return try core.resolveAttachment(text).mapError(GroupMeshError.init).get() } catch {
            // Not unknown to the session: this node has not heard the journal yet.
            guard case .unknownAttachment = error, core.joinProgress != nil else { throw error }
            throw .refused(
                "unknown attachment '\(text)': this node has not met a member yet, so it knows "
                    + "none of the session's attachments (see groupmesh status)", kind: .unavailable)
        }
    }

    func progress(of entry: AttachmentEntry) -> TransferProgress {
        TransferProgress(
            chunksHave: core.chunksHeld(of: entry), chunks: entry.chunkCount, size: entry.size,
            bytesHave: core.bytesHeld(of: entry),
            holdersSending: core.transfer.holdersSending(entry.content))
    }

    func attachmentInfos(withMetadata: Bool) -> [StatusReport.AttachmentInfo] {
        core.attachments.map { entry in
            let availability = core.availability(of: entry)
            return StatusReport.AttachmentInfo(
                id: entry.id.hex, content: entry.content.hex, size: entry.size, chunks: entry.chunkCount,
                chunksHave: core.chunksHeld(of: entry), holders: availability.holders.count,
                state: availability.state.rawValue, heldBy: availability.holders.map(\.hex),
                metadata: withMetadata && !entry.metadata.isEmpty
                    ? String(decoding: entry.metadata, as: UTF8.self) : nil,
                fetching: core.fetches[entry.content] != nil)
        }
    }

    /// Adds a file (streamed: chunked and hashed without loading it whole) or bytes. Returns
    /// once the add is in the journal log.
    package func addAttachment(
        _ source: AttachmentSource, metadata: [UInt8]
    ) async throws(GroupMeshError) -> AttachmentEntry {
        switch await perform(.add(source, metadata: metadata)) {
        case let .success(.added(entry)): return entry
        case let .failure(error): throw GroupMeshError(error, names: { core.displayName(of: $0) })
        case .success: throw .notRunning
        }
    }

    package func removeAttachment(_ id: AttachmentID) async throws(GroupMeshError) {
        if case let .failure(error) = await perform(.remove(id)) {
            throw GroupMeshError(error, names: { core.displayName(of: $0) })
        }
    }

    /// The attachment's bytes (fetched first from the members that hold them if need be), in
    /// memory or written to `path` (through a temporary file, renamed when whole).
    package func loadAttachment(
        _ id: SHA256Digest, into destination: ExportDestination
    ) async throws(GroupMeshError) -> [UInt8]? {
        if case let .file(path, _, replace) = destination {
            guard !configuration.dataDirectory.ownsFile(path) else { throw .outputIsNodeFile(path) }
            // Before any fetch: a wrong output is said at once, not after 100 MiB.
            try OutputPath.check(path, replacing: replace)
            if let entry = core.attachments.first(where: { $0.content == id }) {
                try OutputPath.checkRoom(
                    for: path, size: entry.size, fetching: entry.size - min(entry.size, core.bytesHeld(of: entry) ?? 0),
                    storeDirectory: configuration.dataDirectory.chunksPath)
            }
        }
        let exports = exportCancellations
        if case let .file(path, _, _) = destination { exports.clear(path) }
        let result = await performCancellable(.load(id, into: destination)) {
            if case let .file(path, _, _) = destination { exports.insert(path) }
        }
        // Given up by the caller: whatever the store answered meanwhile, it was given up.
        if Task.isCancelled, case .failure = result { throw .cancelled }
        switch result {
        case let .success(.loaded(_, bytes)): return bytes
        case let .failure(error): throw GroupMeshError(error, names: { core.displayName(of: $0) })
        case .success: throw .notRunning
        }
    }

    /// One round trip to a member: its time (nil: no answer in time), and the address it went to.
    package func ping(_ text: String) async throws(GroupMeshError) -> (member: NodeID, rtt: Duration?, address: String)
    {
        let member: NodeID
        do { member = try resolveMember(text) } catch {
            if case .failure(.thisNode) = core.resolveMember(text) {
                throw .refused("cannot ping this node itself; name another member", kind: .input)
            }
            throw .refused(error.description, kind: error.kind)
        }
        switch await perform(.ping(member)) {
        case let .success(.pong(rtt, address)): return (member, rtt, address.description)
        case .failure(.pingTimedOut): return (member, nil, core.membership.member(member)?.address?.description ?? "")
        case let .failure(error): throw GroupMeshError(error, names: { core.displayName(of: $0) })
        case .success: throw .notRunning
        }
    }

    // MARK: status

    package func status() -> StatusReport {
        let view = core.members
        let me = view.first
        let selfInfo = StatusReport.SelfInfo(
            id: nodeID.hex, name: me?.record.name ?? "", address: (me?.address ?? localAddress).description,
            session: core.session.sessionID.description, keyEpoch: core.epochs.transitions.count,
            profile: configuration.profile.rawValue, localHealth: core.membership.localHealth.score,
            receiveBuffer: socketBuffers.receive, sendBuffer: socketBuffers.send,
            nat: core.natBehaviour.rawValue, reflexiveAddress: core.addressDiscovery.reflexive?.description,
            candidates: core.membership.me.addresses.map(\.description),
            founding: core.founding?.id.hex, founder: core.founding?.founder?.hex)
        let memberInfos = view.map { member in
            let door = core.introduction(of: member.id)?.door
            return StatusReport.MemberInfo(
                id: member.id.hex, name: member.record.name,
                address: member.address?.description ?? "",
                // Gone for good, whatever membership last heard of it: a rotation without it.
                state: core.epochs.removed.contains(member.id) ? StatusReport.removedState : member.status.rawValue,
                incarnation: member.incarnation,
                rttMs: member.rtt.map { ($0.milliseconds * 1000).rounded() / 1000 },
                datagramSize: core.pathMTU.isMeasuring(member.id)
                    ? core.pathMTU.datagramSize(from: member.id) : nil,
                path: member.id == nodeID ? "" : core.paths.state(of: member.id).rawValue,
                pathAddress: core.pathAddress(of: member.id)?.description ?? "",
                relay: core.paths.relay(of: member.id)?.hex, relays: member.record.relays,
                protocol: member.id == nodeID
                    ? core.versions.ours.current : core.versions.versions(of: member.id)?.current,
                introducedBy: door?.hex, introducedByName: door.flatMap { core.knownName(of: $0) })
        }
        let counters = core.counters
        let handlerCounters = eventHandlers?.counters ?? .init()
        let counterInfo = StatusReport.Counters(
            datagramsSent: counters.datagramsSent, datagramsReceived: counters.datagramsReceived,
            bytesSent: counters.bytesSent, bytesReceived: counters.bytesReceived,
            dropped: Dictionary(uniqueKeysWithValues: counters.dropped.map { ($0.key.rawValue, $0.value) }),
            sendErrors: sendErrors + destinations.refusedSends, retransmissions: core.delivery.retransmissions,
            chunksFetched: counters.chunksFetched, chunksServed: counters.chunksServed,
            chunksRejected: counters.chunksRejected, chunksScrubbed: core.scrub.chunksChecked,
            chunksScrubbedDamaged: core.scrub.chunksDamaged, chunkPayloadBytesSent: counters.chunkPayloadBytesSent,
            chunkPayloadBytesCancelled: counters.chunkPayloadBytesCancelled,
            pieceReasks: core.assembler.reasks, piecesUnsolicited: counters.piecesUnsolicited,
            wantsRefused: counters.wantsRefused, pacesRetold: counters.pacesRetold,
            seedingRefusals: counters.seedingRefusals, seedingSecondCopies: counters.seedingSecondCopies,
            simulatedDrops: simulatedDrops,
            requestTimeouts: core.transfer.timeouts, handoversSent: counters.handoversSent,
            handoversRefused: counters.handoversRefused,
            messagesDroppedForSlowReaders: messagesDroppedForSlowReaders, consumersStalled: counters.consumersStalled,
            controlConnectionsClosed: controlConnections?.closedIdle ?? 0,
            controlConnectionsRefused: controlConnections?.refused ?? 0,
            kernelReceiveDrops: KernelSocketDrops.read(localAddress: localAddress),
            eventHandlersRun: handlerCounters.run, endsRefused: counters.endsRefused,
            eventHandlersFailed: handlerCounters.failed,
            eventHandlersTimedOut: handlerCounters.timedOut, eventHandlersDropped: handlerCounters.dropped,
            traffic: Dictionary(
                uniqueKeysWithValues: TrafficKind.allCases.map { kind in
                    (
                        kind.description,
                        StatusReport.TrafficInfo(
                            datagramsSent: counters.sent.datagrams(kind), bytesSent: counters.sent.bytes(kind),
                            datagramsReceived: counters.received.datagrams(kind),
                            bytesReceived: counters.received.bytes(kind))
                    )
                }),
            suspicionsRaised: core.membership.counters.suspicionsRaised,
            refutations: core.membership.counters.refutations,
            pathBlackHoles: core.pathMTU.blackHoles,
            probeRequestsRefused: counters.probeRequestsRefused + core.membership.counters.probeRequestsRefused,
            punchesSucceeded: core.paths.punchesSucceeded, punchesFailed: core.paths.punchesFailed,
            relay: relayInfo(sentThroughRelays: counters.relayedSent, receivedThroughRelays: counters.relayedReceived),
            birthday: birthdayInfo(), membersRefusedFull: core.membership.counters.recordsRefusedFull,
            introductionsPastBound: core.counters.introductionsPastBound,
            foundingMismatches: core.counters.foundingMismatches)
        let downlink = core.downlink
        let downlinkInfo = StatusReport.DownlinkInfo(
            rate: downlink.rate.rounded(), priority: downlink.priority == .foreground ? "foreground" : "background",
            queueingDelayMs: downlink.queueingDelay.milliseconds, targetMs: downlink.target.milliseconds,
            roundTripMs: downlink.roundTrip?.milliseconds, slowStart: downlink.slowStart, competing: downlink.competing,
            lossBackoffs: downlink.lossBackoffs, slowdowns: downlink.slowdowns,
            slowdownsFoundAnotherFlow: downlink.slowdownsFoundAnotherFlow, lossyLine: downlink.isLossyLine,
            backgroundCap: downlink.backgroundCap?.rounded())
        var report = StatusReport(
            self: selfInfo, members: memberInfos, attachments: attachmentInfos(withMetadata: false),
            counters: counterInfo, leaving: leavingInfo(), downlink: downlinkInfo,
            joining: joiningInfo(), lanDiscovery: lanDiscoveryInfo(), portMapping: portMapper?.info())
        report.traversal = traversalInfo()
        report.lost = lostMemberInfos()
        report.leftOutBy = core.leftOutBy?.hex
        let directory = configuration.dataDirectory
        report.storage = .init(dataDirectory: directory.path, freeBytes: OutputPath.freeBytes(directory.chunksPath))
        return report
    }

    func lanDiscoveryInfo() -> StatusReport.LANDiscoveryInfo? {
        guard let lanBeacon, core.lanDiscoveryEnabled else { return nil }
        let lan = core.counters.lan
        return StatusReport.LANDiscoveryInfo(
            interfaces: lanBeacon.interfaces, announcementsSent: lan.announcementsSent,
            announcementsHeard: lan.announcementsHeard,
            announcementsIgnored: lan.announcementsIgnored, membersMet: lan.membersMet)
    }

    /// Whether a join goes to an invite's addresses: one given to this start, or kept from a
    /// start that met nobody (the data dir then knows no member, nor where one it lost was).
    var joinsThroughInvite: Bool {
        configuration.invite != nil
            || (core.remembered.members.isEmpty && core.remembered.lost(removed: core.epochs.removed).isEmpty)
    }

    func joiningInfo() -> StatusReport.JoiningInfo? {
        core.joinProgress.map { progress in
            StatusReport.JoiningInfo(
                state: progress.outOfDateBy == nil ? JoinNotice.waiting : JoinNotice.outOfDateState,
                addresses: progress.addresses.map(\.description),
                attempts: progress.attempts,
                since: ((now - progress.since).milliseconds / 100).rounded() / 10)
        }
    }

    func lostMemberInfos() -> [StatusReport.LostMemberInfo]? {
        let lost = core.membership.lost.entries
        guard !lost.isEmpty else { return nil }
        let names = Dictionary(
            core.remembered.former.map { ($0.id, $0.name) }, uniquingKeysWith: { first, _ in first })
        let seconds = { (duration: Duration) in (max(0, duration.milliseconds) / 100).rounded() / 10 }
        return lost.sorted { ($1.value.lostOrder, $0.key) < ($0.value.lostOrder, $1.key) }.map { id, entry in
            StatusReport.LostMemberInfo(
                id: id.hex, name: names[id.hex] ?? "", addresses: entry.addresses.map(\.description),
                lostSeconds: seconds(entry.age(at: now)), nextAskSeconds: seconds(entry.nextAskAt - now))
        }
    }

    func leavingInfo() -> StatusReport.LeavingInfo? {
        core.leaveProgress(now: now).map { progress in
            StatusReport.LeavingInfo(
                attachments: progress.attachments.map(\.hex), bytes: progress.bytes,
                askedMembers: progress.askedMembers.map(\.hex),
                secondsLeft: (Double(progress.remaining.nanosecondsClamped) / 1e8).rounded() / 10)
        }
    }

    /// What this node carries for others, its budget and what relaying cost it (status).
    private func relayInfo(sentThroughRelays: UInt64, receivedThroughRelays: UInt64) -> StatusReport.RelayInfo {
        let service = core.relayService
        let budget = service.budget(now: now)
        return StatusReport.RelayInfo(
            enabled: service.settings.enabled, sentThroughRelays: sentThroughRelays,
            receivedThroughRelays: receivedThroughRelays,
            forwardedDatagrams: service.counters.forwardedDatagrams, forwardedBytes: service.counters.forwardedBytes,
            droppedOverRate: service.counters.droppedOverRate, refused: service.counters.refused,
            budget: service.settings.enabled ? budget.total : 0,
            budgetPerPair: service.settings.enabled ? budget.perPair : 0,
            budgetSetting: service.settings.budget, measuredCapacity: budget.capacity, ownTransferRate: budget.ownRate,
            yielding: budget.yielding, activePairs: budget.activePairs,
            cpuSeconds: Double(relayCPU.nanoseconds) / 1e9,
            cpuMillisecondsPerMiB: relayCPU.millisecondsPerMiB(carried: service.counters.forwardedBytes))
    }
}
