import Foundation

/// What a test or benchmark process leaves behind, undone when it exits: clean-ups scheduled in a
/// `Task` (`defer { Task { … } }`) may never run once the last test returned. Children are
/// killed first, then the temporary directories go (`GROUPMESH_KEEP_TEST_DIRS=1` or `BENCH_KEEP=1`
/// keeps the directories, to look at after a failure).
enum ExitCleanup {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var installed = false
    nonisolated(unsafe) private static var directories: Set<String> = []

    static func install() {
        lock.lock()
        defer { lock.unlock() }
        guard !installed else { return }
        installed = true
        atexit { ExitCleanup.run() }
    }

    /// A directory to remove at exit.
    static func add(directory path: String) {
        install()
        lock.lock()
        defer { lock.unlock() }
        directories.insert(path)
    }

    private static func run() {
        LiveChildren.killAll()
        let environment = ProcessInfo.processInfo.environment
        guard environment["GROUPMESH_KEEP_TEST_DIRS"] == nil, environment["BENCH_KEEP"] == nil else { return }
        lock.lock()
        let paths = directories
        directories = []
        lock.unlock()
        for path in paths { try? FileManager.default.removeItem(atPath: path) }
    }
}
