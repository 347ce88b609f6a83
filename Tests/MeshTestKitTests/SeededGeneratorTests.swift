import Testing
import MeshTestKit

@Suite struct SeededGeneratorTests {
    @Test func sameSeedSameStream() {
        var a = SeededGenerator(seed: 42)
        var b = SeededGenerator(seed: 42)
        let first = (0..<100).map { _ in a.next() }
        #expect(first == (0..<100).map { _ in b.next() })
        var c = SeededGenerator(seed: 43)
        #expect(first != (0..<100).map { _ in c.next() })
    }

    /// Pins the algorithm: replaying a reported seed must give the same run on every machine
    /// and toolchain, so the stream may never change silently. (xoshiro256** seeded by
    /// SplitMix64 from 0; SplitMix64(0)'s first output is the published 0xe220a8397b1dcdaf.)
    @Test func streamIsPinned() {
        var generator = SeededGenerator(seed: 0)
        let values = (0..<3).map { _ in generator.next() }
        #expect(values == SeededGeneratorTests.pinnedSeedZero, "got \(values.map { String($0, radix: 16) })")
    }

    static let pinnedSeedZero: [UInt64] = [0x99ec_5f36_cb75_f2b4, 0xbf6e_1f78_4956_452a, 0x1a5f_849d_4933_e6e0]

    @Test func forksAreDeterministicAndIndependent() {
        var parent1 = SeededGenerator(seed: 7)
        var parent2 = SeededGenerator(seed: 7)
        var child1 = parent1.fork()
        var child2 = parent2.fork()
        let childStream = (0..<50).map { _ in child1.next() }
        #expect(childStream == (0..<50).map { _ in child2.next() })
        // The child is not the parent's continuation, and the parent moved on identically.
        let parentStream = (0..<50).map { _ in parent1.next() }
        #expect(parentStream != childStream)
        #expect(parentStream == (0..<50).map { _ in parent2.next() })
        // Two forks of one parent differ from each other.
        var sibling = parent1.fork()
        #expect((0..<50).map { _ in sibling.next() } != childStream)
    }

    @Test(arguments: SimulationSeeds.from())
    func boundedValuesAreInRangeAndRoughlyUniform(seed: UInt64) {
        var generator = SeededGenerator(seed: seed)
        var buckets = [Int](repeating: 0, count: 10)
        for _ in 0..<20_000 {
            let value = generator.next(below: 10)
            #expect(value < 10)
            buckets[Int(value)] += 1
        }
        // Expected 2,000 each, standard deviation ~42: ±300 is a > 7 sigma margin.
        #expect(buckets.allSatisfy { abs($0 - 2000) < 300 }, "\(SimulationSeeds.replay(seed)): \(buckets)")

        for _ in 0..<1000 {
            let value = generator.next(in: -3...3)
            #expect((-3...3).contains(value))
            let double = generator.nextDouble()
            #expect(double >= 0 && double < 1)
            let duration = generator.duration(upTo: .microseconds(5))
            #expect(duration >= .zero && duration <= .microseconds(5))
        }
        #expect(generator.next(in: Int.min...Int.max) != generator.next(in: Int.min...Int.max))
    }

    @Test func certainChancesDrawNothing() {
        var generator = SeededGenerator(seed: 1)
        let before = generator
        let never = generator.chance(0), always = generator.chance(1)
        let none = generator.duration(upTo: .zero)
        #expect(!never && always && none == .zero)
        #expect(generator == before)
        var hits = 0
        for _ in 0..<10_000 where generator.chance(0.25) { hits += 1 }
        #expect(abs(hits - 2500) < 250, "hits \(hits)")
    }
}
