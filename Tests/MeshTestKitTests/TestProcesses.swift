import MeshCore
import MeshTestKit

/// Tiny node behaviours for exercising the simulator; they know nothing of any protocol.

struct Received: Equatable {
    var from: SimAddress
    var bytes: [UInt8]
    var at: MeshInstant
}

/// Records every datagram; replies with the same bytes when `echoes`.
final class EchoProcess: SimulatedProcess {
    let echoes: Bool
    var received: [Received] = []
    var started: [MeshInstant] = []
    var firedTimers: [UInt64] = []
    /// Timers to arm at start: (id, delay).
    var timersAtStart: [(UInt64, Duration)]

    init(echoes: Bool = true, timersAtStart: [(UInt64, Duration)] = []) {
        self.echoes = echoes
        self.timersAtStart = timersAtStart
    }

    func start(now: MeshInstant, context: inout SimContext) {
        started.append(now)
        for (id, delay) in timersAtStart { context.schedule(timer: id, after: delay) }
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        received.append(Received(from: sender, bytes: datagram, at: now))
        if echoes { context.send(datagram, to: sender) }
    }

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        firedTimers.append(id)
    }

    /// Sequence numbers of received datagrams made by `SenderProcess.payload`.
    var sequenceNumbers: [Int] { received.map { SenderProcess.sequence(of: $0.bytes) } }
}

/// Sends `count` numbered datagrams of `size` bytes to `target`, one every `interval`
/// (all at start when `interval` is zero), and records what comes back.
final class SenderProcess: SimulatedProcess {
    static let sendTimer: UInt64 = 1

    let target: SimAddress
    let count: Int
    let interval: Duration
    let size: Int
    private(set) var sent = 0
    var received: [Received] = []

    init(target: SimAddress, count: Int, interval: Duration = .milliseconds(1), size: Int = 16) {
        precondition(size >= 4)
        self.target = target
        self.count = count
        self.interval = interval
        self.size = size
    }

    static func payload(_ sequence: Int, size: Int) -> [UInt8] {
        let value = UInt32(sequence)
        return [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
            + (0..<(size - 4)).map { UInt8(truncatingIfNeeded: sequence &+ $0) }
    }

    static func sequence(of bytes: [UInt8]) -> Int {
        bytes.prefix(4).reduce(0) { $0 << 8 | Int($1) }
    }

    func start(now: MeshInstant, context: inout SimContext) {
        if interval == .zero {
            while sent < count { sendNext(&context) }
        } else {
            sendNext(&context)
        }
    }

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        sendNext(&context)
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        received.append(Received(from: sender, bytes: datagram, at: now))
    }

    private func sendNext(_ context: inout SimContext) {
        guard sent < count else { return }
        context.send(Self.payload(sent, size: size), to: target)
        sent += 1
        if sent < count && interval > .zero { context.schedule(timer: Self.sendTimer, after: interval) }
    }
}

/// Arms a plan of timers at start, records when each fires (on its own clock), and can
/// re-arm or cancel on firing.
final class TimerProcess: SimulatedProcess {
    struct Firing: Equatable {
        var id: UInt64
        var at: MeshInstant
    }

    var plan: [(id: UInt64, after: Duration)]
    var cancelAtStart: [UInt64]
    /// When timer `id` fires, arm these (id, after).
    var onFire: [UInt64: [(UInt64, Duration)]]
    var firings: [Firing] = []
    var startedAt: MeshInstant?

    init(
        plan: [(id: UInt64, after: Duration)], cancelAtStart: [UInt64] = [],
        onFire: [UInt64: [(UInt64, Duration)]] = [:]
    ) {
        self.plan = plan
        self.cancelAtStart = cancelAtStart
        self.onFire = onFire
    }

    func start(now: MeshInstant, context: inout SimContext) {
        startedAt = now
        for step in plan { context.schedule(timer: step.id, after: step.after) }
        for id in cancelAtStart { context.cancel(timer: id) }
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {}

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        firings.append(Firing(id: id, at: now))
        for (next, after) in onFire[id] ?? [] { context.schedule(timer: next, after: after) }
    }
}

/// A runaway node: every timer re-arms itself for "now", so simulated time never advances.
final class BusyLoopProcess: SimulatedProcess {
    var spins = 0
    func start(now: MeshInstant, context: inout SimContext) { context.schedule(timer: 0, at: now) }
    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {}
    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        spins += 1
        context.schedule(timer: 0, at: now)
    }
}

/// Gossips random bytes to random peers on a timer, using its own random stream: a busy,
/// randomised workload for determinism checks.
final class ChatterProcess: SimulatedProcess {
    let peers: Int
    var received = 0

    init(peers: Int) { self.peers = peers }

    func start(now: MeshInstant, context: inout SimContext) {
        context.schedule(timer: 1, after: .milliseconds(Int64(context.random.next(in: 1...5))))
    }

    func receive(datagram: [UInt8], from sender: SimAddress, now: MeshInstant, context: inout SimContext) {
        received += 1
        if context.random.chance(0.3) { context.send(Array(datagram.reversed()), to: sender) }
    }

    func timerFired(_ id: UInt64, now: MeshInstant, context: inout SimContext) {
        let target = SimAddress(context.random.next(in: 0...(peers - 1)))
        let size = context.random.next(in: 1...64)
        context.send((0..<size).map { _ in UInt8(truncatingIfNeeded: context.random.next()) }, to: target)
        context.schedule(timer: 1, after: .milliseconds(Int64(context.random.next(in: 1...5))))
    }
}

extension MeshInstant {
    static func ms(_ value: Int64) -> MeshInstant { .zero + .milliseconds(value) }
}
