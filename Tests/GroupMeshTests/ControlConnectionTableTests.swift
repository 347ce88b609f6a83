@testable import GroupMesh
import Testing

@Suite("control connections: a cap, idle timeouts, room made by closing the idlest")
struct ControlConnectionTableTests {
    static let settings = ControlConnectionTable.Settings(limit: 3, idleTimeout: .seconds(20))

    @Test("past the cap a new connection replaces the one idle longest; busy ones are never chosen")
    func capEvictsTheIdlest() {
        var table = ControlConnectionTable(settings: Self.settings)
        let a = table.admit(now: .seconds(0)).id
        let b = table.admit(now: .seconds(1)).id
        let c = table.admit(now: .seconds(2)).id
        table.requestStarted(a, now: .seconds(3))  // a waits for an answer (a get): busy
        table.subscribed(b)  // b listens: busy
        let d = table.admit(now: .seconds(4))
        #expect(d.admission == .admittedEvicting(c))
        #expect(table.count == 3)
        table.requestStarted(d.id, now: .seconds(5))
        // a, b and d busy: nobody to make room for a fifth.
        #expect(table.admit(now: .seconds(6)).admission == .refused)
        table.requestAnswered(a, now: .seconds(7))
        #expect(table.admit(now: .seconds(8)).admission == .admittedEvicting(a))
    }

    @Test("a burst of new connections that have not asked yet is not evicted by the next one: refused instead")
    func newConnectionsHaveGrace() {
        var table = ControlConnectionTable(settings: Self.settings)
        let first = table.admit(now: .milliseconds(0)).id
        _ = table.admit(now: .milliseconds(10))
        _ = table.admit(now: .milliseconds(20))
        // Three CLI commands connected within 20 ms; none has sent its request yet.
        #expect(table.admit(now: .milliseconds(30)).admission == .refused)
        // One that asked and was answered is fair game at once …
        table.requestStarted(first, now: .milliseconds(40))
        table.requestAnswered(first, now: .milliseconds(50))
        #expect(table.admit(now: .milliseconds(60)).admission == .admittedEvicting(first))
        // … and one that never asked, after the grace.
        #expect(table.admit(now: .seconds(3)).admission != .refused)
    }

    @Test("a connection with nothing in flight for the idle timeout expires; busy and fresh ones stay")
    func idleConnectionsExpire() {
        var table = ControlConnectionTable(settings: Self.settings)
        let quiet = table.admit(now: .seconds(0)).id
        let listening = table.admit(now: .seconds(0)).id
        let waiting = table.admit(now: .seconds(0)).id
        table.subscribed(listening)
        table.requestStarted(waiting, now: .seconds(1))
        #expect(table.expired(now: .seconds(19)).isEmpty)
        #expect(table.expired(now: .seconds(20)) == [quiet])
        // Answered at 30 s: idle from then on, not from when it connected.
        table.requestAnswered(waiting, now: .seconds(30))
        #expect(table.expired(now: .seconds(49)).isEmpty)
        #expect(table.expired(now: .seconds(50)) == [waiting])
        #expect(table.expired(now: .seconds(1000)).isEmpty)
        #expect(table.count == 1)
        table.closed(listening)
        #expect(table.count == 0)
    }
}
