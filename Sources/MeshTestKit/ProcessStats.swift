import Foundation

/// What Linux's /proc says about a process: CPU time used and resident memory (0 when unreadable).
package enum ProcessStats {
    /// User plus system CPU time, in seconds.
    package static func cpuSeconds(_ pid: pid_t) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // Fields after the command: state is [0], utime [11], stime [12], in clock ticks.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident and peak resident size, in MiB.
    package static func memory(_ pid: pid_t) -> (resident: Double, peak: Double) {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return (0, 0) }
        func value(_ key: String) -> Double {
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(key + ":") }),
                let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
            else { return 0 }
            return kilobytes / 1024
        }
        return (value("VmRSS"), value("VmHWM"))
    }

    /// Starts the peak resident size afresh (`echo 5 > /proc/PID/clear_refs`).
    package static func resetPeak(_ pid: pid_t) {
        try? "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
    }
}

/// Writes `size` random bytes (rounded down to whole 8-byte words) to `path`; returns them.
@discardableResult
package func writeRandomFile(
    _ path: String, size: Int, using generator: inout some RandomNumberGenerator
) throws -> Data {
    var words = [UInt64](repeating: 0, count: size / 8)
    for index in words.indices { words[index] = generator.next() }
    let bytes = words.withUnsafeBytes { Data($0) }
    try bytes.write(to: URL(fileURLWithPath: path))
    return bytes
}
