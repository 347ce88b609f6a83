import MeshCore
import MeshCrypto
import NIOCore

/// Key epochs in the node (Docs/SECURITY.md §Key epochs): removing a member moves the session
/// to a new secret handed to each remaining member; members still speaking an earlier epoch
/// are answered with the next one if they are owed it.
extension MeshNode {
    /// Every member id this node knows of, in any state, remembered ones included.
    var knownMemberIDs: Set<NodeID> {
        var ids = Set(members.dropFirst().map(\.id))
        for entry in knownMembers.members { if let id = NodeID(hex: entry.id) { ids.insert(id) } }
        return ids
    }

    /// Removes `text` (id, unique id prefix or name) from the session: a new key epoch without
    /// it. Returns the member and how many members were handed the new key at once.
    func removeMember(_ text: String) throws(GroupMeshError) -> (id: NodeID, handedTo: Int) {
        guard !stopped, membership != nil else { throw .control("the node is stopping") }
        let lowered = text.lowercased()
        if text == membership?.me.name || (lowered.count >= 4 && nodeID.hex.hasPrefix(lowered)) {
            throw .control("cannot remove this node itself; to go, use groupmesh leave")
        }
        let id: NodeID
        do { id = try resolveMember(text) } catch { throw .control(error.description) }
        guard !epochs.removed.contains(id) else { throw .control("\(displayName(of: id)) was already removed") }
        let transition: KeyEpochs.Transition
        do {
            transition = try epochs.rotation(removing: [id], to: SessionSecret.generate(), members: knownMemberIDs,
                                             authority: Ed25519Authority(identity: identity))
        } catch {
            throw .control("cannot remove: the session has more than \(KeyRotation.maxRoster) other members "
                           + "(a key rotation travels in one datagram)")
        }
        // Stored before anything changes: a removal that is not on disk is not made.
        do {
            try SecretFile.store(epochs.committing(transition).encoded(), to: configuration.dataDirectory.epochsPath)
        } catch {
            throw .control("cannot store the new key epoch, nothing changed: \(error)")
        }
        epochs.commit(transition)
        let handedTo = enterEpoch(transition, handingOver: true, stored: true)
        return (id, handedTo)
    }

    /// Switches to the epoch `transition` opened: the secret is stored first, then the codec and
    /// pairwise keys change, the removed members are excluded, and (for the member that rotated)
    /// every live member is handed the secret. Returns how many were.
    @discardableResult
    func enterEpoch(_ transition: KeyEpochs.Transition, handingOver: Bool, stored: Bool = false) -> Int {
        if !stored {
            do {
                try SecretFile.store(epochs.encoded(), to: configuration.dataDirectory.epochsPath)
            } catch {
                // Kept in memory: after a restart this node catches up through any member.
                logger.error("cannot store the new key epoch", metadata: ["error": "\(error)"])
            }
        }
        let earlier = codec
        earlierCodecs[earlier.sessionID] = earlier
        session = transition.secret
        codec = DatagramCodec(session: transition.secret, localID: nodeID, localBootID: bootID,
                              configuration: configuration.wire)
        for member in members.dropFirst() where !member.status.isGone && !epochs.removed.contains(member.id) {
            installKeys(for: member)
        }
        perform(membership?.exclude(epochs.removed, now: now) ?? [])
        logger.notice("key epoch changed", metadata: [
            "session": "\(transition.secret.sessionID)", "previous": "\(transition.rotation.previousSession)",
            "removed": "\(transition.rotation.removed.map(\.description).joined(separator: ","))",
            "by": "\(transition.rotation.author)"])
        // Beacons in the epoch we left: a member that took a competing rotation out of it (and
        // missed ours) answers with its own, and whichever wins reaches both.
        epochBeaconsLeft = Self.epochBeacons
        epochBeaconAt = now + Self.epochBeaconInterval
        var handed = 0
        if handingOver {
            for member in members.dropFirst() where !member.status.isGone {
                if handOver(to: member.record, heardIn: transition.rotation.previousSession, address: member.address) {
                    handed += 1
                }
            }
        }
        let view = members
        for subscriber in viewSubscribers.values { subscriber.yield(view) }
        return handed
    }

    static let epochBeacons = 10
    static let epochBeaconInterval: Duration = .seconds(1)

    /// A beacon to every live member, in the epoch our current one left: our record and, as a
    /// ping's token, the session we are in. A member in that same session stays quiet; one in a
    /// competing one hands us its rotation, and is handed ours.
    func sendEpochBeacons(now: MeshInstant) {
        guard let due = epochBeaconAt, now >= due else { return }
        epochBeaconsLeft -= 1
        epochBeaconAt = epochBeaconsLeft > 0 ? now + Self.epochBeaconInterval : nil
        guard let me = membership?.me, let left = epochs.transitions.last?.rotation.previousSession,
              var earlier = earlierCodecs[left] else { return }
        for member in members.dropFirst() where !member.status.isGone {
            guard let address = member.address else { continue }
            let beacon = earlier.sealHello([.alive(me), .ping(Ping(token: session.sessionID.value))], nonce: .random(),
                                           allocator: channelAllocator)
            send(beacon, to: address)
        }
        earlierCodecs[left] = earlier
    }

    /// Seals the epoch after `session` for `record`'s boot and sends it in a hello datagram of
    /// `session`, to `address` if the record (signed) names it or it is where we reach the
    /// member, else to the record's first address: a replayed record from elsewhere does not
    /// redirect the handover. False when it is not owed one, or not now (rate limit).
    @discardableResult
    func handOver(to record: MemberRecord, heardIn session: SessionID, address: PeerAddress? = nil) -> Bool {
        let trusted = address.flatMap { record.addresses.contains($0) || peerAddresses[record.id] == $0 ? $0 : nil }
        guard let me = membership?.me, let destination = trusted ?? record.addresses.first,
              let transition = epochs.handover(to: record.id, heardIn: session, now: now),
              var earlier = earlierCodecs[session],
              let previous = epochs.secret(of: transition.rotation.previousSession),
              let handover = EpochHandover.seal(transition.secret, rotation: transition.rotation, previous: previous,
                                                sender: me, local: ephemeral, recipient: record,
                                                nonce: .random()) else { return false }
        let datagram = earlier.sealHello([.epochHandover(handover)], nonce: .random(), allocator: channelAllocator)
        earlierCodecs[session] = earlier
        counters.handoversSent += 1
        send(datagram, to: destination)
        return true
    }

    /// A datagram whose session is not the current one: if it is an earlier epoch of ours and
    /// its sender is owed the next one, hand it over; nothing else in it is believed.
    func receiveEarlierEpoch(_ datagram: ByteBuffer, from remote: SocketAddress) {
        var peek = datagram
        guard case let .success(header) = DatagramHeader.decode(&peek), var earlier = earlierCodecs[header.sessionID] else {
            return counters.countDrop(.foreign)
        }
        let result = earlier.open(datagram)
        earlierCodecs[header.sessionID] = earlier
        guard case let .success(opened) = result else {
            if case let .failure(reason) = result { counters.countDrop(reason) }
            return
        }
        // A competing rotation handed to us in the epoch ours left (two removals at once).
        if case .epochHandover = opened.frames.first, let address = PeerAddress(remote) {
            for case let .epochHandover(handover) in opened.frames {
                receiveHandover(handover, header: opened.header, from: address)
            }
            return
        }
        // A beacon from a member already in the epoch that followed this one here: nothing to do.
        let next = epochs.transition(after: header.sessionID)?.secret.sessionID
        for case let .ping(ping) in opened.frames where ping.token == next?.value { return }
        guard epochs.isEntitled(header.sender, heardIn: header.sessionID),
              let address = PeerAddress(remote), let record = senderRecord(opened) else {
            return counters.countDrop(.staleEpoch)
        }
        handOver(to: record, heardIn: header.sessionID, address: address)
    }

    /// The sender's record for the boot that sent `datagram`: ours if current, else one it carries.
    private func senderRecord(_ datagram: OpenedDatagram) -> MemberRecord? {
        let sender = datagram.header.sender
        if let known = membership?.member(sender)?.record, known.bootID == datagram.header.bootID { return known }
        let authority = Ed25519Authority(identity: identity)
        for case let .alive(record) in datagram.frames
        where record.id == sender && record.bootID == datagram.header.bootID && record.hasValidSignature(authority) {
            return record
        }
        return nil
    }

    /// A handover to us, in a datagram of our current epoch: adopt the next epoch if it is
    /// genuine, for our boot, and from a member we know.
    func receiveHandover(_ handover: EpochHandover, header: DatagramHeader, from address: PeerAddress) {
        let authority = Ed25519Authority(identity: identity)
        // Cheap checks first: signatures and key exchange only for what could be taken.
        guard handover.recipient == nodeID, handover.recipientBoot == bootID, handover.sender.id == header.sender,
              handover.sender.bootID == header.bootID,
              handover.rotation.nextSession != session.sessionID,
              let previous = epochs.secret(of: handover.rotation.previousSession),
              knownMemberIDs.contains(header.sender),
              handover.sender.hasValidSignature(authority),
              let secret = handover.open(previous: previous, local: ephemeral) else {
            counters.handoversRefused += 1
            return
        }
        switch epochs.accept(handover.rotation, secret: secret, from: header.sender, localID: nodeID,
                             members: knownMemberIDs, authority: authority) {
        case let .adopted(transition, replacing):
            // Handed on to every live member too: under loss, and when two members removed
            // someone at once, every member must see the rotation that stands.
            enterEpoch(transition, handingOver: true)
            if let replacing, replacing.rotation.author == nodeID {
                // Our own removal lost to a competing one: remove again, on top of the winner.
                let rest = Set(replacing.rotation.removed).subtracting(epochs.removed)
                if !rest.isEmpty, let again = try? epochs.rotation(removing: rest, to: SessionSecret.generate(),
                                                                   members: knownMemberIDs, authority: authority) {
                    epochs.commit(again)
                    enterEpoch(again, handingOver: true)
                }
            }
            // Our view may be empty (back from a restart): join again, now in the new epoch.
            let seeds = Set([address] + knownMembers.addresses + members.dropFirst().compactMap(\.address))
            perform(membership?.join(seeds.sorted(), now: now) ?? [])
        case .removesUs:
            logger.warning("this node was removed from the session", metadata: ["by": "\(handover.rotation.author)"])
            counters.handoversRefused += 1
        case .notOurEpoch:
            // A competing rotation that loses to ours: its sender is handed ours.
            handOver(to: handover.sender, heardIn: handover.rotation.previousSession, address: address)
        case .known:
            break
        case .invalid:
            counters.handoversRefused += 1
        }
    }

    /// Pairwise keys for a member's current boot under the current epoch.
    func installKeys(for member: Member) {
        guard let keys = PairwiseKeys.derive(session: session, local: ephemeral,
                                             peerPublicKey: member.record.ephemeralKey) else { return }
        codec.installPeer(member.id, bootID: member.record.bootID, keys: keys)
    }
}
