/// Sliding anti-replay window over 64-bit packet numbers (RFC 6479's bitmap, kept per peer per
/// boot). A number is accepted once; numbers `size` or more below the highest seen are refused
/// as too old. Check first, record only after the datagram authenticated, so forged packets
/// cannot move the window.
package struct ReplayWindow: Sendable, Equatable {
    package enum Verdict: Equatable, Sendable {
        case fresh
        case duplicate
        case tooOld
    }

    package let size: UInt64
    private var blocks: [UInt64]
    private var highest: UInt64 = 0
    private var seenAny = false

    /// `size` is rounded up to a multiple of 64.
    package init(size: Int = 4096) {
        let blocks = max(1, (size + 63) / 64)
        self.size = UInt64(blocks * 64)
        self.blocks = [UInt64](repeating: 0, count: blocks)
    }

    package var highestAccepted: UInt64? { seenAny ? highest : nil }

    package func check(_ number: UInt64) -> Verdict {
        guard seenAny, number <= highest else { return .fresh }
        if highest - number >= size { return .tooOld }
        return isSet(number) ? .duplicate : .fresh
    }

    /// Records `number`; returns false (and changes nothing) if `check` would not say `.fresh`.
    @discardableResult
    package mutating func record(_ number: UInt64) -> Bool {
        guard check(number) == .fresh else { return false }
        if !seenAny || number > highest {
            advance(to: number)
        }
        let bit = number % size
        blocks[Int(bit / 64)] |= 1 << (bit % 64)
        return true
    }

    private func isSet(_ number: UInt64) -> Bool {
        let bit = number % size
        return blocks[Int(bit / 64)] & (1 << (bit % 64)) != 0
    }

    /// Clears the bits of the numbers between the old and the new highest, which the ring reuses.
    private mutating func advance(to number: UInt64) {
        defer { highest = number; seenAny = true }
        guard seenAny else { return }
        let distance = number - highest
        if distance >= size {
            for index in blocks.indices { blocks[index] = 0 }
            return
        }
        var remaining = distance
        var n = highest &+ 1
        while remaining > 0 {
            let bit = n % size
            if bit % 64 == 0 && remaining >= 64 {
                blocks[Int(bit / 64)] = 0
                n &+= 64
                remaining -= 64
            } else {
                blocks[Int(bit / 64)] &= ~(1 << (bit % 64))
                n &+= 1
                remaining -= 1
            }
        }
    }
}
