import ArgumentParser
import Foundation
import GroupMesh
import Logging

@main
struct GroupMeshCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "groupmesh",
        abstract: "A peer-to-peer group-session mesh: membership, messages and attachments over encrypted UDP.",
        discussion: """
            Exit status: 0 success, 1 other failures, 64 usage (a command line that does not parse, an \
            address that is not HOST:PORT), 65 bad input (invite, attachment, member, a file over the \
            limit), 69 unavailable \
            (no node running, no member holding the data, the node stopped), 130 interrupted.
            """,
        version: "groupmesh " + GroupMeshVersion.line,
        subcommands: [
            RunCommand.self, StatusCommand.self, InviteCommand.self, LeaveCommand.self, EndCommand.self,
            PingCommand.self, EventsCommand.self,
            SendCommand.self, ListenCommand.self, AttachCommand.self, AttachmentsCommand.self,
            GetCommand.self, RemoveCommand.self, RemoveMemberCommand.self,
        ]
    )

    /// As ArgumentParser's own, but a command line that does not parse (an unknown option, a bad
    /// address, a log level that does not exist) ends in one line, as every user error does, with
    /// where to read the usage; `--help` prints in full.
    static func main() async {
        let arguments = PingCommand.separatingValues(Array(CommandLine.arguments.dropFirst()))
        var names: [String] = []
        for subcommand in configuration.subcommands { names.append(subcommand.configuration.commandName ?? "") }
        // `help NOSUCH` parses (ArgumentParser prints the overview and exits 0): a script that
        // mistyped a command must fail.
        if arguments.first == "help", let mistake = CommandLineMistake(arguments, commands: names, parses: parses) {
            usageError(mistake.message, help: mistake.help)
        }
        let command: any ParsableCommand
        do {
            command = try parseAsRoot(arguments)
        } catch {
            guard exitCode(for: error) != .success else { exit(withError: error) }
            if let mistake = CommandLineMistake(arguments, commands: names, parses: parses) {
                usageError(mistake.message, help: mistake.help)
            }
            // One line: ArgumentParser lists a value's choices one per line.
            let message = message(for: error).split(whereSeparator: \.isNewline)
                .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
            let help = arguments.first.flatMap { names.contains($0) ? "groupmesh \($0) --help" : nil }
            usageError(message, help: help ?? "groupmesh --help", status: exitCode(for: error))
        }
        do {
            if var asynchronous = command as? any AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                var synchronous = command
                try synchronous.run()
            }
        } catch {
            exit(withError: error)
        }
    }

    /// Whether a command line parses (validation included; nothing runs).
    static func parses(_ arguments: [String]) -> Bool { (try? parseAsRoot(arguments)) != nil }
}

/// One line on stderr, and the usage status (64) unless the parser gave another.
private func usageError(_ message: String, help: String, status: ExitCode = .validationFailure) -> Never {
    FileHandle.standardError.write(Data("groupmesh: error: \(message) (see \(help))\n".utf8))
    exit(status.rawValue)
}

/// Clearer words than ArgumentParser's for the command-line mistakes of a first hour: a command
/// that does not exist (`groupmesh stauts`, `groupmesh help stauts`), and options before the
/// command (`groupmesh --data-dir D status`: each command takes its own, after its name).
struct CommandLineMistake: Equatable {
    var message: String
    /// Where the usage is: the command's own help once the command is known.
    var help = "groupmesh --help"

    /// Nil when `arguments` hold none of these mistakes. `parses` tells which of the words that
    /// name a command is the command: `groupmesh --name status run` is `run`'s line.
    init?(_ arguments: [String], commands: [String], parses: ([String]) -> Bool) {
        guard let first = arguments.first, first != "--" else { return nil }
        let list = "the commands are " + commands.joined(separator: ", ")
        if first == "help" {
            let named = arguments.dropFirst().first
            guard let named, !commands.contains(named), named != "help", !named.hasPrefix("-") else { return nil }
            message = "no command '\(TerminalText.escaped(named))'; \(list)"
            return
        }
        guard first.hasPrefix("-") else {
            guard !commands.contains(first) else { return nil }
            message = "no command '\(TerminalText.escaped(first))'; \(list)"
            return
        }
        // After `--` every word is an argument, not a command.
        let options = arguments.prefix { $0 != "--" }
        let candidates = options.indices.filter { commands.contains(options[$0]) }
        let moved = candidates.map { [arguments[$0]] + arguments[..<$0] + arguments[($0 + 1)...] }
        // Help asked after options (`groupmesh --data-dir D help status`), when no reordering
        // parses (`--name help run` is `run`'s line): help takes none.
        if !moved.contains(where: parses), let asked = options.firstIndex(of: "help") {
            let named = options[(asked + 1)...].first(where: commands.contains)
            message = "options follow the command, and help takes none: groupmesh help" + (named.map { " " + $0 } ?? "")
            if let named { help = "groupmesh \(named) --help" }
            return
        }
        guard let line = moved.first(where: parses) ?? moved.first else { return nil }
        message = "options follow the command: groupmesh " + line.map(Self.shown).joined(separator: " ")
        help = "groupmesh \(line[0]) --help"
    }

    /// As a shell reads it back (`RunCommand.shellQuoted`), control characters made visible.
    static func shown(_ argument: String) -> String {
        TerminalText.escaped(RunCommand.shellQuoted(argument))
    }
}

/// `--data-dir`, shared by every subcommand.
struct DataDirectoryOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp("The node's data directory (default: $GROUPMESH_DIR, else ./.groupmesh).", valueName: "DIR"))
    var dataDir: String?

    var directory: DataDirectory {
        if let dataDir, !dataDir.isEmpty { return DataDirectory(path: dataDir) }
        if let env = ProcessInfo.processInfo.environment["GROUPMESH_DIR"], !env.isEmpty {
            return DataDirectory(path: env)
        }
        return DataDirectory(path: "./.groupmesh")
    }
}

/// `--json`, on every command that prints a result: one JSON object on stdout instead of text.
struct JSONOutputOptions: ParsableArguments {
    @Flag(help: "Print the result as one JSON object (sorted keys, one line).")
    var json = false

    /// The result as text, or as JSON when `--json` was given.
    func emit(_ text: @autoclosure () -> String, json object: some Encodable) {
        guard json else { return groupmesh.emit(text()) }
        emitJSON(object)
    }
}

/// One JSON object on a line of its own.
func emitJSON(_ object: some Encodable) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard let data = try? encoder.encode(object) else { return }
    emit(String(decoding: data, as: UTF8.self))
}

/// Prints one readable line to stderr and exits with the status its kind has (Docs/CLI.md §Exit
/// status): how every user error ends. Escaped: an error may name a member, and a member's name
/// is its own choice.
func fail(_ message: some CustomStringConvertible, kind: FailureKind = .other) -> ExitCode {
    FileHandle.standardError.write(Data("groupmesh: error: \(TerminalText.escaped(message.description))\n".utf8))
    return ExitCode(kind.exitStatus)
}

func fail(_ error: GroupMeshError) -> ExitCode { fail(error.description, kind: error.kind) }

/// A node that answered something this command did not ask for: another version of groupmesh.
func unexpectedAnswer(_ what: String) -> ExitCode {
    fail("the node sent \(what); is it another version of groupmesh? (groupmesh --version)")
}

/// The status of a command ended by SIGINT or SIGTERM, as a shell reports one killed by SIGINT.
let interruptedStatus: Int32 = 130

/// Writes a line to stdout at once: scripts and tests read `listening:` while the node runs.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func bootstrapLogging(level: Logger.Level) {
    GroupMeshLogging.bootstrapStandardError(level: level)
}
