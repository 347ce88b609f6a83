import Foundation
@testable import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// A joiner whose seed does not answer: it retries with waits that double up to a cap (cut by
/// seeded jitter), says once that nobody answers, keeps the seed across a restart without the
/// invite, and stops retrying once a member answers.
///
/// A failing seed is named in every message (`SIM_SEED=N`) and replays exactly:
///     SIM_SEED=N swift test --filter JoinBackoffSimulation
@Suite("Joining through a seed that does not answer (simulation)")
struct JoinBackoffSimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 4)
    /// The seed's node starts this late: until then nothing answers at its address.
    static let seedStarts = MeshInstant.zero + .seconds(400)
    static let joinerStarts = MeshInstant.zero + .seconds(1)

    struct Run {
        var mesh: SimMesh
        var seed: SimNode
        var joiner: SimNode
        /// When the joiner sent to the seed's address, before the seed started (all join tries).
        var tries: [MeshInstant]
    }

    static func run(seed: UInt64, until end: MeshInstant, restartJoinerAt restart: MeshInstant? = nil) -> Run {
        let mesh = SimMesh(seed: seed, link: LinkConditions(delay: .milliseconds(2), jitter: .milliseconds(1)))
        let seedNode = mesh.addNode(joiningThrough: [], at: seedStarts)
        let joiner = mesh.addNode(joiningThrough: [seedNode.address], at: joinerStarts)
        var tries: [MeshInstant] = []
        mesh.simulator.onTrace = { event in
            if case let .sent(from, to, _) = event.kind, from == joiner.address, to == seedNode.address,
                event.time < seedStarts
            {
                tries.append(event.time)
            }
        }
        if let restart {
            // Without the invite: only the data dir knows where to go.
            mesh.simulator.at(restart, "restart the joiner without seeds") { _ in
                mesh.restart(joiner.address, at: restart, seeds: [])
            }
        }
        mesh.simulator.run(until: end)
        return Run(mesh: mesh, seed: seedNode, joiner: mesh.node(joiner.address), tries: tries)
    }

    @Test(
        "the waits between tries double from 1 s up to 30 s, never over, cut by at most a fifth; one notice at 5 s; retries stop once the seed answers",
        arguments: seeds)
    func backoffGrowsAndStaysBounded(seed: UInt64) throws {
        let replay = SimulationSeeds.replay(seed)
        let settings = MembershipSettings.lan
        let run = Self.run(seed: seed, until: .zero + .seconds(399))
        let tries = run.tries
        #expect(tries.first == Self.joinerStarts, "\(replay): the first try goes at the start")
        #expect(tries.count == run.joiner.membership.joinAttempts, "\(replay): a datagram per try (one seed)")
        var expected = settings.joinRetryInterval
        for (index, pair) in zip(tries, tries.dropFirst()).enumerated() {
            let wait = pair.1 - pair.0
            let low = expected * (1 - settings.joinRetryJitter)
            #expect(
                wait >= low - .milliseconds(1) && wait <= expected + .milliseconds(1),
                "\(replay): wait \(index + 1) was \(wait), expected \(low)...\(expected)")
            #expect(wait <= settings.joinRetryMaximum, "\(replay): wait \(index + 1) over the cap")
            expected = min(expected * 2, settings.joinRetryMaximum)
        }
        // 398 s of tries: 6 in the first 24.8–31 s (waits of 1, 2, 4, 8, 16 s less up to a fifth),
        // then one every 24–30 s: a few datagrams a minute.
        #expect((18...21).contains(tries.count), "\(replay): \(tries.count) tries in 399 s")

        // Told once, 5 s after the start, naming the seed; three tries by then (0, ≤1, ≤3 s).
        let notices = run.joiner.waitingNotices
        #expect(notices.count == 1, "\(replay): \(notices.count) notices")
        let notice = try #require(notices.first)
        #expect(notice.time == Self.joinerStarts + NodeSettings().joinWaitingNotice, "\(replay)")
        #expect(notice.progress.addresses == [run.seed.address.peerAddress], "\(replay)")
        #expect(notice.progress.attempts == 3, "\(replay): \(notice.progress.attempts) tries by the notice")
        #expect(run.joiner.core.joinProgress?.attempts == tries.count, "\(replay)")
        #expect(
            run.joiner.core.remembered.seeds == [run.seed.address.peerAddress.description],
            "\(replay): the seed is kept in the data dir while nobody answered")

        // The seed comes up: the next try (at most 30 s on) finds it, the joiner says so once,
        // drops the kept seed, and tries no more.
        let joined = Self.run(seed: seed, until: Self.seedStarts + .seconds(40))
        #expect(joined.joiner.core.phase == .running, "\(replay): not in 40 s after the seed came up")
        #expect(joined.joiner.core.joinProgress == nil, "\(replay)")
        #expect(joined.joiner.joinedNotices.map(\.member) == [joined.seed.id], "\(replay)")
        #expect(joined.joiner.waitingNotices.count == 1, "\(replay): told again after joining")
        #expect(joined.joiner.core.remembered.seeds.isEmpty, "\(replay): the seed kept once joined")
        let attempts = joined.joiner.membership.joinAttempts
        joined.mesh.simulator.run(until: Self.seedStarts + .seconds(200))
        #expect(joined.joiner.membership.joinAttempts == attempts, "\(replay): tries went on after joining")
        #expect(
            joined.joiner.violations.isEmpty && joined.seed.violations.isEmpty, "\(replay): \(joined.joiner.violations)"
        )
    }

    @Test(
        "a joiner restarted without the invite before anyone answered still tries the seed, and joins when it comes up",
        arguments: seeds)
    func seedsKeptAcrossRestart(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let restart = MeshInstant.zero + .seconds(20)
        let run = Self.run(seed: seed, until: Self.seedStarts + .seconds(40), restartJoinerAt: restart)
        let afterRestart = run.tries.filter { $0 >= restart }
        #expect(afterRestart.first == restart, "\(replay): the restarted node did not try the kept seed at once")
        #expect(afterRestart.count >= 10, "\(replay): \(afterRestart.count) tries after the restart")
        #expect(run.joiner.waitingNotices.count == 1, "\(replay): the new boot told once")
        #expect(run.joiner.waitingNotices.first?.time == restart + NodeSettings().joinWaitingNotice, "\(replay)")
        #expect(run.joiner.core.phase == .running, "\(replay): not joined 40 s after the seed came up")
        #expect(run.joiner.joinedNotices.map(\.member) == [run.seed.id], "\(replay)")
    }

    @Test("the same seed gives the same tries")
    func replaysExactly() {
        let seed = SimulationSeeds.from(defaultCount: 1)[0]
        let first = Self.run(seed: seed, until: .zero + .seconds(120))
        let second = Self.run(seed: seed, until: .zero + .seconds(120))
        #expect(first.tries == second.tries, "\(SimulationSeeds.replay(seed))")
        // The jitter is drawn from the seeded generator: another seed draws other waits.
        let other = Self.run(seed: seed + 1, until: .zero + .seconds(120))
        #expect(first.tries != other.tries, "\(SimulationSeeds.replay(seed)): no jitter")
    }
}

@Suite("Joining: settings and the data dir")
struct JoinSettingsTests {
    @Test("a members.json from before seeds were kept still reads; no seeds, no key")
    func rememberedMembersWithoutSeeds() throws {
        let old = #"{"incarnation":3,"members":[{"id":"ab","name":"a","addresses":["10.0.0.1:7946"]}]}"#
        let decoded = try JSONDecoder().decode(RememberedMembers.self, from: Data(old.utf8))
        #expect(decoded.incarnation == 3 && decoded.members.count == 1 && decoded.seeds.isEmpty)
        let encoded = String(decoding: try JSONEncoder().encode(decoded), as: UTF8.self)
        #expect(!encoded.contains("seeds"))
        var withSeeds = decoded
        withSeeds.seeds = ["192.0.2.1:7946"]
        let again = try JSONDecoder().decode(RememberedMembers.self, from: JSONEncoder().encode(withSeeds))
        #expect(again == withSeeds && again.seedAddresses.map(\.description) == ["192.0.2.1:7946"])
    }

    @Test("a try contacts at most joinSeedsPerAttempt seeds, the next ones in turn")
    func seedsPerAttemptRotate() throws {
        let identity = try NodeIdentity(seed: [UInt8](repeating: 9, count: 32))
        var settings = MembershipSettings.lan
        settings.joinSeedsPerAttempt = 3
        var joiner = MembershipInstance(
            record: ManualCluster.record(identity, index: 9),
            authority: Ed25519Authority(identity: identity), settings: settings,
            datagramBudget: 1118, seed: 9, now: .zero)
        let seeds = (1...5).map { PeerAddress(ipv4: [192, 0, 2, UInt8($0)], port: 7946) }
        func addresses(_ directives: [MembershipDirective]) -> [PeerAddress] {
            directives.compactMap { if case let .send(_, _, address) = $0 { address } else { nil } }
        }
        #expect(addresses(joiner.join(seeds, now: .zero)) == Array(seeds[0..<3]))
        #expect(addresses(joiner.onTick(now: .zero + .seconds(1))) == [seeds[3], seeds[4], seeds[0]])
        #expect(joiner.joinAttempts == 2 && joiner.isJoining)
    }
}
