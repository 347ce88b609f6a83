/// The last `capacity` distinct elements inserted, oldest forgotten first: a bounded memory of
/// what was seen lately (hello nonces, chunks just written), with O(1) insert and lookup.
package struct RecentSet<Element: Hashable & Sendable>: Sendable {
    private var members: Set<Element> = []
    private var order: [Element] = []
    private var next = 0
    package let capacity: Int

    package init(capacity: Int) { self.capacity = max(0, capacity) }

    package func contains(_ element: Element) -> Bool { members.contains(element) }

    package mutating func insert(_ element: Element) {
        guard capacity > 0, members.insert(element).inserted else { return }
        if order.count < capacity {
            order.append(element)
        } else {
            members.remove(order[next])
            order[next] = element
            next = (next + 1) % capacity
        }
    }

    /// Forgets `element` now (its slot in the order is reused when it comes round; inserted again
    /// before that, it is forgotten early then: a memory that may only err toward forgetting).
    package mutating func remove(_ element: Element) {
        members.remove(element)
    }
}
