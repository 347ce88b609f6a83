import Foundation

/// Data dirs whose removal waits until the runs measured after them are done.
///
/// On ext4 without a journal (this VM's disk), a file made within minutes of a mass deletion
/// scans past every recently freed inode of its group (`recently_deleted`): up to 0.9 ms per
/// file instead of a few microseconds. A late joiner makes 400 chunk files per 100 MiB, so each
/// run's cleanup slowed the next run's `get`; the bench measured its own churn, which a user's
/// disk (with a journal) never shows.
final class DeferredRemoval {
    private var paths: [String] = []

    func add(_ path: String) {
        paths.append(path)
    }

    func removeAll() {
        for path in paths { try? FileManager.default.removeItem(atPath: path) }
        paths = []
    }
}
