/// The streams handed out for one kind of update (the member list, messages, the attachment
/// set). A stream whose reader went away is dropped at the next yield, when its continuation
/// says it terminated: no callback into the node is needed to forget it.
struct Subscribers<Element: Sendable> {
    private var continuations: [AsyncStream<Element>.Continuation] = []
    /// Once the node stopped: a stream asked for later ends at once (after `initial`), so a
    /// `for await` begun after `leave()` does not hang.
    private var isFinished = false

    var isEmpty: Bool { continuations.isEmpty }

    /// A new stream, starting with `initial` when given.
    mutating func add(
        buffering policy: AsyncStream<Element>.Continuation.BufferingPolicy,
        initial: Element? = nil
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: policy)
        if let initial { continuation.yield(initial) }
        if isFinished {
            continuation.finish()
        } else {
            continuations.append(continuation)
        }
        return stream
    }

    /// Hands `element` to every stream; returns how many of them were full and dropped their
    /// oldest element for it (a reader that does not keep up).
    @discardableResult
    mutating func yield(_ element: Element) -> Int {
        var dropped = 0
        continuations.removeAll { continuation in
            switch continuation.yield(element) {
            case .terminated: return true
            case .dropped: dropped += 1
            case .enqueued: break
            @unknown default: break
            }
            return false
        }
        return dropped
    }

    mutating func finishAll() {
        isFinished = true
        for continuation in continuations { continuation.finish() }
        continuations = []
    }
}
