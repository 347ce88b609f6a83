import MeshCrypto

/// The messenger in the node: application messages and journal messages share each member's
/// reliable channel, in streams of their own (`DeliveryStream`), sealed pairwise.
extension NodeInstance {
    /// An application message. Reliable sends complete once every target acknowledged (else
    /// `notDelivered`, by member); unreliable ones once their datagrams are out.
    mutating func send(
        _ envelope: MessageEnvelope, to targets: [NodeID]?, mode: DeliveryInstance.Mode,
        timeout: Duration?, request: RequestID, now: MeshInstant
    ) {
        guard envelope.body.count <= settings.maxMessageSize else {
            return complete(
                request, .failure(.messageTooLarge(size: envelope.body.count, limit: settings.maxMessageSize)))
        }
        // This node in a target set is skipped, not an error (Apple's `Participants`): an app
        // that sends its state to "everyone who just joined" often names itself too.
        var seen: Set<NodeID> = [localID]
        let recipients = (targets ?? activeMemberIDs).filter { seen.insert($0).inserted }
        do {
            let (sendID, directives) = try delivery.send(
                envelope.encoded, to: recipients, mode: mode, now: now,
                timeout: timeout)
            // The completion may be among the directives (unreliable, no targets): registered first.
            waits.sends[sendID] = (request, Set(recipients).count, mode == .reliable)
            apply(directives, now: now)
        } catch {
            // Only an envelope whose tag takes it past the limit gets here.
            complete(request, .failure(.messageTooLarge(size: envelope.body.count, limit: settings.maxMessageSize)))
        }
    }

    mutating func apply(_ directives: [DeliveryInstance.Directive], now: MeshInstant) {
        for directive in directives {
            switch directive {
            case let .send(peer, frames):
                sendPairwise(frames, to: peer)
            case let .deliver(received):
                switch received.stream {
                case .journal: receiveJournal(received.payload, from: received.from, now: now)
                case .application: deliver(received)
                }
            case let .consumerStalled(consumer):
                counters.consumersStalled += 1
                log(
                    .notice, "an application consumer drained nothing for the stall limit: cut off",
                    ["consumer": "\(consumer)"])
                emit(.applicationConsumerStalled(consumer))
            case let .completed(sendID, failures):
                if closing.ending != nil {
                    if closing.ending?.sendID == sendID { closing.ending?.sendID = nil }
                    finishEndingIfDrained(now: now)
                }
                // Journal messages complete here too; nobody waits for them.
                if let pending = waits.sends.removeValue(forKey: sendID) {
                    if pending.reliable {
                        counters.reliableUnconfirmed += UInt64(failures.count)
                        counters.reliableDelivered += UInt64(max(0, pending.recipients - failures.count))
                    }
                    complete(
                        pending.request,
                        failures.isEmpty
                            ? .success(.sent(recipients: pending.recipients))
                            : .failure(.notDelivered(failures)))
                }
                // A leave waiting for its last sends goes once they are acknowledged.
                if closing.handover != nil, delivery.pendingSends == 0, soleHeldAttachments().isEmpty {
                    advanceHandover(now: now)
                }
            }
        }
    }

    /// The shell's measure of one application consumer (a `listen`, a `messages()` stream):
    /// while any is behind, no new application message is taken from peers (`ConsumerFlow`).
    package mutating func applicationConsumer(_ consumer: UInt64, _ report: ConsumerFlow.Report, now: MeshInstant) {
        // A stopped node sends nothing more (its listens close as it stops).
        guard phase != .stopped else { return }
        let directives = delivery.applicationConsumer(consumer, report, now: now)
        apply(directives, now: now)
    }

    private mutating func deliver(_ received: DeliveryInstance.Received) {
        guard let envelope = MessageEnvelope(decoding: received.payload) else {
            counters.messagesMalformed += 1
            return log(.debug, "malformed message", ["from": "\(received.from)"])
        }
        emit(
            .message(
                NodeMessage(
                    from: received.from, fromName: membership.member(received.from)?.record.name ?? "",
                    mode: received.mode, type: envelope.type, body: envelope.body)))
    }
}
