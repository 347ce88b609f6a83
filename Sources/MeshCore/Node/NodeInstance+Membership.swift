import MeshCrypto

/// Membership in the node: its datagrams go out under the hello key, the first probe of a round
/// and its ack pairwise; a member's change installs or keeps its pairwise keys and channels, and
/// starts or stops journal sync and transfers.
extension NodeInstance {
    mutating func apply(_ directives: [MembershipDirective], now: MeshInstant) {
        guard !directives.isEmpty else { return }
        var newMember = false
        for directive in directives {
            guard phase != .stopped else { break }  // an identity conflict stopped this node
            switch directive {
            case let .send(frames, recipient, address):
                // A member is sent to where its own datagrams proved it is (NodeInstance+Paths);
                // membership knows only records, and answers a stranger where it came from. An
                // address its record does not give is meant (an earlier boot's, told it was outbid).
                sendHello(
                    frames, to: recipient.flatMap { provenAddress(of: $0, instead: address) } ?? address,
                    recipient: recipient)
            case let .sendPairwise(frames, recipient, address):
                guard keying.codec.installedBoot(of: recipient) != nil else {
                    // No keys for it (its ephemeral key would not derive any): the same frames
                    // under the hello key, with the probe's or ack's member named, so the gossip
                    // beside them is not lost.
                    sendHello(
                        frames.map { $0.namingProbeTarget(recipient, acker: membership.localID) }, to: address,
                        recipient: recipient)
                    continue
                }
                if relay(for: recipient, meaning: address) != nil {
                    sendPairwise(frames, to: recipient)
                } else {
                    sendPairwise(
                        frames, to: recipient, address: provenAddress(of: recipient, instead: address) ?? address)
                }
            case let .memberChanged(member):
                if member.status != .left, !directory.remembered.contains(member.id) { newMember = true }
                memberChanged(member, now: now)
            case let .memberForgotten(id):
                directory.addresses[id] = nil
                forgetRelaying(of: id, now: now)
                forgetPath(of: id)
                directory.remembered.forget(
                    id, removed: keying.epochs.removed.contains(id), lostAt: membership.lost[id]?.addresses ?? [],
                    since: unixSeconds(at: now))
                journal.memberForgotten(id)
                directory.unprovenJoiners[id] = nil
                directory.addressChecks[id] = nil
                directory.rememberedDirty = true
                keying.codec.removePeer(id)
                let removed = delivery.removePeer(id, now: now)
                apply(removed, now: now)
                versions.forget(id)
                directory.introductions.forget(id)
                emit(.memberForgotten(id))
            case let .identityConflict(twin):
                identityConflict(twin, now: now)
            case let .sessionFull(refused):
                log(
                    .warning,
                    "session full: \(membership.settings.maxLiveMembers) members are live, the most a session holds; "
                        + "another member's record was not taken (status counts them as membersRefusedFull)",
                    ["refused": refused.hex])
            }
        }
        guard phase != .stopped else { return }
        if membership.me.incarnation != directory.remembered.incarnation {
            directory.remembered.incarnation = membership.me.incarnation
            directory.rememberedDirty = true
        }
        // A member met for the first time is written down at once (other changes wait for the
        // tick): a node that crashes right after joining must still find the mesh again.
        if newMember { saveRemembered() }
        // A member asked to take an attachment before we leave may be the one that just died.
        if closing.handover != nil { advanceHandover(now: now) }
    }

    /// Two live nodes with one identity flip every member's view of it between their names and
    /// addresses. The boot id begins with its start time (Unix seconds), so both twins agree on
    /// which started later: that one stops, the other logs it and carries on.
    private mutating func identityConflict(_ twin: MemberRecord, now: MeshInstant) {
        let addresses = twin.addresses.map(\.description).joined(separator: ",")
        let stopping = twin.bootID < bootID
        emit(.identityConflict(twinAddresses: twin.addresses, stopping: stopping))
        if stopping {
            log(
                .error,
                "another node with this node's identity runs, started earlier; stopping (a copied data dir? give each node its own)",
                ["twin": addresses])
            stop(now: now)
        } else {
            log(
                .warning,
                "another node with this node's identity runs, started later; it stops itself (a copied data dir?)",
                ["twin": addresses])
        }
    }

    private mutating func memberChanged(_ member: Member, now: MeshInstant) {
        let id = member.id
        // Where its own datagrams come from, once one did; else where its record says.
        directory.addresses[id] = member.status.isGone ? nil : learnedAddress(of: id) ?? member.address
        directory.rememberedDirty = true
        if phase == .joining, !member.status.isGone { phase = .running }
        if member.status != .alive { manifestHolderFailed(id, now: now) }
        if member.status.isGone {
            // Keys and channels stay until the member is forgotten or a new boot shows up: a
            // member declared dead that refutes resumes where it was.
            let failed = delivery.failPending(id, now: now)
            apply(failed, now: now)
            directory.unprovenJoiners[id] = nil
            let left = journal.memberLeft(id)
            apply(left, now: now)
            transfer.removePeer(id)
            serving.seeding.removePeer(id)
            receiving.assembler.removeHolder(id)
            forgetPacing(of: id)
            receiving.provenHolders.remove(id)
            forgetAddresses(of: id, now: now)
            forgetRelaying(of: id, now: now)
        } else if keying.codec.installedBoot(of: id) != member.record.bootID || !delivery.peers.contains(id),
            let keys = PairwiseKeys.derive(
                session: session, local: ephemeral,
                peerPublicKey: member.record.ephemeralKey)
        {
            // A new boot starts its channels afresh: what was pending to the old boot is reported
            // as not delivered, and its journal sync starts over (it may have lost what it was sent).
            if keying.codec.installedBoot(of: id) != nil {
                let removed = delivery.removePeer(id, now: now)
                apply(removed, now: now)
            }
            keying.codec.installPeer(id, bootID: member.record.bootID, keys: keys)
            // A new boot numbers its datagrams and reads its clock afresh, and asked the old one
            // for pieces it no longer waits for.
            forgetPacing(of: id)
            delivery.addPeer(id)
            _ = journal.memberLeft(id)
            startJournalSync(with: id, sameBoot: false, now: now)
        } else {
            // Back from a (false) death with the same boot: resume journal sync.
            delivery.addPeer(id)
            startJournalSync(with: id, sameBoot: true, now: now)
        }
        metVersions(of: member, now: now)
        if member.status == .alive { memberCameAlive(now: now) }
        log(
            .info, "member changed",
            [
                "member": "\(id)", "state": member.status.rawValue,
                "incarnation": "\(member.incarnation)",
            ])
        emit(.memberChanged(member))
    }

    /// Journal sync with a member starts once its boot's own pairwise datagram reached us
    /// (directly, or through the relay we use for it): its record, or a hello in its name, proves
    /// no address, and the sync's first datagrams (every operation id known) would go wherever
    /// the record points. Meanwhile
    /// one ping goes there, no larger than a probe: its pong proves the member to us, and the
    /// ping itself proves us to it (behind a NAT, only our datagram opens the way back).
    mutating func startJournalSync(with id: NodeID, sameBoot: Bool, proven: Bool = false, now: MeshInstant) {
        guard proven || pairwiseAddress(of: id) != nil else {
            // Once held as a new boot, it stays one (a later change of the same boot must not
            // hand it the old boot's holdings).
            if let held = directory.unprovenJoiners[id] {
                directory.unprovenJoiners[id] = held && sameBoot
            } else {
                directory.unprovenJoiners[id] = sameBoot
                sendPairwise([.ping(Ping(token: Ping.pathCheckToken))], to: id)
            }
            return
        }
        directory.unprovenJoiners[id] = nil
        let joined = journal.memberJoined(id, sameBoot: sameBoot)
        apply(joined, now: now)
    }

    /// A member's own datagram came (of the boot membership knows): journal sync held for it starts.
    mutating func memberProved(_ id: NodeID, boot: UInt64, now: MeshInstant) {
        guard let sameBoot = directory.unprovenJoiners[id], let member = membership.member(id),
            !member.status.isGone, member.record.bootID == boot
        else { return }
        startJournalSync(with: id, sameBoot: sameBoot, proven: true, now: now)
    }

    /// Pairwise keys for a member's current boot under the current epoch.
    mutating func installKeys(for member: Member) {
        guard
            let keys = PairwiseKeys.derive(
                session: session, local: ephemeral,
                peerPublicKey: member.record.ephemeralKey)
        else { return }
        keying.codec.installPeer(member.id, bootID: member.record.bootID, keys: keys)
    }

    mutating func saveRemembered() {
        directory.rememberedDirty = false
        directory.remembered.merge(membership.view.dropFirst(), removed: keying.epochs.removed)
        directory.remembered.keepIntroductions(directory.introductions.byMember.values, localID: localID)
        directory.remembered.keep(directory.founding)
        store(.saveMembers(directory.remembered), .saveMembers)
    }

    // MARK: what the node knows

    /// Every member this node knows of, itself first.
    package var members: [Member] { membership.view }

    /// Members this node sees as neither dead nor left, itself excluded.
    package var activeMemberIDs: [NodeID] {
        membership.view.dropFirst().filter { !$0.status.isGone }.map(\.id)
    }

    /// Every member id this node knows of, in any state, remembered and lost ones included.
    var knownMemberIDs: Set<NodeID> {
        Set(membership.view.dropFirst().map(\.id)).union(directory.remembered.ids)
            .union(membership.lost.entries.keys)
    }

    /// Who a rotation is owed to: every member neither dead nor left, then the others known
    /// (the latest changed first, then those remembered from an earlier run, then those lost:
    /// a member cut off long enough to be forgotten is still one), as many as fit.
    var rosterCandidates: (live: Set<NodeID>, others: [NodeID]) {
        let others = membership.view.dropFirst()
        let live = Set(others.filter { !$0.status.isGone }.map(\.id))
        let gone = others.filter { $0.status.isGone }.sorted { $0.lastChange > $1.lastChange }.map(\.id)
        let remembered = directory.remembered.ids.sorted().filter { !live.contains($0) }
        let listed = Set(gone + remembered)
        let lost = membership.lost.entries.sorted { ($0.value.lostOrder, $0.key) > ($1.value.lostOrder, $1.key) }
            .map(\.key)
            .filter { !live.contains($0) && !listed.contains($0) }
        return (live, gone + remembered + lost)
    }

    /// A member for people: its name and the start of its id (the name alone is the member's
    /// own choice, so never enough). A member forgotten since is named as it was remembered.
    package func displayName(of id: NodeID) -> String {
        let name = knownName(of: id) ?? ""
        let prefix = String(id.hex.prefix(12))
        return name.isEmpty ? prefix : "\(name) (\(prefix))"
    }

    /// The name a member gave itself, as far as this node knows it: from its record, or as it was
    /// remembered once it was forgotten (a member's own choice: escaped wherever it is shown).
    package func knownName(of id: NodeID) -> String? {
        membership.member(id)?.record.name
            ?? (directory.remembered.members + directory.remembered.former).first { $0.id == id.hex }?.name
    }

    /// A member other than this node, named by its full id, its name, or a unique prefix of its
    /// id. This node is looked up with the others, so that what names it alone is `thisNode`, and
    /// a prefix or name it shares with another member is ambiguous, not the other's.
    package func resolveMember(_ text: String) -> Result<NodeID, MemberLookupError> {
        Self.lookUp(
            text, among: membership.view.dropFirst().map { ($0.id, $0.record.name) }, own: ownEntry,
            names: displayName)
    }

    private var ownEntry: (id: NodeID, name: String) { (localID, membership.me.name) }

    /// A member to remove: as `resolveMember`, among the members `members.json` remembers too
    /// (those removed already only when nothing else fits): those this node knew when it last
    /// ran, and those that left or were forgotten since. A lost laptop is forgotten a minute after
    /// it went quiet, or never seen again by a node that was down meanwhile, and still holds the
    /// session's secret.
    package func resolveRemovable(_ text: String) -> Result<NodeID, MemberLookupError> {
        let known = membership.view.dropFirst().map { ($0.id, $0.record.name) }
        var seen = Set(known.map(\.0))
        var remembered: [(NodeID, String)] = []
        var removed: [(NodeID, String)] = []
        for entry in directory.remembered.members + directory.remembered.former {
            guard let id = NodeID(hex: entry.id), id != localID, seen.insert(id).inserted else { continue }
            if keying.epochs.removed.contains(id) {
                removed.append((id, entry.name))
            } else {
                remembered.append((id, entry.name))
            }
        }
        let found = Self.lookUp(text, among: known + remembered, own: ownEntry, names: displayName)
        // Named by nobody else: a member removed already, so that the removal says so.
        guard found == .failure(.unknown(text)) else { return found }
        return Self.lookUp(text, among: removed, own: nil, names: displayName)
    }

    /// `text` as a full id, a name, or a unique id prefix among `candidates` and `own` (this
    /// node, which is never the answer: `thisNode` when it alone fits).
    static func lookUp(
        _ text: String, among others: [(id: NodeID, name: String)], own: (id: NodeID, name: String)?,
        names: (NodeID) -> String
    ) -> Result<NodeID, MemberLookupError> {
        let lowered = text.lowercased()
        let candidates = others + (own.map { [$0] } ?? [])
        func decided(_ matches: [(id: NodeID, name: String)]) -> Result<NodeID, MemberLookupError>? {
            guard let first = matches.first else { return nil }
            guard matches.count == 1 else {
                let listed = matches.map { $0.id == own?.id ? "this node (\(names($0.id)))" : names($0.id) }
                return .failure(.ambiguous(text, candidates: listed))
            }
            return first.id == own?.id ? .failure(.thisNode(text)) : .success(first.id)
        }
        guard !text.isEmpty else { return .failure(.unknown(text)) }
        if let exact = decided(candidates.filter { $0.id.hex == lowered }) { return exact }
        let named = candidates.filter { $0.name == text }
        let prefixed = candidates.filter { $0.id.hex.hasPrefix(lowered) }
        // A name comes before an id prefix (`a`, `dad`), except one that reads as an id (4 hex
        // digits or more): a member that calls itself like the start of another's id does not
        // take that member's place.
        if text.count >= 4, text.allSatisfy(\.isHexDigit) {
            return decided(named + prefixed.filter { match in !named.contains { $0.id == match.id } })
                ?? .failure(.unknown(text))
        }
        return decided(named) ?? decided(prefixed) ?? .failure(.unknown(text))
    }
}

package enum MemberLookupError: Error, Sendable, Equatable {
    case unknown(String)
    case ambiguous(String, candidates: [String])
    /// The text names this node alone (its id, its name, or a prefix of its id no other has).
    case thisNode(String)
}
