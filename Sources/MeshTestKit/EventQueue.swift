import MeshCore

/// A min-heap of pending events ordered by (time, sequence). The sequence number is the order
/// of insertion, so events due at the same instant run in the order they were scheduled:
/// without it a heap would break ties arbitrarily and two runs of one seed could differ.
///
/// The heap holds small keys and the events wait in slots of their own: a sift moves 24 bytes,
/// not an event with its datagram. Not generic: in a debug build (`make test`) a heap of generic
/// entries spent a fifth of a simulation's time in metadata lookups and value witnesses.
struct EventQueue {
    typealias Payload = Simulator.Event

    struct Entry {
        let time: MeshInstant
        let payload: Payload
    }

    private struct Key {
        let time: UInt64
        let sequence: UInt64
        let slot: Int

        func precedes(_ other: Key) -> Bool {
            time != other.time ? time < other.time : sequence < other.sequence
        }
    }

    private var heap: [Key] = []
    private var payloads: [Payload?] = []
    /// Slots of `payloads` whose events were popped, reused before the array grows.
    private var freeSlots: [Int] = []
    private var nextSequence: UInt64 = 0

    var isEmpty: Bool { heap.isEmpty }
    var count: Int { heap.count }
    var nextTime: MeshInstant? { heap.first.map { MeshInstant(nanoseconds: $0.time) } }

    mutating func push(_ payload: Payload, at time: MeshInstant) {
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            payloads[slot] = payload
        } else {
            slot = payloads.count
            payloads.append(payload)
        }
        heap.append(Key(time: time.nanoseconds, sequence: nextSequence, slot: slot))
        nextSequence += 1
        siftUp(heap.count - 1)
    }

    mutating func pop() -> Entry? {
        guard let first = heap.first else { return nil }
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        // A key in the heap always has its payload in its slot.
        let payload = payloads[first.slot].take()!
        freeSlots.append(first.slot)
        return Entry(time: MeshInstant(nanoseconds: first.time), payload: payload)
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        let key = heap[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard key.precedes(heap[parent]) else { break }
            heap[child] = heap[parent]
            child = parent
        }
        heap[child] = key
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let key = heap[parent]
        let count = heap.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            var smallest = left
            let right = left + 1
            if right < count, heap[right].precedes(heap[left]) { smallest = right }
            guard heap[smallest].precedes(key) else { break }
            heap[parent] = heap[smallest]
            parent = smallest
        }
        heap[parent] = key
    }
}
