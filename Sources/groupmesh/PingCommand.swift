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
        var times: [Double] = []
        for round in 0..<count {
            if round > 0 { try await Task.sleep(for: .milliseconds(Int(interval * 1000))) }
            let response: ControlResponse
            do { response = try client.send(.ping(member)) } catch { throw fail(error) }
            guard case let .pong(pong) = response else { throw unexpectedAnswer("no round trip") }
            let who = TerminalText.escaped(
                pong.name.isEmpty ? String(pong.member.prefix(12)) : "\(pong.name) (\(pong.member.prefix(12)))")
            if let rtt = pong.rttMs { times.append(rtt) }
            output.emit(
                pong.rttMs.map { "pong from \(who) via \(pong.address) in \(String(format: "%.3f", $0)) ms" }
                    ?? "no answer from \(who) via \(pong.address) within 2 s", json: pong)
        }
        let average = times.isEmpty ? nil : times.reduce(0, +) / Double(times.count)
        var text = "\(count) sent, \(times.count) answered"
        if let minimum = times.min(), let maximum = times.max(), let average {
            text += String(format: ", rtt min/avg/max %.3f/%.3f/%.3f ms", minimum, average, maximum)
        }
        output.emit(
            text,
            json: Summary(sent: count, answered: times.count, minMs: times.min(), avgMs: average, maxMs: times.max()))
        if times.isEmpty { throw ExitCode(FailureKind.unavailable.exitStatus) }
    }
}
