import ArgumentParser
import GroupMesh

struct RemoveMemberCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove-member",
        abstract: "Remove a member from the session: the others move to a new key it never sees.",
        discussion: """
            Works on any member. The session gets a new secret (a new key epoch), sealed to each \
            remaining member; the removed member can no longer read or send anything, and invites \
            made before the removal stop working. Members offline now catch up through any member \
            when they come back. Share a new invite (groupmesh invite) with anyone still to join.
            """
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The member: its id, a unique prefix of it, or its name (see groupmesh status).")
    var member: String

    @OptionGroup var output: JSONOutputOptions

    struct Removal: Encodable { var member: String; var session: String; var handedTo: Int }

    func run() async throws {
        let response: ControlResponse
        do {
            response = try ControlClient(directory: data.directory).send(.removeMember(member))
        } catch {
            throw fail(error)
        }
        guard case let .memberRemoved(id, session, delivered) = response else { throw unexpectedAnswer("no removal") }
        output.emit(
            "removed \(id.prefix(12)): session \(session) handed to \(delivered) live member(s); "
                + "old invites no longer work", json: Removal(member: id, session: session, handedTo: delivered))
    }
}
