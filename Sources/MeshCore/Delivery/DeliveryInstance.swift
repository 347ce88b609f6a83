import MeshCrypto

/// The messenger's protocol for all peers, as a pure state machine (GroupSessionMessenger's
/// model): a reliable channel per peer (`ReliableSender` + `ReliableReceiver`), unreliable
/// fragments with bounded reassembly, and the bookkeeping that turns per-peer acknowledgements
/// into one result per send. The shell seals each `.send` for its peer with the pairwise key.
package struct DeliveryInstance: Sendable {
    package struct Settings: Sendable, Equatable {
        /// The largest message body (GroupSessionMessenger's limit).
        package var maxMessageSize = 256 * 1024
        /// Room for frames in one datagram.
        package var datagramBudget = 1142
        /// How long `send` waits for every target's acknowledgement by default.
        package var defaultTimeout: Duration = .seconds(10)
        /// Out-of-order bytes buffered per peer; also the window it advertises.
        package var receiveCapacity = 1 << 20
        package var reassemblyCapacity = 1 << 20
        package var reassemblyTimeout: Duration = .seconds(5)
        package var sender = ReliableSender.Settings()
        /// How long a consumer that drains nothing may hold new application messages
        /// (`ConsumerFlow`): well under the default send timeout, so a message held behind a
        /// paused reader still has most of its timeout left once that reader is cut off.
        package var consumerStallLimit: Duration = .seconds(3)
        package init() {}

        /// Chunk size: a full datagram less the frame headers and room for a piggybacked ack.
        package var fragmentSize: Int {
            datagramBudget - FrameCodec.headerLength - DataChunk.overhead - Self.ackRoom
        }

        /// An ack with a couple of ranges fits beside a full chunk.
        static let ackRoom = FrameCodec.headerLength + 8 + 4 + 1 + 2 * 16
    }

    package enum Mode: UInt8, Sendable, Codable {
        case reliable = 0
        case unreliable = 1
    }

    package enum Failure: String, Sendable, Equatable, Codable {
        /// No acknowledgement before the send's deadline.
        case timedOut
        /// The member left or was declared dead before acknowledging.
        case departed
        /// We hold no channel to it (not a member, or no keys yet).
        case unknown
    }

    package struct Received: Sendable, Equatable {
        package var from: NodeID
        package var mode: Mode
        package var stream: DeliveryStream = .application
        package var payload: [UInt8]

        package init(from: NodeID, mode: Mode, stream: DeliveryStream = .application, payload: [UInt8]) {
            self.from = from
            self.mode = mode
            self.stream = stream
            self.payload = payload
        }
    }

    package enum Directive: Sendable, Equatable {
        case send(to: NodeID, frames: [Frame])
        case deliver(Received)
        /// A send finished: delivered to every target except those in `failures`.
        case completed(sendID: UInt64, failures: [NodeID: Failure])
        /// This application consumer drained nothing for the stall limit: it no longer holds
        /// acceptance, and the shell is to disconnect it.
        case consumerStalled(UInt64)
    }

    struct Channel: Sendable {
        var sender: ReliableSender
        var receiver: ReliableReceiver
        var reassembly: FragmentReassembly
        var ackDue = false

        /// The frames of each datagram to send now: a due ack first, then whatever the sender
        /// may send. Without `ackAlone`, a due ack goes only with data (else it stays due).
        mutating func datagrams(budget datagramBudget: Int, now: MeshInstant, ackAlone: Bool) -> [[Frame]] {
            var out: [[Frame]] = []
            while true {
                var frames: [Frame] = []
                var budget = datagramBudget
                let hasData = sender.hasSendable(now: now)
                if ackDue && (ackAlone || hasData) {
                    let ack = Frame.ack(receiver.ack)
                    budget -= FrameCodec.encodedLength(of: ack)
                    frames.append(ack)
                    ackDue = false
                }
                frames += sender.nextFrames(budget: budget, now: now)
                guard !frames.isEmpty else { break }
                out.append(frames)
            }
            return out
        }
    }

    struct Outgoing: Sendable {
        var remaining: Set<NodeID>
        var failures: [NodeID: Failure]
        var deadline: MeshInstant
    }

    package let settings: Settings
    private var channels: [NodeID: Channel] = [:]
    private var sends: [UInt64: Outgoing] = [:]
    private var nextSendID: UInt64 = 1
    private var consumers: ConsumerFlow
    /// Whether every receiver holds new application chunks (`consumers.isHolding`, applied).
    package private(set) var holdsApplication = false

    package init(settings: Settings = .init()) {
        self.settings = settings
        self.consumers = ConsumerFlow(stallLimit: settings.consumerStallLimit)
    }

    package var pendingSends: Int { sends.count }

    package func sender(for peer: NodeID) -> ReliableSender? { channels[peer]?.sender }

    /// Total retransmitted chunks, for the counters: never smaller than before (a metric's
    /// counter must not go back when a member's channel goes).
    package var retransmissions: UInt64 {
        channels.values.reduce(retransmissionsOfRemovedChannels) { $0 + $1.sender.retransmissions }
    }
    private var retransmissionsOfRemovedChannels: UInt64 = 0

    /// Opens the channels to a member (when its keys are installed).
    package mutating func addPeer(_ id: NodeID) {
        guard channels[id] == nil else { return }
        channels[id] = Channel(
            sender: ReliableSender(settings: settings.sender),
            receiver: ReliableReceiver(capacity: settings.receiveCapacity),
            reassembly: FragmentReassembly(
                capacity: settings.reassemblyCapacity,
                timeout: settings.reassemblyTimeout))
        channels[id]?.receiver.holdsApplication = holdsApplication
    }

    // MARK: flow control

    /// What the shell measured of one application consumer; acceptance of new application
    /// messages pauses while any is behind, and resumes (with a window update to every peer that
    /// was refused something) once none is.
    package mutating func applicationConsumer(
        _ consumer: UInt64, _ report: ConsumerFlow.Report,
        now: MeshInstant
    ) -> [Directive] {
        consumers.report(consumer, report, now: now)
        return applyHold(now: now)
    }

    private mutating func applyHold(now: MeshInstant) -> [Directive] {
        let hold = consumers.isHolding
        guard hold != holdsApplication else { return [] }
        holdsApplication = hold
        var out: [Directive] = []
        for peer in peers {
            let refused = channels[peer]?.receiver.refusedWhileHeld ?? false
            channels[peer]?.receiver.holdsApplication = hold
            // The peer saw a zero window: tell it the window is open, or it waits for a timeout.
            if !hold, refused {
                channels[peer]?.ackDue = true
                out += flush(peer, now: now)
            }
        }
        return out
    }

    /// A member left or was declared dead: everything pending to it fails as `departed`, but
    /// the channel (its TSNs, what it received) stays, so that if the same boot comes back (a
    /// false death refuted) both ends still agree where they are; the abandoned messages are
    /// skipped with a forward TSN.
    package mutating func failPending(_ id: NodeID, now: MeshInstant) -> [Directive] {
        guard var channel = channels[id] else { return [] }
        var out: [Directive] = []
        let abandoned = channel.sender.abandonAll(now: now)
        channels[id] = channel
        for sendID in abandoned { fail(sendID, peer: id, reason: .departed, into: &out) }
        return out
    }

    /// A member restarted (new boot) or was forgotten: its channels go, pending sends fail.
    package mutating func removePeer(_ id: NodeID, now: MeshInstant) -> [Directive] {
        guard var channel = channels.removeValue(forKey: id) else { return [] }
        retransmissionsOfRemovedChannels += channel.sender.retransmissions
        var out: [Directive] = []
        for sendID in channel.sender.abandonAll(now: now) {
            fail(sendID, peer: id, reason: .departed, into: &out)
        }
        return out
    }

    package var peers: [NodeID] { channels.keys.sorted() }

    // MARK: sending

    /// Starts a send of `payload` to `targets`. Refused whole, before anything is queued, when
    /// the payload is over the limit. Returns the send's id and what to do now; a `.completed`
    /// for that id follows (at once for unreliable sends and empty target lists). The journal's
    /// stream is reliable only.
    package mutating func send(
        _ payload: [UInt8], to targets: [NodeID], mode: Mode,
        stream: DeliveryStream = .application, now: MeshInstant,
        timeout: Duration? = nil
    ) throws(DeliveryError) -> (sendID: UInt64, directives: [Directive]) {
        guard payload.count <= settings.maxMessageSize else {
            throw .tooLarge(size: payload.count, limit: settings.maxMessageSize)
        }
        let sendID = nextSendID
        nextSendID += 1
        var out: [Directive] = []
        var failures: [NodeID: Failure] = [:]
        var remaining: Set<NodeID> = []
        for target in Set(targets).sorted() {
            guard channels[target] != nil else { failures[target] = .unknown; continue }
            switch mode {
            case .reliable:
                channels[target]?.sender.enqueue(
                    messageID: sendID, payload: payload, fragmentSize: settings.fragmentSize,
                    stream: stream)
                remaining.insert(target)
            case .unreliable:
                guard stream == .application else { failures[target] = .unknown; continue }
                out += unreliableDatagrams(payload, id: sendID, to: target)
            }
        }
        if remaining.isEmpty {
            out.append(.completed(sendID: sendID, failures: failures))
        } else {
            sends[sendID] = Outgoing(
                remaining: remaining, failures: failures,
                deadline: now + (timeout ?? settings.defaultTimeout))
            for target in remaining.sorted() { out += flush(target, now: now) }
        }
        return (sendID, out)
    }

    private func unreliableDatagrams(_ payload: [UInt8], id: UInt64, to target: NodeID) -> [Directive] {
        let size = settings.datagramBudget - FrameCodec.headerLength - UnreliableFragment.overhead
        let count = max(1, (payload.count + size - 1) / size)
        return (0..<count).map { index in
            let body = Array(payload[min(payload.count, index * size)..<min(payload.count, (index + 1) * size)])
            let fragment = UnreliableFragment(messageID: id, index: UInt16(index), count: UInt16(count), body: body)
            return .send(to: target, frames: [.fragment(fragment)])
        }
    }

    // MARK: input

    /// Frames from one authenticated datagram of `peer`. With `deferAcks`, an acknowledgement
    /// that has no data to ride with waits for `flushAcks` (the shell calls it once per read
    /// batch), so a burst of datagrams is acknowledged once, never later than the batch's end.
    package mutating func onFrames(
        _ frames: [Frame], from peer: NodeID, now: MeshInstant,
        deferAcks: Bool = false
    ) -> [Directive] {
        // Most datagrams of a transfer carry no messenger frame: they cost nothing here (reading
        // a channel out of the table would copy it).
        guard frames.contains(where: \.isDelivery), channels.index(forKey: peer) != nil else { return [] }
        var out: [Directive] = []
        for frame in frames {
            switch frame {
            case let .data(chunk):
                channels[peer]?.ackDue = true
                for message in channels[peer]?.receiver.onData(chunk) ?? [] {
                    out.append(
                        .deliver(
                            Received(from: peer, mode: .reliable, stream: message.stream, payload: message.payload)))
                }
            case let .forwardTSN(forward):
                channels[peer]?.ackDue = true
                for message in channels[peer]?.receiver.onForward(forward) ?? [] {
                    out.append(
                        .deliver(
                            Received(from: peer, mode: .reliable, stream: message.stream, payload: message.payload)))
                }
            case let .ack(ack):
                for sendID in channels[peer]?.sender.onAck(ack, now: now) ?? [] {
                    acknowledge(sendID, peer: peer, into: &out)
                }
            case let .fragment(fragment):
                if let payload = channels[peer]?.reassembly.onFragment(fragment, now: now) {
                    out.append(.deliver(Received(from: peer, mode: .unreliable, payload: payload)))
                }
            default:
                break
            }
        }
        out += flush(peer, now: now, ackAlone: !deferAcks)
        return out
    }

    /// Sends the acknowledgements deferred during a read batch.
    package mutating func flushAcks(now: MeshInstant) -> [Directive] {
        var out: [Directive] = []
        for peer in peers where channels[peer]?.ackDue == true { out += flush(peer, now: now) }
        return out
    }

    package mutating func onTick(now: MeshInstant) -> [Directive] {
        var out: [Directive] = []
        giveUp(now: now, into: &out) { now >= $0.deadline }
        for consumer in consumers.expire(now: now) { out.append(.consumerStalled(consumer)) }
        out += applyHold(now: now)
        for peer in peers {
            channels[peer]?.sender.onTimeout(now: now)
            channels[peer]?.reassembly.expire(now: now)
            out += flush(peer, now: now)
        }
        return out
    }

    /// A leave's wait is over: every send still waiting gives up on the members that have not
    /// acknowledged it (`timedOut`), as its own deadline would, rather than failing whole when
    /// the node stops.
    package mutating func giveUpAll(now: MeshInstant) -> [Directive] {
        var out: [Directive] = []
        giveUp(now: now, into: &out) { _ in true }
        return out
    }

    private mutating func giveUp(
        now: MeshInstant, into out: inout [Directive], where due: (Outgoing) -> Bool
    ) {
        for (sendID, outgoing) in sends.sorted(by: { $0.key < $1.key }) where due(outgoing) {
            for peer in outgoing.remaining.sorted() {
                channels[peer]?.sender.abandon(messageID: sendID, now: now)
                fail(sendID, peer: peer, reason: .timedOut, into: &out)
            }
        }
    }

    /// When `onTick` must run next (nil: nothing is waiting).
    package var nextDeadline: MeshInstant? {
        var deadline: MeshInstant?
        func consider(_ instant: MeshInstant?) {
            guard let instant else { return }
            deadline = deadline.map { min($0, instant) } ?? instant
        }
        for outgoing in sends.values { consider(outgoing.deadline) }
        consider(consumers.nextDeadline)
        for channel in channels.values {
            consider(channel.sender.timerDeadline)
            consider(channel.reassembly.earliestExpiry)
        }
        return deadline
    }

    // MARK: output

    /// `Channel.datagrams` for `peer` (at most `datagramBudget`), as send directives.
    private mutating func flush(_ peer: NodeID, now: MeshInstant, ackAlone: Bool = true) -> [Directive] {
        // Changed where it lies in `channels`: copied out and written back, every member's
        // channel cost a retain and a release of each of its parts at every tick, and a copy of
        // whatever queue its sender changed (about a tenth of a pacing holder's tick, perf).
        let datagrams = channels[peer]?.datagrams(budget: settings.datagramBudget, now: now, ackAlone: ackAlone) ?? []
        return datagrams.map { .send(to: peer, frames: $0) }
    }

    private mutating func acknowledge(_ sendID: UInt64, peer: NodeID, into out: inout [Directive]) {
        guard var outgoing = sends[sendID] else { return }
        outgoing.remaining.remove(peer)
        finish(sendID, outgoing, into: &out)
    }

    private mutating func fail(_ sendID: UInt64, peer: NodeID, reason: Failure, into out: inout [Directive]) {
        guard var outgoing = sends[sendID], outgoing.remaining.remove(peer) != nil else { return }
        outgoing.failures[peer] = reason
        finish(sendID, outgoing, into: &out)
    }

    private mutating func finish(_ sendID: UInt64, _ outgoing: Outgoing, into out: inout [Directive]) {
        if outgoing.remaining.isEmpty {
            sends[sendID] = nil
            out.append(.completed(sendID: sendID, failures: outgoing.failures))
        } else {
            sends[sendID] = outgoing
        }
    }
}

package enum DeliveryError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooLarge(size: Int, limit: Int)

    package var description: String {
        switch self {
        case let .tooLarge(size, limit):
            return
                "message of \(size) bytes is over the limit of \(limit) bytes (\(limit / 1024) KiB); nothing was sent"
        }
    }
}

extension Frame {
    /// A frame of the messenger's channels.
    var isDelivery: Bool {
        switch self {
        case .data, .ack, .forwardTSN, .fragment: return true
        default: return false
        }
    }
}
