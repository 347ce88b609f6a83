import Foundation

/// Which process owns each namespace lab, so that a lab left behind by one that was killed (a
/// SIGKILL, a CI timeout: no `deinit` runs) is removed when the next lab is built, with whatever
/// still runs inside it (nodes, the link emulator). Every lab leaves a file named by its tag that
/// holds its owner's pid; a lab whose owner is gone is stale. The labs of live processes (a bench
/// beside a test run) are left alone, and so are namespaces no registered lab made.
enum LabRegistry {
    /// On tmpfs: cleared at boot, as the namespaces are.
    static let directory = "/run/groupmesh-labs"

    static func register(tag: String, owner: pid_t = getpid()) {
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Atomic: another process sweeping must never read a half-written owner.
        try? Data("\(owner)\n".utf8).write(to: URL(fileURLWithPath: "\(directory)/\(tag)"), options: .atomic)
    }

    static func unregister(tag: String) {
        try? FileManager.default.removeItem(atPath: "\(directory)/\(tag)")
    }

    /// Removes the namespaces of every lab whose owner is gone, after killing what runs in them.
    static func sweepStale(ip: String) {
        guard let tags = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        let stale = tags.filter { tag in
            // A lab's tag is four hex digits; anything else (an atomic write's temporary file) or a
            // file that names no pid is not known to be stale, and is left alone.
            guard tag.count == 4, tag.allSatisfy(\.isHexDigit) else { return false }
            guard let text = try? String(contentsOfFile: "\(directory)/\(tag)", encoding: .utf8),
                let owner = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
            else { return false }
            return kill(owner, 0) != 0 && errno == ESRCH
        }
        guard !stale.isEmpty else { return }
        let spaces = run(ip, ["netns", "list"]).split(separator: "\n").compactMap { $0.split(separator: " ").first }
        for tag in stale {
            // Names are "gm", the four hex digits of the tag, then a suffix.
            for space in spaces where space.hasPrefix("gm") && space.dropFirst(2).prefix(4) == tag {
                for pid in run(ip, ["netns", "pids", String(space)]).split(separator: "\n").compactMap({ pid_t($0) }) {
                    kill(pid, SIGKILL)
                }
                _ = run(ip, ["netns", "del", String(space)])
            }
            unregister(tag: tag)
        }
    }

    /// Standard output of `executable` (empty when it cannot start or runs over 10 s).
    static func run(_ executable: String, _ arguments: [String]) -> String {
        (try? ChildProcess.run(executable, arguments, timeout: .seconds(10)))?.stdout ?? ""
    }
}
