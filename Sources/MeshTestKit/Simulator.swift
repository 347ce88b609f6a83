import MeshCore

/// A seeded, single-threaded, discrete-event simulation of nodes exchanging datagrams.
///
/// Why: every protocol rule must be testable deterministically, with thousands of nodes, lossy
/// links, partitions, crashes and clock jumps, in milliseconds of real time and with no socket.
/// The simulator is generic: it moves opaque datagrams and fires named timers; what a node does
/// is its `SimulatedProcess`.
///
/// Determinism: the clock is manual; pending events are ordered by (time, insertion order);
/// all randomness comes from `SeededGenerator`s forked from `seed` (one stream for the
/// network, one per node boot); no dictionary is ever iterated in an order that matters.
/// So one seed gives one exact sequence of events, and `trace` / `traceDigest` prove it.
///
/// Not thread-safe and not `Sendable`: a test owns its simulator.
package final class Simulator {
    package let seed: UInt64
    /// The simulation's (global) clock. A node's own clock is this plus its offset
    /// (see `jumpClock(of:by:)`).
    package internal(set) var now: MeshInstant
    /// Conditions for every directed link without its own (see `setLink(from:to:_:)`).
    package var defaultLink: LinkConditions
    package internal(set) var statistics = SimStatistics()
    /// Events handled so far (stale timers not counted).
    package internal(set) var eventsProcessed = 0

    /// What to do with trace events; can be changed mid-run.
    package var traceOptions: SimTraceOptions
    /// Every trace event so far, when `traceOptions` contains `.record`.
    package internal(set) var trace: [SimTraceEvent] = []
    /// Called with every trace event as it happens (e.g. to print a failing seed's run).
    package var onTrace: ((SimTraceEvent) -> Void)?
    /// A hash of every trace event so far, when `traceOptions` contains `.digest`.
    package var traceDigest: UInt64 { digest.value }

    enum Event {
        case start(node: Int, epoch: UInt32)
        /// `from` and `to` are the nodes at either end; `hop` what NATs on the way made of it.
        case deliver(from: SimAddress, to: SimAddress, bytes: [UInt8], hop: NATHop?)
        /// Off the wire, into the receiver's downlink queue.
        case reachDownlink(from: SimAddress, to: SimAddress, bytes: [UInt8], hop: NATHop?)
        /// A multicast on a LAN, to one of the sender's neighbours (no NAT on the way).
        case deliverMulticast(from: SimAddress, to: SimAddress, bytes: [UInt8])
        case timer(node: Int, epoch: UInt32, id: UInt64, token: UInt64)
        case action(label: String, (Simulator) -> Void)
    }

    enum NodeStatus { case booting, running, crashed }

    struct ArmedTimer {
        var token: UInt64
        /// In the node's own clock, so that a clock jump can move it.
        var deadline: MeshInstant
    }

    struct NodeSlot {
        var process: any SimulatedProcess
        var status: NodeStatus = .booting
        /// Bumped on every crash: events addressed to an earlier boot are stale.
        var epoch: UInt32 = 0
        var clockOffset: Duration = .zero
        var random: SeededGenerator
        /// Looked up by id only; iterated only after sorting (see `jumpClock`).
        var timers: [UInt64: ArmedTimer] = [:]
        /// 0 = the group of every node not named in the current partition.
        var partitionGroup = 0
        /// The access link (a home's line) the node sits behind, if any: `accessLinks[index]`.
        var accessLink: Int?
        /// The NAT box the node sits behind, if any: `nats[index]`.
        var nat: Int?
    }

    /// A line that nodes share to reach everyone else, with rate limits and queues each way
    /// (`addAccessLink`); traffic between its own nodes does not cross it.
    struct AccessLink {
        var uplink: BottleneckQueue?
        var downlink: BottleneckQueue?
    }

    var nodes: [NodeSlot] = []
    var queue = EventQueue()
    var links: [DirectedLink: LinkConditions] = [:]
    var accessLinks: [AccessLink] = []
    var nats: [SimNAT] = []
    var isPartitioned = false
    var networkRandom: SeededGenerator
    var bootRandom: SeededGenerator
    var nextTimerToken: UInt64 = 0
    var digest = TraceDigest()

    package init(
        seed: UInt64,
        defaultLink: LinkConditions = .default,
        trace: SimTraceOptions = [],
        startTime: MeshInstant = .zero
    ) {
        self.seed = seed
        self.defaultLink = defaultLink
        self.traceOptions = trace
        self.now = startTime
        var root = SeededGenerator(seed: seed)
        networkRandom = root.fork()
        bootRandom = root.fork()
    }

    // MARK: Nodes

    /// Adds a node; its `start` runs at `startTime` (default: now, after events already due).
    @discardableResult
    package func addNode(_ process: any SimulatedProcess, startingAt startTime: MeshInstant? = nil) -> SimAddress {
        let index = nodes.count
        nodes.append(NodeSlot(process: process, random: bootRandom.fork()))
        statistics.nodes.append(SimNodeStatistics())
        queue.push(.start(node: index, epoch: 0), at: max(startTime ?? now, now))
        return SimAddress(index)
    }

    /// Adds `count` nodes, each made by `make` from the address it will have.
    @discardableResult
    package func addNodes(_ count: Int, _ make: (SimAddress) -> any SimulatedProcess) -> [SimAddress] {
        (0..<count).map { _ in addNode(make(SimAddress(nodes.count))) }
    }

    /// Kills a node at once: it handles no more events, its timers are dropped, datagrams
    /// that reach it while it is down are dropped (`crashed`). Datagrams it already sent are
    /// on the wire and still arrive. The process object stays inspectable.
    package func crash(_ node: SimAddress) {
        let index = checked(node)
        guard nodes[index].status != .crashed else { return }
        nodes[index].status = .crashed
        nodes[index].epoch &+= 1
        nodes[index].timers.removeAll()
        record(.crashed(node))
    }

    /// Boots a new process at the same address (crashing the old one first if it is still
    /// up): fresh state, fresh random stream, same clock offset, as a restarted machine would.
    package func restart(_ node: SimAddress, with process: any SimulatedProcess, at startTime: MeshInstant? = nil) {
        let index = checked(node)
        crash(node)
        nodes[index].process = process
        nodes[index].status = .booting
        nodes[index].random = bootRandom.fork()
        queue.push(.start(node: index, epoch: nodes[index].epoch), at: max(startTime ?? now, now))
    }

    package var addresses: [SimAddress] { nodes.indices.map { SimAddress($0) } }

    /// Nodes that are up (started and not crashed), in address order.
    package var runningAddresses: [SimAddress] {
        nodes.indices.filter { nodes[$0].status == .running }.map { SimAddress($0) }
    }

    package func isRunning(_ node: SimAddress) -> Bool {
        node.index < nodes.count && nodes[node.index].status == .running
    }

    /// The node's current process (the last one, if it crashed).
    package func process(at node: SimAddress) -> any SimulatedProcess {
        nodes[checked(node)].process
    }

    package func process<P: SimulatedProcess>(at node: SimAddress, as type: P.Type) -> P? {
        nodes[checked(node)].process as? P
    }

    /// Timer ids the node has armed, ascending.
    package func armedTimers(of node: SimAddress) -> [UInt64] {
        nodes[checked(node)].timers.keys.sorted()
    }

    package var pendingEventCount: Int { queue.count }

    /// Zeroes the counters (e.g. to measure one protocol period).
    package func resetStatistics() {
        statistics = SimStatistics()
        statistics.nodes = Array(repeating: SimNodeStatistics(), count: nodes.count)
    }

    // MARK: Scripted actions

    /// Runs `action` when the clock reaches `time` (e.g. crash a node, heal a partition),
    /// in order with the other events due then.
    package func at(_ time: MeshInstant, _ label: String = "", do action: @escaping (Simulator) -> Void) {
        queue.push(.action(label: label, action), at: max(time, now))
    }

    package func after(_ delay: Duration, _ label: String = "", do action: @escaping (Simulator) -> Void) {
        at(now + delay, label, do: action)
    }

    // MARK: Internals

    func checked(_ node: SimAddress) -> Int {
        precondition(node.index < nodes.count, "no simulated node \(node)")
        return node.index
    }

    func record(_ kind: @autoclosure () -> SimTraceEvent.Kind) {
        guard !traceOptions.isEmpty || onTrace != nil else { return }
        let event = SimTraceEvent(time: now, kind: kind())
        if traceOptions.contains(.record) { trace.append(event) }
        if traceOptions.contains(.digest) { digest.add(event) }
        onTrace?(event)
    }

    /// Handles one dequeued event; false when it was stale (nothing happened).
    func handle(_ event: Event) -> Bool {
        switch event {
        case let .start(index, epoch):
            guard nodes[index].epoch == epoch, nodes[index].status == .booting else { return false }
            nodes[index].status = .running
            record(.started(SimAddress(index)))
            invoke(index) { process, now, context in process.start(now: now, context: &context) }

        case let .reachDownlink(from, to, bytes, hop):
            // The receiver's line now (it may have moved since the datagram left): its queue, or
            // none at all.
            var departure = now
            if let line = nodes[to.index].accessLink, accessLinks[line].downlink != nil {
                guard let leaves = accessLinks[line].downlink?.admit(bytes.count, at: now) else {
                    drop(from: from, to: to, size: bytes.count, reason: .queue)
                    break
                }
                departure = leaves
            }
            queue.push(.deliver(from: from, to: to, bytes: bytes, hop: hop), at: departure)

        case let .deliver(from, to, bytes, hop):
            let index = to.index
            if blocked(from, to) {
                drop(from: from, to: to, size: bytes.count, reason: .partition)
            } else if let hop, !admittedByNAT(hop, to: to) {
                drop(from: from, to: to, size: bytes.count, reason: .nat)
            } else if nodes[index].status != .running {
                drop(from: from, to: to, size: bytes.count, reason: .crashed)
            } else {
                statistics.delivered += 1
                statistics.bytesDelivered += bytes.count
                statistics.nodes[index].received += 1
                statistics.nodes[index].bytesReceived += bytes.count
                record(.delivered(from: from, to: to, bytes: bytes))
                let source = hop?.source ?? from
                invoke(index) { process, now, context in
                    process.receive(datagram: bytes, from: source, now: now, context: &context)
                }
            }

        case let .deliverMulticast(from, to, bytes):
            guard !blocked(from, to), nodes[to.index].status == .running else {
                drop(from: from, to: to, size: bytes.count, reason: blocked(from, to) ? .partition : .crashed)
                break
            }
            record(.delivered(from: from, to: to, bytes: bytes))
            invoke(to.index) { process, now, context in
                process.receiveMulticast(datagram: bytes, from: from, now: now, context: &context)
            }

        case let .timer(index, epoch, id, token):
            guard nodes[index].epoch == epoch, nodes[index].status == .running,
                nodes[index].timers[id]?.token == token
            else { return false }
            nodes[index].timers[id] = nil
            statistics.timersFired += 1
            statistics.nodes[index].timersFired += 1
            record(.timerFired(SimAddress(index), id: id))
            invoke(index) { process, now, context in process.timerFired(id, now: now, context: &context) }

        case let .action(label, action):
            record(.action(label))
            action(self)
        }
        eventsProcessed += 1
        return true
    }

    /// Calls into a node with a fresh context, then applies what it asked for, in order.
    private func invoke(_ index: Int, _ call: (any SimulatedProcess, MeshInstant, inout SimContext) -> Void) {
        let address = SimAddress(index)
        let localNow = localTime(of: address)
        var context = SimContext(address: address, now: localNow, random: nodes[index].random)
        call(nodes[index].process, localNow, &context)
        nodes[index].random = context.random
        for effect in context.effects {
            switch effect {
            case let .send(bytes, destination):
                transmit(bytes, from: address, to: destination)
            case let .sendShortLived(bytes, destination):
                transmit(bytes, from: address, to: destination, shortLived: true)
            case let .multicast(bytes):
                multicast(bytes, from: address)
            case let .schedule(id, deadline):
                arm(timer: id, of: index, at: deadline)
            case let .cancel(id):
                nodes[index].timers[id] = nil
            }
        }
    }

    /// (Re)arms a timer at a deadline on the node's own clock.
    func arm(timer id: UInt64, of index: Int, at deadline: MeshInstant) {
        nextTimerToken += 1
        nodes[index].timers[id] = ArmedTimer(token: nextTimerToken, deadline: deadline)
        let global = max(deadline + (.zero - nodes[index].clockOffset), now)
        queue.push(.timer(node: index, epoch: nodes[index].epoch, id: id, token: nextTimerToken), at: global)
    }
}
