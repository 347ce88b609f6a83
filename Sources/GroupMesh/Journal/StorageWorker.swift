import MeshCore

/// The store's one ordered worker: requests run one at a time on the `AttachmentStore` actor,
/// in the order the core made them (so a chunk written before a collect is collected by it),
/// off the node's event loop, and each outcome goes back to the node with its ticket.
struct StorageWorker {
    struct Job: Sendable {
        var request: StorageRequest
        var ticket: StorageTicket
    }

    typealias Delivery = @Sendable (StorageTicket, Result<StorageOutcome, StorageFailure>) -> Void

    let store: AttachmentStore
    private let jobs: AsyncStream<Job>
    private let continuation: AsyncStream<Job>.Continuation
    private var task: Task<Void, Never>?

    init(store: AttachmentStore) {
        self.store = store
        (jobs, continuation) = AsyncStream.makeStream(of: Job.self)
    }

    mutating func start(delivering deliver: @escaping Delivery) {
        let store = store, jobs = jobs
        task = Task { await store.serve(jobs, delivering: deliver) }
    }

    func submit(_ request: StorageRequest, _ ticket: StorageTicket) {
        continuation.yield(Job(request: request, ticket: ticket))
    }

    /// Takes no more requests, and returns once those already given are done.
    func finish() async {
        continuation.finish()
        await task?.value
    }
}
