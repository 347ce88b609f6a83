import ArgumentParser
import Foundation
import GroupMesh
import Logging

@main
struct GroupMeshCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "groupmesh",
        abstract: "A peer-to-peer group-session mesh: membership, messages and attachments over encrypted UDP.",
        subcommands: [RunCommand.self, StatusCommand.self, InviteCommand.self, LeaveCommand.self, EndCommand.self, PingCommand.self, EventsCommand.self,
                      SendCommand.self, ListenCommand.self, AttachCommand.self, AttachmentsCommand.self,
                      GetCommand.self, RemoveCommand.self, RemoveMemberCommand.self]
    )

    /// As ArgumentParser's own, but a command line that does not parse (an unknown option, a bad
    /// address, a log level that does not exist) ends in one line, as every user error does, with
    /// where to read the usage; `--help` prints in full.
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let command: any ParsableCommand
        do {
            command = try parseAsRoot(arguments)
        } catch {
            guard exitCode(for: error) != .success else { exit(withError: error) }
            // One line: ArgumentParser lists a value's choices one per line.
            let message = message(for: error).split(whereSeparator: \.isNewline)
                .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
            var names: [String] = []
            for subcommand in configuration.subcommands { names.append(subcommand.configuration.commandName ?? "") }
            let help = arguments.first.flatMap { names.contains($0) ? "groupmesh \($0) --help" : nil } ?? "groupmesh --help"
            FileHandle.standardError.write(Data("groupmesh: error: \(message) (see \(help))\n".utf8))
            Foundation.exit(exitCode(for: error).rawValue)
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
}

/// `--data-dir`, shared by every subcommand.
struct DataDirectoryOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The node's data directory (default: $GROUPMESH_DIR, else ./.groupmesh).", valueName: "DIR"))
    var dataDir: String?

    var directory: DataDirectory {
        if let dataDir, !dataDir.isEmpty { return DataDirectory(path: dataDir) }
        if let env = ProcessInfo.processInfo.environment["GROUPMESH_DIR"], !env.isEmpty { return DataDirectory(path: env) }
        return DataDirectory(path: "./.groupmesh")
    }
}

/// Prints one readable line to stderr and exits non-zero: how every user error ends. Escaped:
/// an error may name a member, and a member's name is its own choice.
func fail(_ message: some CustomStringConvertible) -> ExitCode {
    FileHandle.standardError.write(Data("groupmesh: error: \(TerminalText.escaped(message.description))\n".utf8))
    return ExitCode(1)
}

/// Writes a line to stdout at once: scripts and tests read `listening:` while the node runs.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func bootstrapLogging(level: Logger.Level) {
    GroupMeshLogging.bootstrapStandardError(level: level)
}
