import Foundation
import MeshCore
import MeshCrypto
import NIOCore

extension MeshNode {
    // MARK: sending and receiving

    /// Sends `envelope` to `targets` (nil: every active member but us). Reliable sends return once
    /// every target acknowledged and throw `notDelivered` naming those that did not; unreliable
    /// sends return once the datagrams are out. Returns how many members it went to.
    @discardableResult
    public func sendMessage(_ envelope: MessageEnvelope, to targets: [NodeID]?, mode: DeliveryInstance.Mode,
                            timeout: Duration? = nil) async throws(MessengerError) -> Int {
        guard envelope.body.count <= Messenger.maxMessageSize else {
            throw .tooLarge(size: envelope.body.count, limit: Messenger.maxMessageSize)
        }
        guard !stopped else { throw .notRunning }
        let recipients = targets ?? activeMemberIDs
        let sendID: UInt64
        do {
            let (id, directives) = try delivery.send(envelope.encoded, to: recipients, mode: mode, now: now, timeout: timeout)
            sendID = id
            // The completion may already be among the directives (unreliable, empty targets):
            // register first so it is not missed.
            let failures = await withCheckedContinuation { continuation in
                pendingSends[sendID] = continuation
                perform(directives)
                rearm()
            }
            guard failures.isEmpty else {
                var named: [String: DeliveryInstance.Failure] = [:]
                for (id, reason) in failures { named[displayName(of: id)] = reason }
                throw MessengerError.notDelivered(named)
            }
        } catch let error as DeliveryError {
            if case let .tooLarge(size, limit) = error { throw .tooLarge(size: size, limit: limit) }
            throw .notRunning
        } catch let error as MessengerError {
            throw error
        } catch {
            throw .notRunning
        }
        return recipients.count
    }

    /// Every message this node receives from now on.
    public func messages() -> AsyncStream<InboundMessage> {
        let (stream, continuation) = AsyncStream<InboundMessage>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        let id = nextSubscriptionID()
        messageSubscribers[id] = continuation
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { await self.removeMessageSubscriber(id) }
        }
        return stream
    }

    func removeMessageSubscriber(_ id: UInt64) { messageSubscribers[id] = nil }

    var activeMemberIDs: [NodeID] {
        members.dropFirst().filter { !$0.status.isGone }.map(\.id)
    }

    func displayName(of id: NodeID) -> String {
        let name = membership?.member(id)?.record.name ?? ""
        let prefix = String(id.hex.prefix(12))
        return name.isEmpty ? prefix : "\(name) (\(prefix))"
    }

    /// A member named by its full id, its name, or a unique prefix of its id.
    public func resolveMember(_ text: String) throws(MessengerError) -> NodeID {
        let known = members.dropFirst()
        let lowered = text.lowercased()
        if let exact = known.first(where: { $0.id.hex == lowered }) { return exact.id }
        let named = known.filter { $0.record.name == text }
        if named.count == 1 { return named[0].id }
        if named.count > 1 { throw .ambiguousMember(text, candidates: named.map { displayName(of: $0.id) }) }
        let prefixed = lowered.isEmpty ? [] : known.filter { $0.id.hex.hasPrefix(lowered) }
        if prefixed.count == 1 { return prefixed[0].id }
        if prefixed.count > 1 { throw .ambiguousMember(text, candidates: prefixed.map { displayName(of: $0.id) }) }
        throw .unknownMember(text)
    }

    func perform(_ directives: [DeliveryInstance.Directive]) {
        for directive in directives {
            switch directive {
            case let .send(peer, frames):
                guard let address = peerAddresses[peer],
                      let datagram = codec.seal(frames, to: peer, allocator: channelAllocator) else { continue }
                send(datagram, to: address)
            case let .deliver(received):
                guard let envelope = MessageEnvelope(decoding: received.payload) else { continue }
                if envelope.type == JournalMessage.typeTag {
                    receiveJournal(envelope.body, from: received.from, mode: received.mode)
                    continue
                }
                let message = InboundMessage(from: received.from,
                                             fromName: membership?.member(received.from)?.record.name ?? "",
                                             mode: received.mode, type: envelope.type, body: envelope.body)
                for subscriber in messageSubscribers.values { subscriber.yield(message) }
            case let .completed(sendID, failures):
                pendingSends.removeValue(forKey: sendID)?.resume(returning: failures)
            }
        }
    }

    // MARK: control socket

    func controlSend(_ request: ControlRequest, responder: ControlResponder) {
        guard let encoded = request.base64, let body = Data(base64Encoded: encoded) else {
            responder.send(.failure("send needs a base64 message body"))
            return
        }
        let targets: [NodeID]?
        do {
            targets = try request.to.flatMap { names in names.isEmpty ? nil : try names.map(resolveMember) }
        } catch {
            responder.send(.failure("\(error)"))
            return
        }
        let mode: DeliveryInstance.Mode = request.unreliable == true ? .unreliable : .reliable
        let envelope = MessageEnvelope(type: Messenger.dataType, body: Array(body))
        Task { await self.sendAndAnswer(envelope, to: targets, mode: mode, responder: responder) }
    }

    private func sendAndAnswer(_ envelope: MessageEnvelope, to targets: [NodeID]?, mode: DeliveryInstance.Mode,
                               responder: ControlResponder) async {
        do {
            let count = try await sendMessage(envelope, to: targets, mode: mode)
            responder.send(ControlResponse(ok: true, delivered: count))
        } catch {
            responder.send(.failure(error.description))
        }
    }

    func controlListen(responder: ControlResponder) {
        let id = nextSubscriptionID()
        let (stream, continuation) = AsyncStream<InboundMessage>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        messageSubscribers[id] = continuation
        responder.onClose = { [weak self] in
            continuation.finish()
            guard let self else { return }
            self.assumeIsolated { $0.removeMessageSubscriber(id) }
        }
        responder.send(ControlResponse(ok: true, subscribed: true))
        Task { await self.relay(stream, to: responder) }
    }

    /// Writes each received message to a `listen` connection, on the node's event loop.
    private func relay(_ stream: AsyncStream<InboundMessage>, to responder: ControlResponder) async {
        for await message in stream {
            let text = String(validating: message.body, as: UTF8.self)
            let info = ReceivedMessageInfo(from: message.from.hex, fromName: message.fromName,
                                           mode: message.mode == .reliable ? "reliable" : "unreliable",
                                           type: message.type, text: text,
                                           base64: text == nil ? Data(message.body).base64EncodedString() : nil)
            responder.send(ControlResponse(ok: true, message: info))
        }
    }
}
