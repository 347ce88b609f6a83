import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The `groupmesh` binary of an earlier release, built from its release commit for compatibility
/// tests (DEVELOPMENT.md, "The previous release"). Built once per commit under
/// `${XDG_CACHE_HOME:-$HOME/.cache}/groupmesh/compat/COMMIT/` (the commit's tree in `source/`, the
/// build in `build/`, the finished binary as `groupmesh`), under a lock file so that two test
/// runs do not build at once; a cached binary is used as it is. A build that failed is not tried
/// again for a day, or until its `failed.log` is removed.
package enum PreviousRelease {
    /// A release: its tag, and the commit the tag names. The commit is what is built: every full
    /// clone holds it, while a tag travels only when a clone or push asks for tags.
    package struct Release: Sendable {
        package let tag: String
        package let commit: String

        package init(tag: String, commit: String) {
            self.tag = tag
            self.commit = commit
        }
    }

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

    package static var cacheRoot: String {
        let environment = ProcessInfo.processInfo.environment
        let base =
            environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (environment["HOME"] ?? NSTemporaryDirectory()) + "/.cache"
        return base + "/groupmesh/compat"
    }

    /// The binary of `release`, building it if no run built it before (bounded by `buildTimeout`).
    package static func binary(
        of release: Release, repository: String, buildTimeout: Duration = .seconds(3600)
    ) async throws(Unavailable) -> String {
        let tag = release.tag
        guard let commit = await self.commit(of: release, in: repository) else {
            throw .notInRepository(
                "neither \(release.commit.prefix(12)) nor tag \(tag) is in \(repository) (a shallow clone? `git fetch --unshallow`)"
            )
        }
        let directory = cacheRoot + "/" + commit
        let binary = directory + "/groupmesh"
        if FileManager.default.isExecutableFile(atPath: binary) { return binary }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch { throw .failed("cannot make \(directory): \(error)") }
        let lock = open(directory + "/lock", O_CREAT | O_RDWR, 0o644)
        guard lock >= 0 else { throw .failed("cannot open \(directory)/lock") }
        defer { close(lock) }
        // Another run may be building it: wait for it (as long as a build may take).
        let deadline = ContinuousClock.now + buildTimeout
        while flock(lock, LOCK_EX | LOCK_NB) != 0 {
            guard ContinuousClock.now < deadline else { throw .failed("another run held \(directory)/lock too long") }
            do { try await Task.sleep(for: .seconds(1)) } catch {
                throw .failed("cancelled while waiting for \(directory)/lock")
            }
        }
        defer { flock(lock, LOCK_UN) }
        if FileManager.default.isExecutableFile(atPath: binary) { return binary }
        let failedLog = directory + "/failed.log"
        // A failure is not retried for a day (a build takes minutes), unless its log is removed.
        if let failed = try? FileManager.default.attributesOfItem(atPath: failedLog)[.modificationDate] as? Date,
            Date().timeIntervalSince(failed) < 86_400
        {
            throw .failed("building \(tag) failed before; see \(failedLog) (remove it to try again)")
        }
        let source = directory + "/source"
        let build = directory + "/build"
        let seconds = Int(buildTimeout.components.seconds)
        let script = """
            set -e
            if [ ! -f \(quoted(source))/Package.swift ]; then
                rm -rf \(quoted(source)) \(quoted(source)).partial && mkdir -p \(quoted(source)).partial
                git -C \(quoted(repository)) archive \(commit) | tar -x -C \(quoted(source)).partial
                mv \(quoted(source)).partial \(quoted(source))
            fi
            cd \(quoted(source))
            # timeout(1) runs the build in a process group of its own and ends all of it.
            timeout -k 10 \(seconds) swift build --product groupmesh --scratch-path \(quoted(build))
            cp "$(swift build --product groupmesh --scratch-path \(quoted(build)) --show-bin-path)/groupmesh" \
                \(quoted(binary)).partial
            mv \(quoted(binary)).partial \(quoted(binary))
            """
        let started = ContinuousClock.now
        print("building groupmesh \(tag) (\(commit.prefix(12))) into \(directory); this takes minutes, once")
        let result: (status: Int32, output: String)
        do { result = try await shell(script, timeout: buildTimeout + .seconds(30)) } catch {
            try? "\(error)".write(toFile: failedLog, atomically: true, encoding: .utf8)
            throw .failed("building \(tag): \(error)")
        }
        guard result.status == 0, FileManager.default.isExecutableFile(atPath: binary) else {
            try? result.output.write(toFile: failedLog, atomically: true, encoding: .utf8)
            throw .failed("building \(tag) failed (status \(result.status)); see \(failedLog)")
        }
        print("built groupmesh \(tag) in \(ContinuousClock.now - started)")
        return binary
    }

    /// The release's commit if the repository holds it, else the commit its tag names there. A
    /// tag that names another commit is said (the pin was mistyped, or the tag moved).
    static func commit(of release: Release, in repository: String) async -> String? {
        var resolved: [String?] = []
        for name in [release.commit, release.tag] {
            let result = try? await shell(
                "git -C \(quoted(repository)) rev-parse --verify -q \(quoted(name + "^{commit}"))",
                timeout: .seconds(30))
            resolved.append(
                result.flatMap { $0.status == 0 ? $0.output.trimmingCharacters(in: .whitespacesAndNewlines) : nil })
        }
        if let pinned = resolved[0], let tagged = resolved[1], pinned != tagged {
            print(
                "note: tag \(release.tag) names \(tagged.prefix(12)), not the pinned \(pinned.prefix(12)); building the pin"
            )
        }
        return resolved[0] ?? resolved[1]
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
