import Foundation
import MeshCore
import MeshCrypto
import NIOCore

/// A received message as a `listen` client is sent it.
extension ReceivedMessageInfo {
    init(_ message: NodeMessage) {
        let text = String(validating: message.body, as: UTF8.self)
        self.init(
            from: message.from.hex, fromName: message.fromName,
            mode: message.mode == .reliable ? "reliable" : "unreliable", type: message.type, text: text,
            base64: text == nil ? Data(message.body).base64EncodedString() : nil)
    }
}

/// The control socket's requests (Docs/CLI.md §Control socket), answered on the node's event
/// loop. Requests that wait (a reliable send, an attach, a get) run as a task of their own, so
/// that a slow one never holds up the next request or the datagrams.
extension MeshNode {
    func handleControl(_ request: ControlRequest, responder: ControlResponder) {
        switch request {
        case .status:
            responder.send(.status(status()))
        case .invite:
            responder.send(.invite(invite().text))
        case let .leave(now):
            controlLeave(waitingForReplication: !now, responder: responder)
        case .end:
            controlEnd(responder: responder)
        case let .events(after):
            controlEvents(after: after, responder: responder)
        case let .ping(text):
            answer(responder) { node throws(GroupMeshError) in
                let (member, rtt, address) = try await node.ping(text)
                let name = await node.core.membership.member(member)?.record.name ?? ""
                return .pong(
                    PongInfo(
                        member: member.hex, name: name, address: address,
                        rttMs: rtt.map { (Double($0.nanosecondsClamped) / 1e3).rounded() / 1e3 }))
            }
        case let .send(body, to, unreliable):
            controlSend(body, to: to, mode: unreliable ? .unreliable : .reliable, responder: responder)
        case .listen:
            controlListen(responder: responder)
        case .attachments:
            responder.send(.attachments(attachmentInfos(withMetadata: true)))
        case let .attach(path, metadata):
            answer(responder) { node throws(GroupMeshError) in
                let entry = try await node.addAttachment(.file(path: path), metadata: Array((metadata ?? "").utf8))
                return .attachment(entry.id.hex)
            }
        case let .get(text, path, mode, replace):
            controlGet(text, to: .file(path: path, mode: mode, replace: replace), responder: responder)
        case let .remove(text):
            answer(responder) { node throws(GroupMeshError) in
                let entry = try await node.resolveAttachment(text)
                try await node.removeAttachment(entry.id)
                return .attachment(entry.id.hex)
            }
        case let .removeMember(text, withIntroduced, keep, keepIntroduced):
            answer(responder) { node throws(GroupMeshError) in
                let removal = try await node.removeMember(
                    text, withIntroduced: withIntroduced, keeping: keep, keepingAll: keepIntroduced)
                return .memberRemoved(
                    member: removal.id.hex, session: await node.core.session.sessionID.description,
                    delivered: removal.handedTo, introduced: removal.introduced.map(\.hex))
            }
        }
    }

    /// Runs `work` as its own task and sends what it returns, or its error as one line.
    @discardableResult
    private func answer(
        _ responder: ControlResponder,
        _ work: @escaping @Sendable (MeshNode) async throws(GroupMeshError) -> ControlResponse
    ) -> Task<Void, Never> {
        Task {
            do throws(GroupMeshError) {
                responder.send(try await work(self))
            } catch {
                responder.send(.refusal(error))
            }
        }
    }

    private func controlSend(
        _ body: [UInt8], to names: [String], mode: DeliveryInstance.Mode,
        responder: ControlResponder
    ) {
        var targets: [NodeID]? = names.isEmpty ? nil : []
        do {
            for text in names {
                // This node among them is skipped, as Apple's `Participants` does: a name only it has.
                if case .failure(.thisNode) = core.resolveMember(text) { continue }
                targets?.append(try resolveMember(text))
            }
        } catch {
            return responder.send(.refusal(error))
        }
        let envelope = MessageEnvelope(type: Messenger.dataType, body: body)
        Task {
            do throws(MessengerError) {
                let count = try await self.sendMessage(envelope, to: targets, mode: mode)
                responder.send(.sent(delivered: count))
            } catch {
                responder.send(.refusal(error))
            }
        }
    }

    private func controlListen(responder: ControlResponder) {
        // A second `listen` on one connection would send every message twice.
        guard !responder.isClosed, !listeners.contains(where: { $0 === responder }),
            !eventListeners.contains(where: { $0 === responder })
        else {
            return responder.send(.failure("this connection already follows a stream"))
        }
        responder.send(.subscribed)
        let consumer = nextConsumerID()
        responder.consumerID = consumer
        responder.onBacklog = { [unowned self] report in
            assumeIsolated { $0.reportConsumer(consumer, report) }
        }
        responder.onClose = { [unowned self] in
            assumeIsolated { node in node.listeners.removeAll { $0 === responder } }
        }
        listeners.append(responder)
    }

    /// The core found this consumer stalled (it drained nothing for the stall limit): a
    /// `listen` is disconnected, which the CLI reports in one line.
    func cutStalledConsumer(_ consumer: UInt64) {
        listeners.first { $0.consumerID == consumer }?.close()
        messageInboxes.inbox(consumer)?.markStalled()
    }

    /// One received message for the Swift API's readers that take its type.
    func deliverToInboxes(_ message: NodeMessage) {
        // A reader the app let go of while behind holds the node no longer.
        var dropped = 0
        var fellBehind: [UInt64] = []
        messageInboxes.forEachLive(gone: { reportConsumer($0, .caughtUp) }) { inbox in
            guard inbox.accepts(message) else { return }
            let delivery = inbox.deliver(message)
            dropped += delivery.dropped
            if delivery.fellBehind { fellBehind.append(inbox.consumer) }
        }
        messagesDroppedForSlowReaders += UInt64(dropped)
        for consumer in fellBehind { reportConsumer(consumer, .behind) }
    }

    private func controlEvents(after: UInt64?, responder: ControlResponder) {
        // One stream per connection: its close handler forgets it.
        guard !responder.isClosed, !eventListeners.contains(where: { $0 === responder }),
            !listeners.contains(where: { $0 === responder })
        else {
            return responder.send(.failure("this connection already follows a stream"))
        }
        responder.send(.subscribed)
        if let after {
            let (backlog, missed) = eventFeed.events(after: after)
            if missed > 0 { responder.sendStreamed(.missed(missed)) }
            for event in backlog { responder.sendStreamed(.event(event)) }
        }
        responder.onClose = { [unowned self] in
            assumeIsolated { node in node.eventListeners.removeAll { $0 === responder } }
        }
        eventListeners.append(responder)
    }

    /// New events to every `events` connection (and the event handlers).
    func publish(_ events: [MeshEvent]) {
        guard !events.isEmpty else { return }
        for listener in eventListeners {
            for event in events { listener.sendStreamed(.event(event)) }
        }
        eventHandlers?.run(events)
    }

    func deliverToListeners(_ message: NodeMessage) {
        let info = ReceivedMessageInfo(message)
        // A listener too far behind closes itself here, which removes it from `listeners`.
        for listener in listeners { listener.sendMessage(info) }
    }

    /// `{"ok": true}` once every member was told (or the grace passed), then the node stops.
    private func controlEnd(responder: ControlResponder) {
        Task {
            switch await self.beginEnd() {
            case .success: responder.send(.done)
            case let .failure(error): responder.send(.refusal(error))
            }
            await self.stop()
        }
    }

    /// The handover's progress at once and every 500 ms, then what the leave did; the node
    /// stops after the answer is written.
    private func controlLeave(waitingForReplication: Bool, responder: ControlResponder) {
        let reporter = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(500)) { [self] _ in
            assumeIsolated { node in
                if let info = node.leavingInfo() { responder.send(.leaving(info)) }
            }
        }
        Task {
            let report = await self.depart(waitingForReplication: waitingForReplication)
            reporter.cancel()
            if let report {
                responder.send(.left(LeaveSummary(report)))
            } else {
                responder.send(.failure("the node is stopping already"))
            }
            await self.stop()
        }
    }

    /// Progress every 250 ms until the file is written (the CLI draws it), then the answer. A
    /// client that goes away first (`get` interrupted) gives the load up.
    private func controlGet(_ text: String, to destination: ExportDestination, responder: ControlResponder) {
        let entry: AttachmentEntry
        do { entry = try resolveAttachment(text) } catch { return responder.send(.refusal(error)) }
        let reporter = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(250)) { [self] _ in
            assumeIsolated { node in responder.send(.progress(node.progress(of: entry))) }
        }
        let load = answer(responder) { node throws(GroupMeshError) in
            defer { reporter.cancel() }
            do throws(GroupMeshError) {
                _ = try await node.loadAttachment(entry.content, into: destination)
            } catch {
                switch error {
                case .unknownAttachment:
                    // It was there when the get began: removed since, by this node or another.
                    throw .refused(
                        "attachment \(entry.id.hex.prefix(16)) was removed from the session while it was being fetched; "
                            + "nothing was written", kind: .unavailable)
                // The core names the content; the user named the attachment.
                case .manifestUnavailable: throw .manifestUnavailable(attachment: entry.id.hex)
                case let .chunksUnavailable(_, missing, total):
                    throw .chunksUnavailable(attachment: entry.id.hex, missing: missing, total: total)
                default: throw error
                }
            }
            return .attachment(entry.id.hex)
        }
        responder.onClose = { load.cancel() }
    }
}
