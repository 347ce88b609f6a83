import MeshTestKit
import Testing

@Suite struct SimulationSeedsTests {
    struct Failure: Error {}

    @Test func defaultIsAFixedSmallSet() {
        #expect(SimulationSeeds.from(environment: [:]) == [1, 2, 3, 4, 5])
        #expect(SimulationSeeds.from(environment: [:], defaultCount: 2) == [1, 2])
    }

    @Test func simSeedsAsksForACount() {
        #expect(SimulationSeeds.from(environment: ["SIM_SEEDS": "200"]).count == 200)
        #expect(SimulationSeeds.from(environment: ["SIM_SEEDS": "200"]).last == 200)
        #expect(SimulationSeeds.from(environment: ["SIM_SEEDS": "1"]) == [1])
        #expect(SimulationSeeds.from(environment: ["SIM_SEEDS": "many"]) == [1, 2, 3, 4, 5])
        #expect(SimulationSeeds.from(environment: ["SIM_SEEDS": "0"]) == [1, 2, 3, 4, 5])
    }

    @Test func simSeedReplaysExactSeeds() {
        #expect(SimulationSeeds.from(environment: ["SIM_SEED": "17"]) == [17])
        #expect(SimulationSeeds.from(environment: ["SIM_SEED": "3, 17,42", "SIM_SEEDS": "100"]) == [3, 17, 42])
        #expect(SimulationSeeds.from(environment: ["SIM_SEED": "x", "SIM_SEEDS": "2"]) == [1, 2])
    }

    @Test func failuresNameTheirSeed() {
        var ran: [UInt64] = []
        #expect {
            try SimulationSeeds.forEach([4, 5, 6]) { seed in
                ran.append(seed)
                if seed == 5 { throw Failure() }
            }
        } throws: { error in
            (error as? SeededFailure)?.seed == 5 && "\(error)".contains("SIM_SEED=5")
        }
        #expect(ran == [4, 5])
        #expect(SimulationSeeds.replay(9) == "seed 9 (replay: SIM_SEED=9)")
    }
}
