import MeshCore
import MeshCrypto
import MeshTestKit
import NIOCore
import Testing

/// A `DeliveryInstance` as a simulated process. A datagram is the sender's id (16 bytes), an
/// 8-byte FNV-1a checksum of id and frames standing in for the AEAD tag (so a corrupted datagram
/// is dropped, as sealing would drop it), then the real frame encoding.
///
/// One timer (`tickTimer`) follows `nextDeadline`; a second one (`scriptTimer`) runs the test's
/// planned actions (sends, peer removals) at their times. Plan actions before the simulation
/// starts: the script timer is armed from `start` and re-armed after every callback.
///
/// After every callback the node checks the sending invariants of each channel and records any
/// violation in `violations` (the test asserts it stays empty).
final class DeliveryProcess: SimulatedProcess {
    typealias Directive = DeliveryInstance.Directive
    typealias Action = (DeliveryProcess, MeshInstant) -> [Directive]

    static let tickTimer: UInt64 = 1
    static let scriptTimer: UInt64 = 2

    struct Delivery {
        var time: MeshInstant
        var from: NodeID
        var mode: DeliveryInstance.Mode
        var payload: [UInt8]
    }

    struct Completion {
        var time: MeshInstant
        var failures: [NodeID: DeliveryInstance.Failure]
    }

    struct Planned {
        var time: MeshInstant
        var action: Action
    }

    let address: SimAddress
    let id: NodeID
    private(set) var instance: DeliveryInstance
    private var addresses: [NodeID: SimAddress] = [:]
    private var script: [Planned] = []

    private(set) var deliveries: [Delivery] = []
    private(set) var completions: [UInt64: Completion] = [:]
    /// Send ids by the label the test gave the send.
    private(set) var sendIDs: [String: UInt64] = [:]
    private(set) var refused: [String: DeliveryError] = [:]
    private(set) var rejected = 0
    /// Largest frame payload of one datagram (envelope excluded).
    private(set) var largestPayload = 0
    /// Data chunks sent, first transmissions and retransmissions alike, per peer.
    private(set) var dataChunksSent: [NodeID: Int] = [:]
    private(set) var fragmentsSent = 0
    /// When the consumer was declared stalled and cut off.
    private(set) var stalledConsumerAt: MeshInstant?
    private(set) var consumerBehindSinceWhenCut: MeshInstant?
    /// Invariant violations seen after some callback (must stay empty).
    private(set) var violations: [String] = []
    /// Highest `bytesInFlight / window` seen right after the sender put data on the wire.
    private(set) var fullestWindow = 0.0
    /// Callbacks after which the invariants were checked.
    private(set) var checks = 0
    private var largestWindow: [NodeID: Int] = [:]
    /// The application consumer, when the test gives this node one (`SimConsumer`).
    private(set) var consumer: SimConsumer?

    init(address: SimAddress, settings: DeliveryInstance.Settings = .init()) {
        self.address = address
        self.id = Self.nodeID(address)
        self.instance = DeliveryInstance(settings: settings)
    }

    static func nodeID(_ address: SimAddress) -> NodeID {
        NodeID(high: 0x6d65_7368_0000_0000, low: UInt64(address.index + 1))
    }

    /// Opens channels to every address but this node's own.
    func connect(to peers: [SimAddress]) {
        for peer in peers where peer != address {
            let peerID = Self.nodeID(peer)
            addresses[peerID] = peer
            instance.addPeer(peerID)
        }
    }

    /// Runs `action` when this node's clock reads `time`.
    func plan(at time: MeshInstant, _ action: @escaping Action) {
        let index = script.firstIndex { $0.time > time } ?? script.count
        script.insert(Planned(time: time, action: action), at: index)
    }

    /// Plans a send; its id is recorded under `label`, or its refusal in `refused`.
    func planSend(
        _ label: String, at time: MeshInstant, payload: [UInt8], to targets: [SimAddress],
        mode: DeliveryInstance.Mode = .reliable, timeout: Duration? = nil
    ) {
        plan(at: time) { process, now in
            process.send(label, payload: payload, to: targets.map(Self.nodeID), mode: mode, now: now, timeout: timeout)
        }
    }

    func send(
        _ label: String, payload: [UInt8], to targets: [NodeID], mode: DeliveryInstance.Mode,
        now: MeshInstant, timeout: Duration?
    ) -> [Directive] {
        do {
            let (sendID, directives) = try instance.send(payload, to: targets, mode: mode, now: now, timeout: timeout)
            sendIDs[label] = sendID
            return directives
        } catch {
            refused[label] = error
            return []
        }
    }

    func removePeer(_ peer: SimAddress, now: MeshInstant) -> [Directive] {
        instance.removePeer(Self.nodeID(peer), now: now)
    }

    func completion(_ label: String) -> Completion? {
        sendIDs[label].flatMap { completions[$0] }
    }

    /// Reliable or unreliable payloads delivered from `peer`, in delivery order.
    func payloads(from peer: SimAddress, mode: DeliveryInstance.Mode = .reliable) -> [[UInt8]] {
        let peerID = Self.nodeID(peer)
        return deliveries.filter { $0.from == peerID && $0.mode == mode }.map(\.payload)
    }

    // MARK: SimulatedProcess

    func start(now: MeshInstant, context: inout SimContext) {
        perform([], now: now, context: &context)
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        guard let (from, frames) = SimEnvelope.openFrames(datagram) else {
            rejected += 1
            return
        }
        perform(instance.onFrames(frames, from: from, now: now), now: now, context: &context)
    }

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        var directives: [Directive] = []
        if id == Self.tickTimer {
            directives = instance.onTick(now: now)
        } else {
            while let first = script.first, first.time <= now {
                script.removeFirst()
                directives += first.action(self, now)
            }
        }
        perform(directives, now: now, context: &context)
    }

    /// Gives this node an application consumer that drains `bytesPerSecond` (0: stalled) from
    /// `start`, in steps of `step`, and reports itself behind over `bound` queued bytes.
    func addConsumer(bound: Int, bytesPerSecond: Int, step: Duration = .milliseconds(10), from start: MeshInstant) {
        consumer = SimConsumer(bound: bound, bytesPerSecond: bytesPerSecond)
        plan(at: start) { process, now in process.drainConsumer(step: step, now: now) }
    }

    /// Sets how fast the consumer drains from now on (0: it stops).
    func setConsumerRate(_ bytesPerSecond: Int) { consumer?.bytesPerSecond = bytesPerSecond }

    private func drainConsumer(step: Duration, now: MeshInstant) -> [Directive] {
        guard consumer != nil else { return [] }
        plan(at: now + step) { process, now in process.drainConsumer(step: step, now: now) }
        guard let report = consumer?.drain(for: step) else { return [] }
        return instance.applicationConsumer(SimConsumer.id, report, now: now)
    }

    private func perform(_ directives: [Directive], now: MeshInstant, context: inout SimContext) {
        var sentData: Set<NodeID> = []
        var queue = directives[...]
        while let directive = queue.popFirst() {
            switch directive {
            case let .send(peer, frames):
                guard let destination = addresses[peer] else {
                    violations.append("\(now): send to a peer with no address \(peer)")
                    continue
                }
                let datagram = Self.envelope(from: id, frames: frames)
                largestPayload = max(largestPayload, datagram.count - SimEnvelope.overhead)
                for frame in frames {
                    switch frame {
                    case .data:
                        dataChunksSent[peer, default: 0] += 1
                        sentData.insert(peer)
                    case .fragment:
                        fragmentsSent += 1
                    default:
                        break
                    }
                }
                context.send(datagram, to: destination)
            case let .deliver(received):
                deliveries.append(
                    Delivery(time: now, from: received.from, mode: received.mode, payload: received.payload))
                if let report = consumer?.enqueue(received.payload.count, now: now) {
                    queue += instance.applicationConsumer(SimConsumer.id, report, now: now)
                }
            case let .consumerStalled(id):
                // The shell disconnects it: what it had queued is lost with it, and it holds nothing.
                if id == SimConsumer.id, let cut = consumer {
                    consumer = nil
                    stalledConsumerAt = now
                    consumerBehindSinceWhenCut = cut.behindSince
                    queue += instance.applicationConsumer(id, .caughtUp, now: now)
                }
            case let .completed(sendID, failures):
                if completions[sendID] != nil { violations.append("\(now): send \(sendID) completed twice") }
                completions[sendID] = Completion(time: now, failures: failures)
            }
        }
        checkInvariants(sentData: sentData, now: now)
        if let deadline = instance.nextDeadline {
            context.schedule(timer: Self.tickTimer, at: deadline)
        } else {
            context.cancel(timer: Self.tickTimer)
        }
        if let next = script.first {
            context.schedule(timer: Self.scriptTimer, at: next.time)
        }
    }

    /// Bytes in flight never exceed the window. Checked after every callback: whenever the
    /// sender put data on the wire, what is in flight is within its current window; and at every
    /// step it is within the largest window the sender has had. (A window may shrink under bytes
    /// already in flight — a halved congestion window, a smaller advertised window — as in any
    /// TCP-like sender; what must never happen is sending into a full window.)
    private func checkInvariants(sentData: Set<NodeID>, now: MeshInstant) {
        checks += 1
        for peer in instance.peers {
            guard let sender = instance.sender(for: peer) else { continue }
            largestWindow[peer] = max(largestWindow[peer] ?? 0, sender.window)
            if sender.bytesInFlight < 0 || sender.bytesInFlight > largestWindow[peer]! {
                violations.append("\(now): \(bytesText(sender)) to \(peer), largest window \(largestWindow[peer]!)")
            }
            if sentData.contains(peer) {
                if sender.bytesInFlight > sender.window {
                    violations.append("\(now): sent data with \(bytesText(sender)) to \(peer)")
                }
                fullestWindow = max(fullestWindow, Double(sender.bytesInFlight) / Double(sender.window))
            }
        }
    }

    private func bytesText(_ sender: ReliableSender) -> String {
        "\(sender.bytesInFlight) bytes in flight, window \(sender.window)"
    }

    static func envelope(from sender: NodeID, frames: [Frame]) -> [UInt8] {
        SimEnvelope.seal(from: sender, frames: frames)
    }
}

/// A simulated group of delivery processes that all know each other.
final class DeliveryMesh {
    let simulator: Simulator
    let nodes: [SimAddress]
    let processes: [DeliveryProcess]

    init(count: Int, seed: UInt64, link: LinkConditions = .default, settings: DeliveryInstance.Settings = .init()) {
        let simulator = Simulator(seed: seed, defaultLink: link)
        let addresses = (0..<count).map { SimAddress($0) }
        let processes = addresses.map { DeliveryProcess(address: $0, settings: settings) }
        for process in processes { process.connect(to: addresses) }
        self.nodes = processes.map { simulator.addNode($0) }
        self.simulator = simulator
        self.processes = processes
    }

    subscript(_ node: SimAddress) -> DeliveryProcess { processes[node.index] }

    var violations: [String] { processes.flatMap(\.violations) }
}

/// A message body that names its sender and sequence number, then `size - 8` bytes derived
/// from both, so a delivery can be checked byte for byte.
func numberedPayload(from sender: Int, sequence: Int, size: Int) -> [UInt8] {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(size)
    let header =
        withUnsafeBytes(of: UInt32(sender).bigEndian, Array.init)
        + withUnsafeBytes(of: UInt32(sequence).bigEndian, Array.init)
    bytes += header.prefix(size)
    var state = UInt64(sender) << 32 | UInt64(sequence)
    while bytes.count < size {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        bytes.append(UInt8(truncatingIfNeeded: state >> 33))
    }
    return bytes
}

/// `count` bytes of a simple pattern, distinct per `salt`.
func patternBytes(_ count: Int, salt: UInt8 = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8 &+ Int(salt)) }
}

/// Records an issue when `got` differs from `expected`, describing both briefly (sizes and the
/// numbered header) instead of dumping every byte of every message.
func expectMessages(
    _ got: [[UInt8]], _ expected: [[UInt8]], _ context: @autoclosure () -> String = "",
    sourceLocation: SourceLocation = #_sourceLocation
) {
    guard got != expected else { return }
    let firstDifference = Array(zip(got, expected)).firstIndex { $0.0 != $0.1 } ?? min(got.count, expected.count)
    Issue.record(
        "\(context()) got \(describeMessages(got)), expected \(describeMessages(expected)); first difference at \(firstDifference)",
        sourceLocation: sourceLocation)
}

/// "3 messages: 1000B(0.0) 1000B(0.1) 8B(0.2)" — the size, and for numbered payloads the
/// sender and sequence number.
func describeMessages(_ messages: [[UInt8]]) -> String {
    let shown = messages.prefix(12).map { message -> String in
        guard message.count >= 8 else { return "\(message.count)B" }
        let sender = message[0..<4].reduce(0) { $0 << 8 | Int($1) }
        let sequence = message[4..<8].reduce(0) { $0 << 8 | Int($1) }
        return "\(message.count)B(\(sender).\(sequence))"
    }
    return "\(messages.count) messages: " + shown.joined(separator: " ") + (messages.count > 12 ? " …" : "")
}

/// An application consumer as the shell measures one (a `listen`): delivered messages queue
/// for it, it takes `bytesPerSecond`; over `bound` queued bytes it is behind (said again at each
/// step that drained something), and under half of it caught up.
struct SimConsumer {
    static let id: UInt64 = 1

    let bound: Int
    var bytesPerSecond: Int
    private(set) var queued = 0
    private(set) var largestQueued = 0
    private(set) var consumedBytes = 0
    private(set) var behindSince: MeshInstant?
    private var behind = false
    private var credit = 0.0

    init(bound: Int, bytesPerSecond: Int) {
        self.bound = bound
        self.bytesPerSecond = bytesPerSecond
    }

    mutating func enqueue(_ bytes: Int, now: MeshInstant) -> ConsumerFlow.Report? {
        queued += bytes
        largestQueued = max(largestQueued, queued)
        guard !behind, queued > bound else { return nil }
        behind = true
        behindSince = now
        return .behind
    }

    mutating func drain(for step: Duration) -> ConsumerFlow.Report? {
        let seconds = Double(step.components.seconds) + Double(step.components.attoseconds) / 1e18
        credit += Double(bytesPerSecond) * seconds
        let taken = min(queued, Int(credit))
        credit -= Double(taken)
        if queued == 0 { credit = 0 }
        queued -= taken
        consumedBytes += taken
        guard behind, taken > 0 else { return nil }
        if queued <= bound / 2 {
            behind = false
            return .caughtUp
        }
        return .behind
    }
}
