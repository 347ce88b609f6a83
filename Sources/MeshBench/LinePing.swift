import Foundation
import MeshTestKit

/// A ping from host 3 to host 0 every 50 ms, across the emulated line, as a household's
/// interactive traffic crosses it while a fetch runs: each reply waits in the downlink's queue
/// behind the pieces and the TCP download, so its round trip is the delay the line adds for
/// everyone in the house (what LEDBAT bounds: a background transfer should add at most its
/// target). The fetch's own controller sees only the lowest queue of each interval.
final class LinePing {
    struct Sample {
        /// When the reply came, on `Date`'s reference clock (as the bench's windows are).
        var at: Double
        var milliseconds: Double
    }

    private let process: ChildProcess

    /// Nil, with the reason printed, where ping is missing.
    static func start(lab: NamespaceLab) -> LinePing? {
        guard
            let ping = ["/usr/bin/ping", "/bin/ping"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            print("  no ping (apt-get install iputils-ping): the line's round trip under load is not measured")
            return nil
        }
        do {
            return LinePing(
                process: try ChildProcess(
                    executable: WANLink.ipPath,
                    arguments: [
                        "netns", "exec", lab.hosts[3], "env", "LC_ALL=C", ping, "-n", "-D", "-i", "0.05", "-W", "1",
                        lab.addresses[0],
                    ]))
        } catch {
            print("  ping did not start (\(error)): the line's round trip under load is not measured")
            return nil
        }
    }

    private init(process: ChildProcess) { self.process = process }

    deinit { _ = stop() }

    /// Stops it (bounded) and returns the replies it saw.
    func stop() -> [Sample] {
        process.stop(with: SIGINT)
        return Self.samples(process.standardOutput)
    }

    /// `[1764213456.123456] 64 bytes from 10.213.1.1: icmp_seq=1 ttl=64 time=80.3 ms` (ping runs
    /// in the C locale, so its decimals are points).
    static func samples(_ text: String) -> [Sample] {
        let unixToReference = Date.timeIntervalBetween1970AndReferenceDate
        return text.split(separator: "\n").compactMap { line in
            // A duplicate reply (`DUP!`) says nothing new about the queue.
            guard line.hasPrefix("["), !line.contains("DUP!"), let close = line.firstIndex(of: "]"),
                let unix = Double(line[line.index(after: line.startIndex)..<close]),
                let time = line.range(of: "time=")
            else { return nil }
            let value = line[time.upperBound...].prefix { $0.isNumber || $0 == "." }
            guard let milliseconds = Double(value) else { return nil }
            return Sample(at: unix - unixToReference, milliseconds: milliseconds)
        }
    }

    /// The highest round trip of each `every` seconds from `from` to `to` (nil: no reply then),
    /// for tracing a fetch beside its downlink's samples.
    static func highest(_ samples: [Sample], from: Double, to: Double, every: Double) -> [Double?] {
        var bins = [Double?](repeating: nil, count: max(0, Int(((to - from) / every).rounded(.up))))
        for sample in samples where sample.at >= from && sample.at < to {
            let bin = min(bins.count - 1, Int((sample.at - from) / every))
            bins[bin] = max(bins[bin] ?? 0, sample.milliseconds)
        }
        return bins
    }

    /// The median and 90th percentile of the round trips between `from` and `to` (nil: none).
    static func summary(_ samples: [Sample], from: Double, to: Double) -> (median: Double, p90: Double, count: Int)? {
        let values = samples.filter { $0.at >= from && $0.at <= to }.map(\.milliseconds)
        guard !values.isEmpty else { return nil }
        return (percentile(values, 0.5), percentile(values, 0.9), values.count)
    }
}
