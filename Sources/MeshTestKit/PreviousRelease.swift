import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The `groupmesh` binary of an earlier release, built from its release commit for compatibility
/// tests (DEVELOPMENT.md, "The previous release") by `scripts/previous-release.sh`, once per
/// commit under `${XDG_CACHE_HOME:-$HOME/.cache}/groupmesh/compat/COMMIT/`. `make test` starts
/// that build in the background beside the real-time tests; a test asking for the binary then
/// waits for it (the script's lock), and a cached binary is used as it is.
package enum PreviousRelease {
    package enum Unavailable: Error, CustomStringConvertible {
        case notInRepository(String)
        case failed(String)

        package var description: String {
            switch self {
            case let .notInRepository(why): return why
            case let .failed(why): return why
            }
        }
    }

    /// The repository holding `file` (a test's `#filePath`): the first directory above it with
    /// a `Package.swift`.
    package static func repository(of file: String) -> String? {
        var directory = URL(fileURLWithPath: file).deletingLastPathComponent()
        while directory.path != "/" {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path) {
                return directory.path
            }
            directory.deleteLastPathComponent()
        }
        return nil
    }

    /// The previous release as `scripts/previous-release` pins it: its tag.
    package static func tag(in repository: String) -> String? {
        let pin = try? String(contentsOfFile: repository + "/scripts/previous-release", encoding: .utf8)
        return pin?.split(separator: " ").first.map(String.init)
    }

    /// The binary of the pinned release, built unless a run built it before (bounded by
    /// `buildTimeout`, the script's own bound and a margin).
    package static func binary(
        in repository: String, buildTimeout: Duration = .seconds(3700)
    ) async throws(Unavailable) -> String {
        let result: (status: Int32, output: String)
        do {
            result = try await shell(
                "exec " + quoted(repository + "/scripts/previous-release.sh"), timeout: buildTimeout)
        } catch {
            throw .failed("building the previous release: \(error)")
        }
        let lines = result.output.split(separator: "\n").map(String.init)
        for line in lines.dropLast()
        where line.hasPrefix("building") || line.hasPrefix("built") || line.hasPrefix("note:") { print(line) }
        let last = lines.last ?? ""
        switch result.status {
        case 0 where FileManager.default.isExecutableFile(atPath: last): return last
        case 2: throw .notInRepository(last)
        default: throw .failed(last.isEmpty ? "scripts/previous-release.sh ended with \(result.status)" : last)
        }
    }

    /// The protocol `binary` speaks, from its `--version` line (`groupmesh 0.10.0 (protocol 2, …`;
    /// 0.9.0's `(protocol 1, …` named its datagram format, which is protocol 1 too).
    package static func protocolVersion(of binary: String) throws(Unavailable) -> Int {
        let result: (status: Int32, stdout: String, stderr: String)
        do { result = try ChildProcess.run(binary, ["--version"]) } catch {
            throw .failed("\(binary) --version: \(error)")
        }
        guard result.status == 0,
            let range = result.stdout.range(of: #"\(protocol [0-9]+"#, options: .regularExpression),
            let version = Int(result.stdout[range].dropFirst("(protocol ".count))
        else {
            throw .failed(
                "\(binary) --version named no protocol (status \(result.status)): \(result.stdout)\(result.stderr)")
        }
        return version
    }

    /// `/bin/sh -c script`, its output and errors together, polled without blocking a thread.
    static func shell(_ script: String, timeout: Duration) async throws -> (status: Int32, output: String) {
        let process = try ChildProcess(executable: "/bin/sh", arguments: ["-c", "exec 2>&1\n" + script])
        let deadline = ContinuousClock.now + timeout
        while process.terminationStatus == nil {
            guard ContinuousClock.now < deadline else {
                process.stop(with: SIGKILL)
                throw NodeProcessError.timeout("`\(script.prefix(80))` took over \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        let drained = ContinuousClock.now + .seconds(5)
        while !process.outputIsComplete, ContinuousClock.now < drained { try await Task.sleep(for: .milliseconds(10)) }
        return (process.terminationStatus ?? -1, process.standardOutput)
    }

    static func quoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
