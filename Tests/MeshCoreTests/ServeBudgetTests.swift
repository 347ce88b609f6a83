import MeshCore
import MeshCrypto
import Testing

@Suite("Serve budget")
struct ServeBudgetTests {
    static let chunkLength = 262_144
    static func at(_ milliseconds: Int) -> MeshInstant { MeshInstant(nanoseconds: UInt64(milliseconds) * 1_000_000) }
    static func key(_ peer: UInt64, _ byte: UInt8) -> ServeBudget.Key {
        ServeBudget.Key(peer: NodeID(high: peer, low: peer), digest: SHA256Digest.hashing([byte]))
    }

    @Test("a chunk and its lost pieces go out; a third copy within the window is refused, then allowed again")
    func twoCopiesPerWindow() {
        var budget = ServeBudget(window: .seconds(1), copies: 2)
        let key = Self.key(1, 1)
        #expect(budget.allows(key, now: Self.at(0)))
        budget.charge(Self.chunkLength, of: Self.chunkLength, to: key, now: Self.at(0))
        // Re-asks for lost pieces: a twentieth of the chunk, three times.
        for time in [10, 30, 70] {
            #expect(budget.allows(key, now: Self.at(time)))
            budget.charge(Self.chunkLength / 20, of: Self.chunkLength, to: key, now: Self.at(time))
        }
        #expect(budget.allows(key, now: Self.at(80)), "asking the whole chunk again once is allowed")
        budget.charge(Self.chunkLength, of: Self.chunkLength, to: key, now: Self.at(80))
        #expect(!budget.allows(key, now: Self.at(90)), "a third copy in one second")
        #expect(budget.allows(Self.key(2, 1), now: Self.at(90)), "another member is not held back")
        #expect(budget.allows(Self.key(1, 2), now: Self.at(90)), "nor another chunk")
        #expect(budget.allows(key, now: Self.at(1000)), "a new window")
        budget.charge(Self.chunkLength, of: Self.chunkLength, to: key, now: Self.at(1000))
        #expect(budget.allows(key, now: Self.at(1001)), "the window restarted with one copy")
    }

    @Test("a full table makes room by forgetting members served before the window, then any one")
    func boundedByCapacity() {
        var budget = ServeBudget(window: .seconds(1), copies: 1, capacity: 4)
        for byte in UInt8(0)..<4 { budget.charge(100, of: 100, to: Self.key(1, byte), now: Self.at(0)) }
        budget.charge(100, of: 100, to: Self.key(1, 9), now: Self.at(500))
        #expect(budget.count == 4)
        budget.charge(100, of: 100, to: Self.key(1, 10), now: Self.at(1200))
        #expect(budget.count == 2, "the entries from before the window were forgotten")
        #expect(
            !budget.allows(Self.key(1, 9), now: Self.at(1200)) && !budget.allows(Self.key(1, 10), now: Self.at(1200)))
    }
}
