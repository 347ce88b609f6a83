import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Birthday rounds with whole nodes behind the simulator's NAT boxes. The simulator gives each
/// node one socket, so the hard side's many mappings are not there and no round can succeed:
/// what is tested is the core's part, that a relayed pair coordinates a round through its relay,
/// that the symmetric side asks for the sockets and the other probes, within the budget, and that
/// rounds are retried with back-off while the pair stays relayed (a round succeeds only by luck,
/// on the one mapping the symmetric side's own socket made). Replay with `SIM_SEED=N`.
@Suite("Birthday rounds in simulation")
struct BirthdaySimulationTests {
    static let seeds = SimulationSeeds.from(defaultCount: 3)

    @Test(
        "a relayed pair (symmetric NAT, MASQUERADE home) runs birthday rounds through its relay: the symmetric side asks for sockets, the other probes its router's ports, rounds back off",
        arguments: seeds)
    func aRelayedPairRunsBirthdayRounds(seed: UInt64) {
        let replay = SimulationSeeds.replay(seed)
        let (mesh, symmetric, home) = RelaySimulationTests.mesh(seed: seed, publics: 2, birthday: true) {
            _, configuration in
            configuration.settings.lazy = true
        }
        // Every probe of the first round sent, or the round ended early: a probe landed by luck on
        // the one mapping the symmetric side's own socket made (the pair is punched).
        let outcome = mesh.simulator.run(for: .seconds(60), checkEvery: .milliseconds(250)) { _ in
            symmetric.core.birthday.roundsTried > 0 && home.core.birthday.roundsTried > 0
                && (home.core.birthday.probesSent >= UInt64(home.core.settings.birthday.probes)
                    || symmetric.core.paths.state(of: home.id) == .punched)
        }
        let state =
            "tried \(symmetric.core.birthday.roundsTried)/\(home.core.birthday.roundsTried), "
            + "probes \(home.core.birthday.probesSent), \(RelaySimulationTests.describe(symmetric, home)), "
            + "NATs \(symmetric.core.natBehaviour)/\(home.core.natBehaviour); lost \(mesh.simulator.statistics.dropped.loss)"
        #expect(outcome == .satisfied, "\(replay): \(state)")
        let sockets = UInt64(symmetric.core.settings.birthday.sockets)
        #expect(
            symmetric.core.birthday.socketsAsked >= sockets && symmetric.core.birthday.socketsAsked % sockets == 0,
            "\(replay): \(symmetric.core.birthday.socketsAsked) sockets asked")
        #expect(symmetric.core.birthday.probesSent == 0, "\(replay): the hard side never probes")
        #expect(home.core.birthday.socketsAsked == 0, "\(replay): the easy side opens nothing")
        // Rounds go on, backing off: over ten minutes, a handful, not one every few seconds. A probe
        // may land by luck on the one mapping the symmetric side's own socket made towards the home
        // (its record's address): then the pair is punched and the rounds stop.
        let triedBefore = home.core.birthday.roundsTried
        _ = mesh.simulator.run(for: .seconds(600))
        let rounds = home.core.birthday.roundsTried - triedBefore
        let punched = symmetric.core.paths.state(of: home.id) == .punched
        #expect(rounds <= 6, "\(replay): \(rounds) rounds in 10 minutes")
        #expect(
            punched || rounds >= 2,
            "\(replay): \(rounds) rounds in 10 minutes, \(RelaySimulationTests.describe(symmetric, home))")
        #expect(punched || symmetric.core.paths.state(of: home.id) == .relayed, "\(replay)")
        #expect(
            home.core.birthday.probesSent <= home.core.birthday.roundsTried * UInt64(home.core.settings.birthday.probes)
        )
    }
}
