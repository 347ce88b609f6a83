import ArgumentParser
import Foundation
import GroupMesh

struct PingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ping",
        abstract: "Round trips to a member over the path in use, sealed as all its traffic.",
        discussion: "Prints one line per answer (like ping(8)), then a summary; exits 69 when none came back."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The member: its name, id, or a unique prefix of its id.")
    var member: String

    // Unconditional: `-c -1` is a count to refuse, not an unknown option.
    @Option(name: .shortAndLong, parsing: .unconditional, help: "How many round trips (1–1000), as ping -c.")
    var count = 4

    @Option(name: .shortAndLong, parsing: .unconditional, help: "Seconds between them (0.01–60), as ping -i.")
    var interval = 1.0

    @OptionGroup var output: JSONOutputOptions

    struct Summary: Encodable {
        var sent: Int; var answered: Int; var minMs: Double?; var avgMs: Double?; var maxMs: Double?
    }

    func validate() throws {
        guard (1...1000).contains(count) else { throw ValidationError("--count must be 1 to 1000") }
        guard interval >= 0.01, interval <= 60 else { throw ValidationError("--interval must be 0.01 to 60 seconds") }
    }

    func run() async throws {
        let client = ControlClient(directory: data.directory)
        let tally = Tally()
        // Ctrl-C ends it as ping(8)'s does: with the summary of what was sent so far.
        let interruption = Interruption.install { [output] in
            let (sent, times) = tally.snapshot
            Self.summarize(sent: sent, times: times, output: output)
            return interruptedStatus
        }
        for round in 0..<count {
            if round > 0 { try await Task.sleep(for: .milliseconds(Int(interval * 1000))) }
            let response: ControlResponse
            do { response = try client.send(.ping(member)) } catch { throw fail(error) }
            guard case let .pong(pong) = response else { throw unexpectedAnswer("no round trip") }
            let who = TerminalText.escaped(
                pong.name.isEmpty ? String(pong.member.prefix(12)) : "\(pong.name) (\(pong.member.prefix(12)))")
            tally.add(pong.rttMs)
            output.emit(
                pong.rttMs.map { "pong from \(who) via \(pong.address) in \(String(format: "%.3f", $0)) ms" }
                    ?? "no answer from \(who) via \(pong.address) within 2 s", json: pong)
        }
        interruption.disarm()
        let (sent, times) = tally.snapshot
        Self.summarize(sent: sent, times: times, output: output)
        if times.isEmpty { throw ExitCode(FailureKind.unavailable.exitStatus) }
    }

    /// `ping bob -c3 -i0.2` as ping(8) takes it: `-c 3 -i 0.2` (ArgumentParser wants a short
    /// option's value apart). Only `ping`'s own, before a `--`.
    static func separatingValues(_ arguments: [String]) -> [String] {
        guard arguments.first == "ping" else { return arguments }
        var out: [String] = []
        var options = true
        for argument in arguments {
            if argument == "--" { options = false }
            if options, argument.count > 2, argument.hasPrefix("-c") || argument.hasPrefix("-i") {
                out += [String(argument.prefix(2)), String(argument.dropFirst(2))]
            } else {
                out.append(argument)
            }
        }
        return out
    }

    static func summarize(sent: Int, times: [Double], output: JSONOutputOptions) {
        // To the microsecond, as the text line: a sum's float noise is no measurement.
        let average = times.isEmpty ? nil : (times.reduce(0, +) / Double(times.count) * 1000).rounded() / 1000
        var text = "\(sent) sent, \(times.count) answered"
        if let minimum = times.min(), let maximum = times.max(), let average {
            text += String(format: ", rtt min/avg/max %.3f/%.3f/%.3f ms", minimum, average, maximum)
        }
        output.emit(
            text,
            json: Summary(sent: sent, answered: times.count, minMs: times.min(), avgMs: average, maxMs: times.max()))
    }

    /// The round trips so far, shared with the interruption handler.
    final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var sent = 0
        private var times: [Double] = []

        func add(_ rtt: Double?) {
            lock.withLock {
                sent += 1
                if let rtt { times.append(rtt) }
            }
        }

        var snapshot: (sent: Int, times: [Double]) { lock.withLock { (sent, times) } }
    }
}
