import Dispatch
import MeshStore
import NIOConcurrencyHelpers

/// Writes a `get`'s output on a thread of its own, so that the store's one worker goes on to hash
/// and store the next chunk meanwhile. Each fetched chunk was written twice into fresh page cache
/// (its file in the store, then the output): on the worker alone, that thread was busy the whole
/// second half of a loopback `get` from 3 holders while the other core sat half idle (perf).
/// The output's writes also go around the page cache where they can (`UncachedWriter`).
///
/// Writes to one file keep their order; at most `capacity` chunks wait (their bytes are held
/// meanwhile), and a caller beyond that waits for room. `drain` waits for a file's writes and
/// returns the first failure: done before the file is synced, renamed or closed, so that no
/// write lands after (or on a descriptor number reused by then).
final class OutputWriter: Sendable {
    static let shared = OutputWriter(capacity: 16)

    private let queue = DispatchQueue(label: "groupmesh.output-writer")
    private let room: DispatchSemaphore

    init(capacity: Int) {
        room = DispatchSemaphore(value: max(1, capacity))
    }

    /// One output file's writes: those in flight, and the first that failed.
    // Unchecked: `direct` (not thread-safe) is only used on the writer's queue, which is serial.
    final class Writes: @unchecked Sendable {
        fileprivate let pending = DispatchGroup()
        private let failure = NIOLockedValueBox<Int32>(0)
        /// This file's own: where its file system refuses direct I/O, it is off for this file only.
        fileprivate let direct = UncachedWriter()

        /// The errno of the first write that failed so far (0: none yet); `drain` waits for all.
        var failedSoFar: Int32 { failure.withLockedValue { $0 } }

        fileprivate func record(_ code: Int32) {
            guard code != 0 else { return }
            failure.withLockedValue { if $0 == 0 { $0 = code } }
        }

        /// Whether every write handed over is done (without waiting).
        var isSettled: Bool { pending.wait(timeout: .now()) == .success }

        /// Waits until every write handed over is done: 0, or the errno of the first that failed.
        func drain() -> Int32 {
            pending.wait()
            return failedSoFar
        }
    }

    /// Writes `bytes` at each of `offsets` of `fd`, after the writes handed over before; nothing
    /// once one of this file's writes failed.
    func write(_ bytes: [UInt8], at offsets: [Int64], to fd: Int32, _ writes: Writes) {
        guard !offsets.isEmpty, writes.failedSoFar == 0 else { return }
        room.wait()
        writes.pending.enter()
        queue.async { [room] in
            for offset in offsets where writes.failedSoFar == 0 {
                writes.record(bytes.withUnsafeBytes { writes.direct.write(fd, $0, at: offset) })
            }
            writes.pending.leave()
            room.signal()
        }
    }

    /// Holds back every write not started yet until the returned closure is called (tests: what
    /// waits for writes must wait for these).
    func hold() -> @Sendable () -> Void {
        queue.suspend()
        return { [queue] in queue.resume() }
    }
}
