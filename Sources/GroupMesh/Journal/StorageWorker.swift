import MeshCore

/// The store's one ordered worker: requests run one at a time on the `AttachmentStore` actor,
/// in the order the core made them (so a chunk written before a collect is collected by it),
/// off the node's event loop, and each outcome goes back to the node with its ticket. A fetched
/// chunk's hashing and writing start at once on a pool thread (`ChunkPreparation`); the worker
/// commits it in its turn.
struct StorageWorker {
    struct Job: Sendable {
        var request: StorageRequest
        var ticket: StorageTicket
        /// A fetched chunk's hashing and writing, started when it was submitted.
        var preparation: ChunkPreparation?
    }

    typealias Delivery = @Sendable (StorageTicket, Result<StorageOutcome, StorageFailure>) -> Void

    let store: AttachmentStore
    /// The store's directory, where fetched chunks are prepared ahead of their turn.
    private let chunksPath: String
    private let jobs: AsyncStream<Job>
    private let continuation: AsyncStream<Job>.Continuation
    private var task: Task<Void, Never>?

    init(store: AttachmentStore, chunksPath: String) {
        self.store = store
        self.chunksPath = chunksPath
        (jobs, continuation) = AsyncStream.makeStream(of: Job.self)
    }

    mutating func start(delivering deliver: @escaping Delivery) {
        let store = store, jobs = jobs
        task = Task { await store.serve(jobs, delivering: deliver) }
    }

    func submit(_ request: StorageRequest, _ ticket: StorageTicket) {
        var preparation: ChunkPreparation?
        if case let .writeChunk(bytes, expected) = request {
            preparation = ChunkPreparation.start(bytes, expected: expected, inStoreAt: chunksPath)
        }
        continuation.yield(Job(request: request, ticket: ticket, preparation: preparation))
    }

    /// Takes no more requests, and returns once those already given are done.
    func finish() async {
        continuation.finish()
        await task?.value
    }
}
