import MeshCore
import MeshTestKit
import Testing

/// Nodes, partitions, crashes, timers, clocks and bounded runs.
@Suite struct SimulatorTests {
    @Test func echoRoundTripTakesTwoLinkDelays() {
        let sim = Simulator(seed: 1, defaultLink: LinkConditions(delay: .milliseconds(7)))
        let echo = sim.addNode(EchoProcess())
        let sender = SenderProcess(target: echo, count: 3, interval: .milliseconds(100))
        let client = sim.addNode(sender)
        sim.run(for: .seconds(1))
        #expect(sender.received.map(\.at) == [.ms(14), .ms(114), .ms(214)])
        #expect(sender.received.allSatisfy { $0.from == echo })
        #expect(sim.process(at: echo, as: EchoProcess.self)?.received.allSatisfy { $0.from == client } == true)
        #expect(sim.now == .ms(1000))
        #expect(sim.statistics[client].sent == 3 && sim.statistics[echo].sent == 3)
    }

    // MARK: Partitions

    @Test func partitionBlocksBothWaysAndHealRestores() {
        let sim = Simulator(seed: 2)
        let processes = (0..<3).map { _ in EchoProcess(echoes: false) }
        let nodes = processes.map { sim.addNode($0) }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        func exchange(_ tag: UInt8) {
            for from in nodes { for to in nodes where to != from { sim.inject([tag], from: from, to: to) } }
            sim.run(for: .milliseconds(10))
        }

        sim.partition([[a], [b, c]])
        #expect(sim.isPartitioned(a, from: b) && sim.isPartitioned(c, from: a) && !sim.isPartitioned(b, from: c))
        exchange(1)
        #expect(processes[0].received.isEmpty, "a is cut off from b and c")
        #expect(processes[1].received.map(\.from) == [c])
        #expect(processes[2].received.map(\.from) == [b])
        #expect(sim.statistics.dropped.partition == 4)

        sim.heal()
        exchange(2)
        #expect(processes[0].received.map(\.from) == [b, c])
        #expect(processes[1].received.filter { $0.bytes == [2] }.map(\.from) == [a, c])
        #expect(processes[2].received.filter { $0.bytes == [2] }.map(\.from) == [a, b])
        #expect(sim.statistics.dropped.partition == 4)
    }

    @Test func unnamedNodesFormTheirOwnSide() {
        let sim = Simulator(seed: 3)
        let processes = (0..<4).map { _ in EchoProcess(echoes: false) }
        let nodes = processes.map { sim.addNode($0) }
        sim.isolate(nodes[0])
        let late = EchoProcess(echoes: false)
        let newcomer = sim.addNode(late)
        for target in nodes.dropFirst() + [newcomer] {
            sim.inject([1], from: nodes[0], to: target)
            sim.inject([2], from: nodes[1], to: target)
        }
        sim.run(for: .milliseconds(10))
        #expect(processes.dropFirst().allSatisfy { $0.received.allSatisfy { $0.from == nodes[1] } })
        #expect(late.received.map(\.from) == [nodes[1]])
        #expect(sim.statistics.dropped.partition == 4)
    }

    @Test func datagramInFlightWhenPartitionStartsIsDropped() {
        let sim = Simulator(seed: 4, defaultLink: LinkConditions(delay: .milliseconds(50)))
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        let a = sim.addNode(EchoProcess(echoes: false))
        sim.inject([1], from: a, to: b)
        sim.at(.ms(10)) { $0.partition([[a], [b]]) }
        sim.at(.ms(100)) { $0.heal() }
        sim.run(for: .milliseconds(200))
        #expect(receiver.received.isEmpty)
        #expect(sim.statistics.dropped.partition == 1)
    }

    // MARK: Crashes and restarts

    @Test func crashedNodeReceivesNothingAndItsTimersDoNotFire() {
        let sim = Simulator(seed: 5)
        let victim = EchoProcess(timersAtStart: [(1, .milliseconds(50)), (2, .milliseconds(150))])
        let b = sim.addNode(victim)
        let sender = SenderProcess(target: b, count: 100, interval: .milliseconds(2))
        let a = sim.addNode(sender)
        sim.at(.ms(100), "crash") { $0.crash(b) }
        sim.run(for: .milliseconds(400))

        #expect(victim.firedTimers == [1], "timer 2 was due after the crash")
        #expect(victim.received.allSatisfy { $0.at <= .ms(100) })
        #expect(!victim.received.isEmpty)
        #expect(!sim.isRunning(b) && sim.isRunning(a))
        #expect(sim.armedTimers(of: b).isEmpty)
        // Sent every 2 ms from 0 to 198 ms, 1 ms in flight: those arriving after 100 ms are dropped.
        #expect(sim.statistics.dropped.crashed == 100 - victim.received.count)
        #expect(victim.received.count == 50)
        #expect(sender.received.count == victim.received.count, "echoes only from before the crash")
        #expect(sim.runningAddresses == [a])
    }

    @Test func restartedNodeStartsFreshAtTheSameAddress() {
        let sim = Simulator(seed: 6)
        let first = EchoProcess(timersAtStart: [(1, .milliseconds(300))])
        let b = sim.addNode(first)
        let sender = SenderProcess(target: b, count: 100, interval: .milliseconds(5))
        sim.addNode(sender)
        sim.at(.ms(100)) { $0.crash(b) }
        let second = EchoProcess(echoes: false, timersAtStart: [(7, .milliseconds(10))])
        sim.at(.ms(200)) { $0.restart(b, with: second) }
        sim.run(for: .seconds(1))

        #expect(first.firedTimers.isEmpty)
        #expect(first.received.allSatisfy { $0.at <= .ms(100) })
        #expect(second.started == [.ms(200)])
        #expect(second.firedTimers == [7])
        #expect(!second.received.isEmpty && second.received.allSatisfy { $0.at > .ms(200) })
        #expect(first.received.count + second.received.count + sim.statistics.dropped.crashed == 100)
        #expect(sim.process(at: b) === second)
        #expect(sim.isRunning(b))
    }

    @Test func restartWithoutCrashReplacesTheProcess() {
        let sim = Simulator(seed: 7)
        let old = EchoProcess(timersAtStart: [(1, .milliseconds(50))])
        let node = sim.addNode(old)
        sim.run(for: .milliseconds(10))
        let new = EchoProcess(echoes: false)
        sim.restart(node, with: new, at: .ms(20))
        #expect(!sim.isRunning(node), "down until the new process boots")
        sim.run(for: .milliseconds(100))
        #expect(old.firedTimers.isEmpty)
        #expect(new.started == [.ms(20)])
    }

    // MARK: Event order

    /// Events run by time, and those due at the same instant in the order they were scheduled,
    /// also when events schedule more while the queue is being drained (its slots reused): the
    /// order every seed's replay rests on. Checked against a linear scan of the pending events.
    @Test func eventsRunByTimeThenBySchedulingOrder() {
        let sim = Simulator(seed: 7)
        var random = SplitMix64(seed: 7)
        var ran: [Int] = []
        var scheduled = 0
        func schedule(at time: MeshInstant) {
            let id = scheduled
            scheduled += 1
            sim.at(time) { sim in
                ran.append(id)
                // Steps of 1 ms, so that many events share an instant.
                if scheduled < 3_000, random.next() % 3 != 0 {
                    schedule(at: sim.now + .milliseconds(Int64(random.next() % 4)))
                }
            }
        }
        let initial = (0..<500).map { _ in MeshInstant.zero + .milliseconds(Int64(random.next() % 20)) }
        initial.forEach(schedule(at:))
        sim.run(for: .seconds(10))

        // The same draws against a linear scan for the earliest (time, id) pending.
        random = SplitMix64(seed: 7)
        for _ in initial { _ = random.next() }
        var pending = initial.enumerated().map { (time: $0.element, id: $0.offset) }
        var expected: [Int] = []
        var created = initial.count
        while let first = pending.indices.min(by: {
            (pending[$0].time, pending[$0].id) < (pending[$1].time, pending[$1].id)
        }) {
            let event = pending.remove(at: first)
            expected.append(event.id)
            if created < 3_000, random.next() % 3 != 0 {
                pending.append((event.time + .milliseconds(Int64(random.next() % 4)), created))
                created += 1
            }
        }
        #expect(ran.count > 1_000)
        #expect(ran == expected)
    }

    // MARK: Timers

    @Test func timersFireInDeadlineThenSchedulingOrder() {
        let sim = Simulator(seed: 8, trace: .record)
        let process = TimerProcess(
            plan: [
                (id: 30, after: .milliseconds(30)),
                (id: 10, after: .milliseconds(10)),
                (id: 15, after: .milliseconds(15)),
                (id: 5, after: .milliseconds(20)),  // two timers due at 20 ms: scheduling order wins
                (id: 4, after: .milliseconds(20)),
                (id: 99, after: .milliseconds(25)),  // cancelled at start
                (id: 15, after: .milliseconds(40)),  // re-arming 15 replaces the 15 ms deadline
            ], cancelAtStart: [99], onFire: [10: [(11, .milliseconds(1)), (12, .zero)]])
        let node = sim.addNode(process)
        #expect(sim.armedTimers(of: node).isEmpty, "nothing armed before start")
        sim.run(for: .milliseconds(5))
        #expect(sim.armedTimers(of: node) == [4, 5, 10, 15, 30])
        sim.run(for: .milliseconds(100))
        #expect(
            process.firings == [
                .init(id: 10, at: .ms(10)), .init(id: 12, at: .ms(10)), .init(id: 11, at: .ms(11)),
                .init(id: 5, at: .ms(20)), .init(id: 4, at: .ms(20)),
                .init(id: 30, at: .ms(30)), .init(id: 15, at: .ms(40)),
            ])
        #expect(sim.statistics.timersFired == 7)
        #expect(sim.armedTimers(of: node).isEmpty)
        let traced: [UInt64] = sim.trace.compactMap { if case let .timerFired(_, id) = $0.kind { id } else { nil } }
        #expect(traced == [10, 12, 11, 5, 4, 30, 15])
    }

    @Test func stepHandlesOneEventAtATime() {
        let sim = Simulator(seed: 9)
        let process = TimerProcess(plan: [(id: 1, after: .milliseconds(10)), (id: 2, after: .milliseconds(20))])
        sim.addNode(process)
        #expect(sim.step())  // start
        #expect(sim.now == .zero && process.startedAt == .zero && process.firings.isEmpty)
        #expect(sim.step())
        #expect(sim.now == .ms(10) && process.firings.map(\.id) == [1])
        #expect(sim.step())
        #expect(sim.now == .ms(20) && process.firings.map(\.id) == [1, 2])
        #expect(!sim.step())
        #expect(sim.now == .ms(20))
    }

    @Test func nodeCanStartLater() {
        let sim = Simulator(seed: 10)
        let late = EchoProcess(echoes: false)
        let b = sim.addNode(late, startingAt: .ms(50))
        let a = sim.addNode(EchoProcess(echoes: false))
        sim.at(.ms(10)) { $0.inject([1], from: a, to: b) }
        sim.at(.ms(60)) { $0.inject([2], from: a, to: b) }
        sim.run(for: .milliseconds(100))
        #expect(late.started == [.ms(50)])
        #expect(late.received.map(\.bytes) == [[2]])
        #expect(sim.statistics.dropped.crashed == 1)
    }

    // MARK: Clocks

    @Test func clockJumpMovesOneNodesTimeAndFiresSkippedTimers() {
        let sim = Simulator(seed: 11)
        let jumper = TimerProcess(plan: [
            (id: 1, after: .seconds(1)), (id: 2, after: .seconds(3)), (id: 3, after: .milliseconds(1500)),
        ])
        let steady = TimerProcess(plan: [(id: 1, after: .seconds(1))])
        let j = sim.addNode(jumper), s = sim.addNode(steady)
        sim.at(.ms(100)) { $0.jumpClock(of: j, by: .seconds(2)) }
        sim.run(for: .milliseconds(100))
        #expect(sim.localTime(of: j) == .ms(2100))
        #expect(sim.localTime(of: s) == .ms(100))
        #expect(sim.clockOffset(of: j) == .seconds(2))
        sim.run(until: .ms(2000))
        // Timers 1 (1 s) and 3 (1.5 s) were skipped by the jump and fire at once, in deadline
        // order; timer 2 (3 s local) fires 900 ms later in simulator time.
        #expect(
            jumper.firings == [.init(id: 1, at: .ms(2100)), .init(id: 3, at: .ms(2100)), .init(id: 2, at: .ms(3000))])
        #expect(steady.firings == [.init(id: 1, at: .ms(1000))])
    }

    @Test func receiveSeesTheReceiversOwnClock() {
        let sim = Simulator(seed: 12)
        let receiver = EchoProcess(echoes: false)
        let b = sim.addNode(receiver)
        let a = sim.addNode(EchoProcess(echoes: false))
        sim.jumpClock(of: b, by: .seconds(5))
        sim.inject([1], from: a, to: b)
        sim.run(for: .milliseconds(10))
        #expect(receiver.received.map(\.at) == [.ms(5001)])
        #expect(sim.now == .ms(10))
    }

    // MARK: Bounded runs

    @Test func runUntilPredicateStopsAsSoonAsItHolds() {
        let sim = Simulator(seed: 13)
        let echo = sim.addNode(EchoProcess())
        let sender = SenderProcess(target: echo, count: 100, interval: .milliseconds(10))
        sim.addNode(sender)
        let outcome = sim.run(until: .ms(10_000)) { _ in sender.received.count >= 5 }
        #expect(outcome == .satisfied)
        #expect(sender.received.count == 5)
        #expect(sim.now == .ms(42), "the fifth echo returns at 40 ms + 2 ms")
    }

    @Test func runUntilPredicateStopsAtTheDeadline() {
        let sim = Simulator(seed: 14)
        let echo = sim.addNode(EchoProcess())
        sim.addNode(SenderProcess(target: echo, count: 1_000_000, interval: .milliseconds(1)))
        var checks = 0
        let outcome = sim.run(until: .ms(500)) { _ in
            checks += 1; return false
        }
        #expect(outcome == .deadlineReached)
        #expect(sim.now == .ms(500))
        #expect(checks > 500)
    }

    @Test func runIsBoundedByTheEventBudget() {
        let sim = Simulator(seed: 15)
        let loop = BusyLoopProcess()
        sim.addNode(loop)
        let outcome = sim.run(until: .ms(1000), maxEvents: 10_000) { _ in false }
        #expect(outcome == .eventBudgetExhausted)
        #expect(sim.now == .zero, "a zero-delay loop never lets time pass")
        #expect(loop.spins == 9_999, "start plus 9,999 timer firings")
        #expect(sim.run(for: .seconds(1), maxEvents: 100) == .eventBudgetExhausted)
    }

    @Test func periodicChecksLetTimePassBetweenEvents() {
        let sim = Simulator(seed: 16)
        let process = TimerProcess(plan: [(id: 1, after: .seconds(10))])
        sim.addNode(process)
        var checkedAt: [MeshInstant] = []
        let outcome = sim.run(until: .ms(3000), checkEvery: .seconds(1)) { sim in
            checkedAt.append(sim.now)
            return sim.now >= .ms(2000)
        }
        #expect(outcome == .satisfied)
        #expect(checkedAt == [.zero, .ms(1000), .ms(2000)])
        #expect(sim.now == .ms(2000))
        #expect(process.firings.isEmpty)
        #expect(sim.run(until: .ms(20_000), checkEvery: .seconds(1)) { _ in !process.firings.isEmpty } == .satisfied)
        #expect(sim.now == .ms(10_000))
    }

    @Test func scriptedActionsRunInOrderWithOtherEvents() {
        let sim = Simulator(seed: 17, trace: .record)
        var log: [String] = []
        sim.at(.ms(20), "second") { _ in log.append("second") }
        sim.at(.ms(10), "first") { sim in
            log.append("first")
            sim.after(.zero, "first-follow-up") { _ in log.append("follow-up") }
        }
        sim.at(.ms(20), "third") { _ in log.append("third") }
        sim.run(for: .milliseconds(30))
        #expect(log == ["first", "follow-up", "second", "third"])
        #expect(sim.trace.map(\.time) == [.ms(10), .ms(10), .ms(20), .ms(20)])
    }

    @Test func traceHandlerSeesEveryEventAsItHappens() {
        let sim = Simulator(seed: 18)
        var seen: [SimTraceEvent] = []
        sim.onTrace = { seen.append($0) }
        let echo = sim.addNode(EchoProcess(echoes: false))
        let a = sim.addNode(EchoProcess(echoes: false))
        sim.inject([9], from: a, to: echo)
        sim.run(for: .milliseconds(5))
        #expect(
            seen.map(\.kind) == [
                .sent(from: a, to: echo, bytes: [9]), .started(echo), .started(a),
                .delivered(from: a, to: echo, bytes: [9]),
            ])
        #expect(seen.map(\.description).last == "[1.000ms] n1→n0 delivered 1B")
    }

    @Test func statisticsCanBeResetPerPeriod() {
        let sim = Simulator(seed: 19)
        let echo = sim.addNode(EchoProcess())
        let client = sim.addNode(SenderProcess(target: echo, count: 1000, interval: .milliseconds(10)))
        sim.run(for: .seconds(1))
        sim.resetStatistics()
        sim.run(for: .seconds(1))
        #expect(sim.statistics[client].sent == 100)
        #expect(sim.statistics[echo].sent == 100)
        #expect(sim.statistics.sent == 200)
    }

    @Test func simAddressMapsToAndFromPeerAddress() {
        let node = SimAddress(70_000)
        #expect(node.peerAddress.description == "127.1.17.113:7946")
        #expect(SimAddress(peerAddress: node.peerAddress) == node)
        #expect(SimAddress(0).description == "n0")
    }
}
