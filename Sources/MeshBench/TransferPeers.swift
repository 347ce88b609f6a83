import Foundation
import MeshTestKit

/// Real peers the loopback `get`s are measured beside, in the same run and on the same disk:
/// libtorrent (Debian's python3-libtorrent) moving the file from 3 seeders to 1 leecher over TCP
/// (`bench/libtorrent-swarm.py`), and one plain TCP stream from one process to another
/// (`bench/tcp-stream.py`). Each writes under a fresh directory of the bench's temporary root,
/// syncs the file, compares it and prints `seconds=… bytes=…`; the rate is bytes over that time.
enum TransferPeers {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Debian's interpreter, which python3-libtorrent installs for (another python3 on PATH may not
    /// see it).
    static let python = ["/usr/bin/python3", "/usr/local/bin/python3"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// A script of bench/: from the working directory (`make bench` runs at the root), else from the
    /// checkout this driver was built from.
    static func script(_ name: String) -> String? {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return [
            FileManager.default.currentDirectoryPath + "/bench/" + name,
            root.appendingPathComponent("bench/" + name).path,
        ].first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Why the libtorrent row cannot be measured here, or nil (after printing the version in use).
    static func libtorrentProblem() -> String? {
        guard let python else { return "no /usr/bin/python3" }
        guard let script = script("libtorrent-swarm.py") else { return "bench/libtorrent-swarm.py is missing" }
        let check: (status: Int32, stdout: String, stderr: String)
        do {
            check = try ChildProcess.run(python, [script, "--check"], timeout: .seconds(30))
        } catch {
            return "\(script) --check: \(error)"
        }
        guard check.status == 0 else {
            let said = check.stderr.split(separator: "\n").last.map(String.init) ?? ""
            return said.isEmpty ? "\(script) --check exited with status \(check.status)" : said
        }
        let version = check.stdout.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(
            of: "version=", with: "")
        print("  libtorrent \(version) (python3-libtorrent) beside each 3-holder get")
        return nil
    }

    /// Why the TCP stream row cannot be measured here, or nil.
    static func streamProblem() -> String? {
        guard python != nil else { return "no /usr/bin/python3" }
        return script("tcp-stream.py") == nil ? "bench/tcp-stream.py is missing" : nil
    }

    /// libtorrent moving `file` from `seeders` seeders to one leecher: MiB/s over the time from the
    /// leecher wanting the file (its seeders connected) until it is complete, flushed and fsync'd.
    static func libtorrent(file: String, seeders: Int) throws -> Double {
        try rate("libtorrent-swarm.py", [file, "--seeders", "\(seeders)"])
    }

    /// One TCP stream moving `file` from this bench's child to another over loopback: MiB/s over the
    /// time from the connect until the receiver's file is written and fsync'd.
    static func tcpStream(file: String) throws -> Double {
        try rate("tcp-stream.py", [file])
    }

    /// One sample of `body`, or none (the failure printed): a peer that fails leaves its row out
    /// instead of ending the scenario.
    static func sample(_ name: String, _ body: () throws -> Double) -> [Double] {
        do {
            return [try body()]
        } catch {
            print("  \(name): run left out: \(error)")
            return []
        }
    }

    private static func rate(_ name: String, _ arguments: [String]) throws -> Double {
        guard let python, let script = script(name) else { throw Failure(description: "no python3 or \(name)") }
        let root = NodeProcess.makeTemporaryDirectory("bench-peer")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let result = try ChildProcess.run(python, [script] + arguments + ["--root", root], timeout: .seconds(600))
        guard result.status == 0,
            let line = result.stdout.split(separator: "\n").last(where: { $0.hasPrefix("seconds=") }).map(String.init),
            let seconds = TransferScenario.field("seconds", in: line),
            let bytes = TransferScenario.field("bytes", in: line), seconds > 0
        else {
            let said = (result.stderr.split(separator: "\n").suffix(3) + result.stdout.split(separator: "\n").suffix(1))
                .joined(separator: " | ")
            throw Failure(description: "\(name) exited with status \(result.status): \(said)")
        }
        let rate = bytes / 1_048_576 / seconds
        print("  \(name): \(line) (\(BenchReport.format(rate)) MiB/s)")
        return rate
    }
}
