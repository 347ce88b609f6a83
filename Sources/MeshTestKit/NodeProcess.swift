import Foundation

/// A real `groupmesh` process for end-to-end tests: started with a temporary data dir on
/// loopback, its output captured, every wait bounded, and killed when the test is done.
package final class NodeProcess: @unchecked Sendable {
    package let dataDirectory: String
    package let process: ChildProcess
    /// Whether `cleanUp` may delete the data dir (not for a client of another node's dir).
    package let ownsDataDirectory: Bool
    /// When the process was started, to tell a slow start from a stuck one in failures.
    package let startedAt = ContinuousClock.now
    /// The `groupmesh` it runs (`executable`, or another release's), which its clients use too.
    package let binary: String

    /// The built `groupmesh` next to the test bundle, or `$GROUPMESH_BIN`.
    package static var executable: String {
        if let override = ProcessInfo.processInfo.environment["GROUPMESH_BIN"] { return override }
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        // A macOS-style bundle path (…/X.xctest/Contents/MacOS/X) or the Linux test binary.
        while directory.path.contains(".xctest") { directory.deleteLastPathComponent() }
        return directory.appendingPathComponent("groupmesh").path
    }

    /// A fresh directory under `temporaryRoot`, removed when this process exits if nothing
    /// removed it before (see `ExitCleanup`).
    package static func makeTemporaryDirectory(_ label: String = "node") -> String {
        let path = temporaryRoot + "groupmesh-test-\(label)-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        ExitCleanup.add(directory: path)
        return path
    }

    /// Where test data dirs live: `$GROUPMESH_TEST_TMPDIR`, else `/dev/shm` when it has room, else
    /// the temporary directory. On tmpfs a node's fsyncs do not queue behind the disk writeback of a
    /// build that just finished, which on a slow CI disk made node start-up take tens of seconds.
    package static let temporaryRoot: String = {
        if let override = ProcessInfo.processInfo.environment["GROUPMESH_TEST_TMPDIR"], !override.isEmpty {
            return override.hasSuffix("/") ? override : override + "/"
        }
        var stats = statvfs()
        if access("/dev/shm", W_OK) == 0, statvfs("/dev/shm", &stats) == 0,
            UInt64(stats.f_bavail) * UInt64(stats.f_frsize) >= 2 << 30
        {
            return "/dev/shm/"
        }
        return NSTemporaryDirectory()
    }()

    /// Starts `groupmesh ARGUMENTS` (e.g. `["run", "--listen", "127.0.0.1:0"]`); `--data-dir` is added.
    /// `launcher` runs it through another program that execs it, such as `ip netns exec NAME`.
    /// A `run` gets `--print-invite` (its stdout is a pipe here, and tests read its `invite:` line)
    /// unless `printInvite` is false, for tests of what `run` prints to a pipe by default.
    package init(
        _ arguments: [String], dataDirectory: String? = nil, launcher: [String] = [],
        ownsDataDirectory: Bool = true, printInvite: Bool = true, binary: String = NodeProcess.executable
    ) throws {
        self.dataDirectory = dataDirectory ?? Self.makeTemporaryDirectory()
        self.ownsDataDirectory = ownsDataDirectory
        self.binary = binary
        var arguments = arguments
        if printInvite, arguments.first == "run", !arguments.contains("--print-invite") {
            arguments.append("--print-invite")
        }
        let command = launcher + [binary] + arguments + ["--data-dir", self.dataDirectory]
        process = try ChildProcess(executable: command[0], arguments: Array(command.dropFirst()))
    }

    package var pid: pid_t { process.pid }
    /// The exit status once the process has ended, nil while it runs.
    package var terminationStatus: Int32? { process.terminationStatus }
    package var stdout: String { process.output.text }
    package var stderr: String { process.errors.text }

    /// Waits (bounded) until stdout (or stderr) holds a line starting with `prefix`; returns its remainder.
    package func waitForLine(
        prefix: String, timeout: Duration = .seconds(60), onStderr: Bool = false,
        containing: String = ""
    ) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        func found() -> String? {
            let text = onStderr ? stderr : stdout
            guard
                let line = text.split(separator: "\n").first(where: {
                    $0.hasPrefix(prefix) && (containing.isEmpty || $0.contains(containing))
                })
            else { return nil }
            return String(line.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces)
        }
        while ContinuousClock.now < deadline {
            if let rest = found() { return rest }
            // Gone: once what it wrote last is read, the line is there or will not come.
            if let status = try await exitStatusOnceRead() {
                if let rest = found() { return rest }
                throw NodeProcessError.exited(status: status, stderr: stderr)
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw NodeProcessError.timeout("no '\(prefix)' line within \(timeout); stderr: \(stderr)")
    }

    package func signal(_ signal: Int32) { process.signal(signal) }

    /// Waits (bounded) for the process to exit and returns its status, once what it wrote last
    /// was read (`exitStatusOnceRead`).
    @discardableResult
    package func waitForExit(timeout: Duration = .seconds(20)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = try await exitStatusOnceRead() { return status }
            guard ContinuousClock.now < deadline else {
                throw NodeProcessError.timeout("process still running after \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Nil while it runs; once it exited, its status when what it wrote last was read: `stdout`
    /// and `stderr` then hold it all (the readers drain the pipes on threads of their own, which
    /// a busy machine may not have run yet). A pipe that a child it left behind holds open is
    /// waited for 5 s at most.
    private func exitStatusOnceRead() async throws -> Int32? {
        guard let status = process.terminationStatus else { return nil }
        let drained = ContinuousClock.now + .seconds(5)
        while !process.outputIsComplete, ContinuousClock.now < drained {
            try await Task.sleep(for: .milliseconds(5))
        }
        return status
    }

    /// Kills the process if needed and removes its data dir.
    package func cleanUp(removeData: Bool = true) async {
        if process.isRunning {
            process.signal(SIGKILL)
            _ = try? await waitForExit(timeout: .seconds(10))
        }
        if removeData, ownsDataDirectory { try? FileManager.default.removeItem(atPath: dataDirectory) }
    }

    /// Runs a short-lived `groupmesh` command (of `binary`) to completion (bounded) and returns its output.
    package static func runCommand(
        _ arguments: [String], timeout: Duration = .seconds(60), binary: String = NodeProcess.executable
    ) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        let process = try ChildProcess(executable: binary, arguments: arguments)
        let deadline = ContinuousClock.now + timeout
        var status = process.terminationStatus
        while status == nil {
            guard ContinuousClock.now < deadline else {
                process.signal(SIGKILL)
                throw NodeProcessError.timeout("groupmesh \(arguments.joined(separator: " ")) took over \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(5))
            status = process.terminationStatus
        }
        // The process is gone; its pipes reach end-of-file once the readers drained them.
        while process.output.hasPendingData || process.errors.hasPendingData,
            ContinuousClock.now < deadline + .seconds(2)
        {
            try await Task.sleep(for: .milliseconds(5))
        }
        return (status ?? -1, process.output.text, process.errors.text)
    }
}

package enum NodeProcessError: Error, CustomStringConvertible {
    case exited(status: Int32, stderr: String)
    case timeout(String)

    package var description: String {
        switch self {
        case let .exited(status, stderr): return "groupmesh exited with status \(status): \(stderr)"
        case let .timeout(what): return "timed out: \(what)"
        }
    }
}
