import MeshCore
import Testing

@Suite("RecentSet")
struct RecentSetTests {
    @Test("keeps the last `capacity` distinct elements, oldest forgotten first; a repeat does not take a slot")
    func boundedFIFO() {
        var set = RecentSet<Int>(capacity: 3)
        for element in [1, 2, 2, 3] { set.insert(element) }
        #expect([1, 2, 3].allSatisfy(set.contains))
        set.insert(4)
        #expect(!set.contains(1) && set.contains(4))
        set.insert(5)
        #expect(!set.contains(2) && [3, 4, 5].allSatisfy(set.contains))
        set.remove(4)
        #expect(!set.contains(4))
        var none = RecentSet<Int>(capacity: 0)
        none.insert(1)
        #expect(!none.contains(1))
    }
}
