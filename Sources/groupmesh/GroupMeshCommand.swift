import ArgumentParser
import Foundation
import GroupMesh
import Logging

@main
struct GroupMeshCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "groupmesh",
        abstract: "A peer-to-peer group-session mesh: membership, messages and attachments over encrypted UDP.",
        subcommands: [RunCommand.self, StatusCommand.self, InviteCommand.self, LeaveCommand.self,
                      SendCommand.self, ListenCommand.self, AttachCommand.self, AttachmentsCommand.self,
                      GetCommand.self, RemoveCommand.self, RemoveMemberCommand.self]
    )
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

/// Prints one readable line to stderr and exits non-zero: how every user error ends.
func fail(_ message: some CustomStringConvertible) -> ExitCode {
    FileHandle.standardError.write(Data("groupmesh: error: \(message)\n".utf8))
    return ExitCode(1)
}

/// Writes a line to stdout at once: scripts and tests read `listening:` while the node runs.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func bootstrapLogging(level: Logger.Level) {
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}
