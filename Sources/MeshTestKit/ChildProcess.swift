import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with `posix_spawn`, its stdout and stderr captured, its exit seen
/// through `waitpid`. Foundation's `Process` on Linux learns of an exit through a descriptor the
/// child must close; when another child spawned at the same moment inherited it, a finished
/// `groupmesh status` looked alive for a minute and end-to-end tests timed out.
package final class ChildProcess: @unchecked Sendable {
    package let pid: pid_t
    let output: OutputCapture
    let errors: OutputCapture
    private let lock = NSLock()
    private var exitStatus: Int32?

    package init(executable: String, arguments: [String]) throws {
        Self.spawnLock.lock()
        defer { Self.spawnLock.unlock() }
        let stdoutPipe = try Self.pipe(), stderrPipe = try Self.pipe()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe.write, 1)
        posix_spawn_file_actions_adddup2(&actions, stderrPipe.write, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, nil, argv, environ)
        close(stdoutPipe.write)
        close(stderrPipe.write)
        guard result == 0 else {
            close(stdoutPipe.read)
            close(stderrPipe.read)
            throw NodeProcessError.exited(
                status: -1, stderr: "cannot start \(executable): \(String(cString: strerror(result)))")
        }
        pid = child
        LiveChildren.add(child)
        output = OutputCapture(fd: stdoutPipe.read)
        errors = OutputCapture(fd: stderrPipe.read)
    }

    deinit {
        if isRunning {
            kill(pid, SIGKILL)
            _ = reap(blocking: true)
        }
    }

    /// Both ends close on exec, so no other child inherits them (only the dup2 copies survive).
    /// Called under `spawnLock`, so no spawn runs between `pipe` and `fcntl`.
    private static func pipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        guard Glibc.pipe(&fds) == 0 else {
            throw NodeProcessError.exited(status: -1, stderr: "pipe: \(String(cString: strerror(errno)))")
        }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (fds[0], fds[1])
    }

    private static let spawnLock = NSLock()

    /// What it wrote so far.
    package var standardOutput: String { output.text }
    package var standardError: String { errors.text }
    /// Both pipes reached end-of-file: after the exit, all it wrote has been read.
    package var outputIsComplete: Bool { !output.hasPendingData && !errors.hasPendingData }

    package var isRunning: Bool { reap(blocking: false) == nil }

    /// The exit status (128 + signal when killed by one); nil while running.
    package var terminationStatus: Int32? { reap(blocking: false) }

    /// Blocks until the process exits; its status.
    package func waitUntilExit() -> Int32 {
        reap(blocking: true) ?? -1
    }

    package func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Sends `signal`, SIGKILL if it is still running 2 s later, and waits for the exit and for
    /// what it wrote (at most a second more): a tool stopped this way leaves its summary lines.
    package func stop(with signal: Int32 = SIGTERM) {
        if isRunning {
            self.signal(signal)
            var waited = 0
            while isRunning && waited < 200 { usleep(10_000); waited += 1 }
            if isRunning { self.signal(SIGKILL) }
            _ = waitUntilExit()
        }
        var waited = 0
        while !outputIsComplete && waited < 1000 { usleep(1000); waited += 1 }
    }

    /// Runs `executable ARGUMENTS` to its end: its status and what it wrote. Killed after
    /// `timeout` (`NodeProcessError.timeout`), and its pipes read for at most a second after the
    /// exit: a child it left behind may hold them open.
    package static func run(
        _ executable: String, _ arguments: [String], timeout: Duration = .seconds(20)
    ) throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        let process = try ChildProcess(executable: executable, arguments: arguments)
        let deadline = ContinuousClock.now + timeout
        var status = process.terminationStatus
        while status == nil {
            guard ContinuousClock.now < deadline else {
                process.signal(SIGKILL)
                _ = process.waitUntilExit()
                throw NodeProcessError.timeout(
                    "\(([executable] + arguments).joined(separator: " ")) took over \(timeout)")
            }
            usleep(1000)
            status = process.terminationStatus
        }
        var waited = 0
        while !process.outputIsComplete && waited < 1000 { usleep(1000); waited += 1 }
        return (status ?? -1, process.standardOutput, process.standardError)
    }

    private func reap(blocking: Bool) -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        let result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
        guard result == pid else { return nil }
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import as functions.
        let signal = status & 0x7f
        exitStatus = signal == 0 ? (status >> 8) & 0xff : 128 + signal
        LiveChildren.remove(pid)
        return exitStatus
    }
}

/// Every child still running, killed when this process exits: a test's clean-up that was only
/// scheduled (`defer { Task { … } }`) may never run once the last test returned, and no node
/// may outlive the test run.
enum LiveChildren {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var pids: Set<pid_t> = []

    static func add(_ pid: pid_t) {
        ExitCleanup.install()
        lock.lock()
        defer { lock.unlock() }
        pids.insert(pid)
    }

    static func remove(_ pid: pid_t) {
        lock.lock()
        defer { lock.unlock() }
        pids.remove(pid)
    }

    /// Kills every child and waits for it, so that none still writes where its files are removed.
    static func killAll() {
        lock.lock()
        defer { lock.unlock() }
        for pid in pids { kill(pid, SIGKILL) }
        for pid in pids {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
        pids = []
    }
}

/// Collects everything a pipe delivers, from a background reader thread, until end of file.
final class OutputCapture: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private var open = true

    init(fd: Int32) {
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                lock.lock()
                data.append(contentsOf: buffer[0..<n])
                lock.unlock()
            }
            close(fd)
            lock.lock()
            open = false
            lock.unlock()
        }
        thread.start()
    }

    var text: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: data, as: UTF8.self)
    }

    var hasPendingData: Bool {
        lock.lock()
        defer { lock.unlock() }
        return open
    }
}
