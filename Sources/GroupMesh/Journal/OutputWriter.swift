#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Dispatch
import MeshStore
import NIOConcurrencyHelpers

/// Writes a `get`'s output on a thread of its own, so that the store's one worker goes on to hash
/// and store the next chunk meanwhile. Each fetched chunk was written twice into fresh page cache
/// (its file in the store, then the output): on the worker alone, that thread was busy the whole
/// second half of a loopback `get` from 3 holders while the other core sat half idle (perf).
///
/// The output goes through the page cache and is synced every `syncInterval` bytes, so the device
/// writes it while the fetch runs instead of all of it at the rename. Written around the page
/// cache (O_DIRECT) instead, a `get` on a virtual disk whose host buffers the guest's writes (a
/// sync there flushes them all) took much longer to put the file on the device (BENCHMARKS.md).
///
/// Writes to one file keep their order; at most `capacity` bytes wait (held meanwhile), and a
/// caller beyond that waits for room. `drain` waits for a file's writes and returns the first
/// failure (a sync's too): done before the file is synced, renamed or closed, so that no write
/// lands after (or on a descriptor number reused by then).
final class OutputWriter: Sendable {
    static let shared = OutputWriter(capacity: 8 << 20)
    /// Room is counted in these: a chunk takes its size's worth, rounded up (at least one).
    private static let unit = 64 << 10

    private let queue = DispatchQueue(label: "groupmesh.output-writer")
    private let room: DispatchSemaphore
    private let units: Int
    /// One caller takes its room at a time: two taking part of theirs each could wait for good.
    private let admission = NIOLock()
    private let syncInterval: Int

    /// `capacity` bytes may wait (at least one write, whatever its size); each file's data is
    /// synced once `syncInterval` bytes were written to it since the last sync.
    init(capacity: Int, syncInterval: Int = 8 << 20) {
        units = max(1, capacity / Self.unit)
        room = DispatchSemaphore(value: units)
        self.syncInterval = max(1, syncInterval)
    }

    /// One output file's writes: those in flight, and the first that failed.
    // Unchecked: `unsynced` is only used on the writer's queue, which is serial.
    final class Writes: @unchecked Sendable {
        fileprivate let pending = DispatchGroup()
        private let failure = NIOLockedValueBox<Int32>(0)
        /// Bytes written since the file's last sync.
        fileprivate var unsynced = 0

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
        let taken = min(units, max(1, (bytes.count + Self.unit - 1) / Self.unit))
        admission.withLock { for _ in 0..<taken { room.wait() } }
        writes.pending.enter()
        queue.async { [room, syncInterval] in
            for offset in offsets where writes.failedSoFar == 0 {
                writes.record(bytes.withUnsafeBytes { FileIO.writeAll(fd, $0, at: offset) })
                writes.unsynced += bytes.count
                // Per offset: a chunk that stands at many (a file of zeros) is synced as it goes too.
                if writes.unsynced >= syncInterval, writes.failedSoFar == 0 {
                    writes.unsynced = 0
                    if fdatasync(fd) != 0 { writes.record(errno) }
                }
            }
            writes.pending.leave()
            for _ in 0..<taken { room.signal() }
        }
    }

    /// Holds back every write not started yet until the returned closure is called (tests: what
    /// waits for writes must wait for these).
    func hold() -> @Sendable () -> Void {
        queue.suspend()
        return { [queue] in queue.resume() }
    }
}
