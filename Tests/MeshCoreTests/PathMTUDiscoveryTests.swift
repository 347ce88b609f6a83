import MeshCore
import MeshCrypto
import Testing

@Suite("Path MTU discovery")
struct PathMTUDiscoveryTests {
    static let holder = NodeID(high: 7, low: 7)
    static let start = MeshInstant.zero + .seconds(1)

    /// The request in `directives`, if any.
    static func request(_ directives: [PathMTUDiscovery.Directive]) -> PathProbeRequest? {
        for case let .request(request, _) in directives { return request }
        return nil
    }

    /// Answers every request at once until none comes, as a path that carries everything up to
    /// `limit` would; the sizes proven on the way.
    static func climb(_ discovery: inout PathMTUDiscovery, limit: Int, now: MeshInstant) -> [Int] {
        var changes: [Int] = []
        var next = request(discovery.begin(holder, ipv6: false, now: now))
        while let asked = next, asked.size <= limit {
            let directives = discovery.onProbe(
                PathProbe(token: asked.token, padding: 0), from: holder,
                datagramSize: asked.size, now: now)
            for case let .sizeChanged(_, size) in directives { changes.append(size) }
            next = request(directives)
        }
        return changes
    }

    @Test("a path that carries a jumbo frame climbs the whole ladder, one probe per size")
    func climbsToTheTop() {
        var discovery = PathMTUDiscovery()
        #expect(discovery.datagramSize(from: Self.holder) == 1200)
        #expect(Self.climb(&discovery, limit: .max, now: Self.start) == [1472, 4052, 8972])
        #expect(discovery.datagramSize(from: Self.holder) == 8972)
        // Nothing more to search: no deadline left.
        #expect(discovery.nextDeadline == nil)
    }

    @Test("over Ethernet the 4,052-byte probe goes unanswered: three tries, then the search ends at 1,472")
    func stopsAtTheFirstSizeThatFails() {
        var discovery = PathMTUDiscovery()
        #expect(Self.climb(&discovery, limit: 1500, now: Self.start) == [1472])
        var now = Self.start
        var retries = 0
        for _ in 0..<10 {
            guard let deadline = discovery.nextDeadline, deadline < Self.start + .seconds(60) else { break }
            now = deadline
            if let again = Self.request(discovery.onTick(now: now)) {
                #expect(again.size == 4052)
                retries += 1
            }
        }
        #expect(retries == 2, "three tries in all")
        #expect(discovery.datagramSize(from: Self.holder) == 1472)
        // Settled: searched again only after the raise interval.
        #expect(discovery.nextDeadline == now + PathMTUDiscovery.Settings().raiseInterval)
        let raised = Self.request(discovery.onTick(now: now + .seconds(600)))
        #expect(raised?.size == 4052)
    }

    @Test("IPv6 sizes are 20 bytes smaller (its header is longer)")
    func ipv6Ladder() {
        var discovery = PathMTUDiscovery()
        let first = Self.request(discovery.begin(Self.holder, ipv6: true, now: Self.start))
        #expect(first?.size == 1452)
    }

    @Test("only the probe asked for, arriving whole, proves a size")
    func proofMustBeWhole() {
        var discovery = PathMTUDiscovery()
        guard let asked = Self.request(discovery.begin(Self.holder, ipv6: false, now: Self.start)) else {
            Issue.record("no probe asked for")
            return
        }
        // A truncated datagram with the right token, a wrong token, another member's probe.
        #expect(
            discovery.onProbe(
                PathProbe(token: asked.token, padding: 0), from: Self.holder,
                datagramSize: asked.size - 1, now: Self.start
            ).isEmpty)
        #expect(
            discovery.onProbe(
                PathProbe(token: asked.token &+ 1, padding: 0), from: Self.holder,
                datagramSize: asked.size, now: Self.start
            ).isEmpty)
        #expect(
            discovery.onProbe(
                PathProbe(token: asked.token, padding: 0), from: NodeID(high: 9, low: 9),
                datagramSize: asked.size, now: Self.start
            ).isEmpty)
        #expect(discovery.datagramSize(from: Self.holder) == 1200)
    }

    /// Two silences at the size in use, as `blackHole` and `busyHolder` both start.
    static func silenced() -> (PathMTUDiscovery, confirmation: PathProbeRequest?) {
        var discovery = PathMTUDiscovery()
        _ = Self.climb(&discovery, limit: .max, now: Self.start)
        let later = Self.start + .seconds(2)
        // A silence at the base size, or at a size not in use, says nothing about the path.
        #expect(discovery.onSilence(from: Self.holder, datagramSize: 1200, now: later).isEmpty)
        #expect(discovery.onSilence(from: Self.holder, datagramSize: 1472, now: later).isEmpty)
        #expect(discovery.onSilence(from: Self.holder, datagramSize: 8972, now: later).isEmpty)
        // Pieces in between: the path works, the count starts over.
        discovery.onPieces(from: Self.holder)
        #expect(discovery.onSilence(from: Self.holder, datagramSize: 8972, now: later).isEmpty)
        let confirmation = Self.request(discovery.onSilence(from: Self.holder, datagramSize: 8972, now: later))
        return (discovery, confirmation)
    }

    @Test("two silences in a row and a lost confirmation are a black hole: back to the base, searched again later")
    func blackHole() {
        var (discovery, confirmation) = Self.silenced()
        #expect(confirmation?.size == 8972, "the size in use is probed again first")
        #expect(discovery.datagramSize(from: Self.holder) == 8972, "nothing changes before the confirmation is lost")
        var fell: [PathMTUDiscovery.Directive] = []
        var now = Self.start
        for _ in 0..<3 {
            guard let deadline = discovery.nextDeadline else { break }
            now = deadline
            fell = discovery.onTick(now: now)
        }
        #expect(fell == [.sizeChanged(Self.holder, datagramSize: 1200)])
        #expect(discovery.blackHoles == 1)
        #expect(discovery.datagramSize(from: Self.holder) == 1200)
        let research = now + PathMTUDiscovery.Settings().researchDelay
        #expect(discovery.nextDeadline == research)
        #expect(Self.request(discovery.onTick(now: research))?.size == 1472)
    }

    @Test("silences from a busy holder whose confirmation comes back change nothing")
    func busyHolder() {
        var (discovery, confirmation) = Self.silenced()
        guard let confirmation else {
            Issue.record("no confirmation asked for")
            return
        }
        let answered = discovery.onProbe(
            PathProbe(token: confirmation.token, padding: 0), from: Self.holder,
            datagramSize: confirmation.size, now: Self.start + .seconds(2))
        #expect(answered.isEmpty)
        #expect(discovery.datagramSize(from: Self.holder) == 8972)
        #expect(discovery.blackHoles == 0)
        #expect(discovery.nextDeadline == nil)
    }

    @Test("a confirmation answered in the middle of a search lets the search go on")
    func confirmationResumesTheSearch() {
        var discovery = PathMTUDiscovery()
        guard let first = Self.request(discovery.begin(Self.holder, ipv6: false, now: Self.start)) else {
            Issue.record("no probe asked for")
            return
        }
        _ = discovery.onProbe(
            PathProbe(token: first.token, padding: 0), from: Self.holder, datagramSize: 1472, now: Self.start)
        // Searching 4,052 now; two silences at the 1,472 in use interrupt it with a confirmation.
        _ = discovery.onSilence(from: Self.holder, datagramSize: 1472, now: Self.start)
        guard
            let confirmation = Self.request(discovery.onSilence(from: Self.holder, datagramSize: 1472, now: Self.start))
        else {
            Issue.record("no confirmation asked for")
            return
        }
        #expect(confirmation.size == 1472)
        let resumed = discovery.onProbe(
            PathProbe(token: confirmation.token, padding: 0), from: Self.holder,
            datagramSize: 1472, now: Self.start)
        #expect(Self.request(resumed)?.size == 4052, "the search stopped for good after a confirmation")
    }

    @Test("a search a confirmation interrupted goes on from the attempts it spent: three probes of a size in all")
    func resumedSearchKeepsItsAttempts() {
        var discovery = PathMTUDiscovery()
        var now = Self.start
        guard let first = Self.request(discovery.begin(Self.holder, ipv6: false, now: now)) else {
            Issue.record("no probe asked for")
            return
        }
        var probesOf4052 = 0
        var directives = discovery.onProbe(
            PathProbe(token: first.token, padding: 0), from: Self.holder,
            datagramSize: 1472, now: now)
        if Self.request(directives)?.size == 4052 { probesOf4052 += 1 }
        // The 4,052 probe is lost, and asked again once.
        now = discovery.nextDeadline ?? now
        if Self.request(discovery.onTick(now: now))?.size == 4052 { probesOf4052 += 1 }
        // Two silences interrupt it; the confirmation comes back.
        _ = discovery.onSilence(from: Self.holder, datagramSize: 1472, now: now)
        guard let confirmation = Self.request(discovery.onSilence(from: Self.holder, datagramSize: 1472, now: now))
        else {
            Issue.record("no confirmation asked for")
            return
        }
        directives = discovery.onProbe(
            PathProbe(token: confirmation.token, padding: 0), from: Self.holder,
            datagramSize: 1472, now: now)
        if Self.request(directives)?.size == 4052 { probesOf4052 += 1 }
        // Every later probe of 4,052 is lost too.
        for _ in 0..<10 {
            guard let deadline = discovery.nextDeadline, deadline < Self.start + .seconds(60) else { break }
            now = deadline
            if Self.request(discovery.onTick(now: now))?.size == 4052 { probesOf4052 += 1 }
        }
        #expect(probesOf4052 == 3, "\(probesOf4052) probes of 4,052 (each crosses a path that drops it)")
        #expect(discovery.datagramSize(from: Self.holder) == 1472)
    }

    @Test("a member forgotten is measured anew")
    func removal() {
        var discovery = PathMTUDiscovery()
        _ = Self.climb(&discovery, limit: .max, now: Self.start)
        discovery.remove(Self.holder)
        #expect(!discovery.isMeasuring(Self.holder))
        #expect(discovery.datagramSize(from: Self.holder) == 1200)
        #expect(Self.request(discovery.begin(Self.holder, ipv6: false, now: Self.start))?.size == 1472)
    }
}
