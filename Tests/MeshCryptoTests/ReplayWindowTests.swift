import Testing
@testable import MeshCrypto

@Suite struct ReplayWindowTests {
    @Test func emptyWindowAcceptsAnything() {
        var window = ReplayWindow()
        #expect(window.highestAccepted == nil)
        #expect(window.check(0) == .fresh)
        #expect(window.check(1) == .fresh)
        #expect(window.check(.max) == .fresh)
        do { let recorded = window.record(1); #expect(recorded) }
        #expect(window.highestAccepted == 1)
    }

    @Test func sizeIsRoundedUpToAMultipleOf64() {
        #expect(ReplayWindow().size == 4096)
        #expect(ReplayWindow(size: 64).size == 64)
        #expect(ReplayWindow(size: 65).size == 128)
        #expect(ReplayWindow(size: 100).size == 128)
        #expect(ReplayWindow(size: 1).size == 64)
        #expect(ReplayWindow(size: 0).size == 64)
        #expect(ReplayWindow(size: -5).size == 64)
    }

    @Test func duplicatesAreRefusedAndChangeNothing() {
        var window = ReplayWindow()
        do { let recorded = window.record(5); #expect(recorded) }
        do { let recorded = window.record(3); #expect(recorded) }
        let before = window
        #expect(window.check(5) == .duplicate)
        #expect(window.check(3) == .duplicate)
        do { let recorded = window.record(5); #expect(!recorded) }
        do { let recorded = window.record(3); #expect(!recorded) }
        #expect(window == before)
        #expect(window.highestAccepted == 5)
        #expect(window.check(4) == .fresh)
        do { let recorded = window.record(4); #expect(recorded) }
        do { let recorded = window.record(4); #expect(!recorded) }
    }

    @Test func checkDoesNotRecord() {
        var window = ReplayWindow()
        #expect(window.check(9) == .fresh)
        #expect(window.check(9) == .fresh)
        #expect(window.highestAccepted == nil)
        do { let recorded = window.record(9); #expect(recorded) }
        #expect(window.check(9) == .duplicate)
    }

    @Test func packetNumberZeroIsAnOrdinaryNumber() {
        var window = ReplayWindow()
        do { let recorded = window.record(0); #expect(recorded) }
        #expect(window.highestAccepted == 0)
        #expect(window.check(0) == .duplicate)
        do { let recorded = window.record(1); #expect(recorded) }
        #expect(window.check(0) == .duplicate)
    }

    @Test(arguments: [64, 128, 4096])
    func edgeOfTheWindow(requestedSize: Int) {
        var window = ReplayWindow(size: requestedSize)
        let size = window.size
        let highest: UInt64 = 1_000_000
        do { let recorded = window.record(highest); #expect(recorded) }
        // highest - n == size: just outside.
        #expect(window.check(highest - size) == .tooOld)
        do { let recorded = window.record(highest - size); #expect(!recorded) }
        // highest - n == size - 1: the oldest number still inside, unseen.
        #expect(window.check(highest - (size - 1)) == .fresh)
        do { let recorded = window.record(highest - (size - 1)); #expect(recorded) }
        #expect(window.check(highest - (size - 1)) == .duplicate)
        // Everything strictly between is fresh until recorded.
        for offset in 1..<(size - 1) {
            #expect(window.check(highest - offset) == .fresh)
        }
        // Moving up by one pushes the oldest number out.
        do { let recorded = window.record(highest + 1); #expect(recorded) }
        #expect(window.check(highest - (size - 1)) == .tooOld)
        #expect(window.check(highest - (size - 2)) == .fresh)
    }

    @Test func farAheadJumpForgetsEverything() {
        var window = ReplayWindow()
        for n in UInt64(1)...100 { do { let recorded = window.record(n); #expect(recorded) } }
        let far = 100 + 1_000_000_000 as UInt64
        #expect(window.check(far) == .fresh)
        do { let recorded = window.record(far); #expect(recorded) }
        #expect(window.highestAccepted == far)
        #expect(window.check(100) == .tooOld)
        #expect(window.check(1) == .tooOld)
        #expect(window.check(far) == .duplicate)
        // Numbers just under the new highest have never been seen, even though the ring
        // positions they map to held old numbers.
        for n in (far - window.size + 1)..<far {
            #expect(window.check(n) == .fresh, "number \(n)")
        }
        #expect(window.check(far - window.size) == .tooOld)
    }

    @Test func nearUInt64MaxDoesNotTrap() {
        var window = ReplayWindow()
        do { let recorded = window.record(0); #expect(recorded) }
        do { let recorded = window.record(.max - 1); #expect(recorded) }
        do { let recorded = window.record(.max); #expect(recorded) }
        #expect(window.highestAccepted == .max)
        #expect(window.check(.max) == .duplicate)
        #expect(window.check(.max - 1) == .duplicate)
        #expect(window.check(.max - 2) == .fresh)
        #expect(window.check(.max - (window.size - 1)) == .fresh)
        #expect(window.check(.max - window.size) == .tooOld)
        #expect(window.check(0) == .tooOld)
        do { let recorded = window.record(0); #expect(!recorded) }
        do { let recorded = window.record(.max - 2); #expect(recorded) }

        var fromMax = ReplayWindow(size: 64)
        do { let recorded = fromMax.record(.max); #expect(recorded) }
        #expect(fromMax.check(.max - 63) == .fresh)
        #expect(fromMax.check(.max - 64) == .tooOld)
        do { let recorded = fromMax.record(.max - 63); #expect(recorded) }

        // Stepping one by one through the top of the range, across the ring's wrap.
        var stepping = ReplayWindow(size: 64)
        for n in (UInt64.max - 200)...UInt64.max {
            do { let recorded = stepping.record(n); #expect(recorded) }
            #expect(stepping.check(n) == .duplicate)
        }
    }

    @Test func jumpsOfEveryInterestingDistanceClearTheRightBits() {
        let size = ReplayWindow(size: 128).size
        for distance in [1, 2, 63, 64, 65, 127, 128, 129, 200, 255, 256, 1000] as [UInt64] {
            for start in [0, 1, 63, 64, 100, 127, 128] as [UInt64] {
                var window = ReplayWindow(size: 128)
                // Fill the whole window below `start + size`.
                let top = start + size - 1
                for n in start...top { do { let recorded = window.record(n); #expect(recorded) } }
                do { let recorded = window.record(top + distance); #expect(recorded) }
                for back in 0..<size {
                    let n = top + distance - back
                    let expected: ReplayWindow.Verdict = (back == 0 || n <= top) ? .duplicate : .fresh
                    #expect(window.check(n) == expected, "start \(start) distance \(distance) n \(n)")
                }
                #expect(window.check(top + distance - size) == .tooOld)
            }
        }
    }

    /// Compares the bitmap with an obviously right model (a set of accepted numbers) over
    /// random walks with small steps, reorderings, duplicates and big jumps.
    @Test func matchesASetModelOverRandomWalks() {
        let seed = testSeed(0x5eed_0001)
        var rng = SplitMix64(seed: seed)
        for round in 0..<40 {
            let requested = [64, 128, 192, 4096][round % 4]
            var window = ReplayWindow(size: requested)
            let size = window.size
            var accepted = Set<UInt64>()
            var highest: UInt64? = nil
            var cursor: UInt64 = round % 5 == 0 ? UInt64.max - 5000 : UInt64.random(in: 0...10_000, using: &rng)
            for step in 0..<3000 {
                let candidate: UInt64
                switch UInt8.random(in: 0..<10, using: &rng) {
                case 0: candidate = cursor &+ UInt64.random(in: 0...(3 * size), using: &rng)
                case 1: candidate = cursor &- UInt64.random(in: 0...(2 * size), using: &rng)
                case 2: candidate = cursor  // likely a duplicate
                default: candidate = cursor &+ UInt64.random(in: 0...3, using: &rng) &- 1
                }
                let expected: ReplayWindow.Verdict
                if let highest, candidate <= highest {
                    if highest - candidate >= size {
                        expected = .tooOld
                    } else if accepted.contains(candidate) {
                        expected = .duplicate
                    } else {
                        expected = .fresh
                    }
                } else {
                    expected = .fresh
                }
                let verdict = window.check(candidate)
                #expect(
                    verdict == expected,
                    "seed \(seed) round \(round) step \(step): \(candidate) with highest \(String(describing: highest))"
                )
                if verdict != expected { return }
                do { let recorded = window.record(candidate); #expect(recorded == (expected == .fresh)) }
                if expected == .fresh {
                    accepted.insert(candidate)
                    highest = max(highest ?? candidate, candidate)
                    // Forget what the model no longer needs.
                    if accepted.count > 4 * Int(size), let h = highest {
                        accepted = accepted.filter { h - $0 < size }
                    }
                }
                #expect(window.highestAccepted == highest)
                if candidate >= cursor || UInt8.random(in: 0..<4, using: &rng) == 0 { cursor = candidate }
            }
        }
    }
}
