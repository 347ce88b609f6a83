import Foundation
import MeshTestKit
import Testing

/// What `make install` puts beside the binary comes from the argument parser: completions for
/// three shells and the description the man page is made from. Both must name every command.
@Suite("completions and manual")
struct InstallTests {
    static let commands = [
        "run", "status", "invite", "leave", "end", "ping", "events", "send", "listen", "attach",
        "attachments", "get", "remove", "remove-member",
    ]

    @Test("bash, zsh and fish completions name every subcommand", arguments: ["bash", "zsh", "fish"])
    func completions(shell: String) async throws {
        let result = try await NodeProcess.runCommand(["--generate-completion-script", shell])
        #expect(result.status == 0, "\(result.stderr)")
        let missing = Self.commands.filter { !result.stdout.contains($0) }
        #expect(missing.isEmpty, "\(shell) completions lack \(missing)")
        #expect(result.stdout.contains("event-handler"), "run's options are completed too")
    }

    @Test("the help the man page is generated from lists every subcommand with its abstract")
    func manualSource() async throws {
        let result = try await NodeProcess.runCommand(["--experimental-dump-help"])
        #expect(result.status == 0, "\(result.stderr)")
        struct Info: Decodable {
            struct Command: Decodable { var commandName: String; var abstract: String?; var subcommands: [Command]? }
            var command: Command
        }
        let info = try JSONDecoder().decode(Info.self, from: Data(result.stdout.utf8))
        let names = (info.command.subcommands ?? []).map(\.commandName)
        #expect(Set(Self.commands).isSubset(of: Set(names)), "\(names)")
        #expect((info.command.subcommands ?? []).allSatisfy { !($0.abstract ?? "").isEmpty })
    }
}
