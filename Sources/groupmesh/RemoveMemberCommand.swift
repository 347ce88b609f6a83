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

            A member that let others in (the BY column of groupmesh status) is not removed alone: \
            say --with-introduced to remove them with it (everyone it let in, directly or through \
            those it let in; more than 3 go in key rotations a few seconds apart), --keep-introduced \
            to keep them all (a lost laptop), or --keep NAME,… for those who stay; each one kept asks another member, this node first, \
            to introduce it again.
            """
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The member: its id, a unique prefix of it, or its name (see groupmesh status).")
    var member: String

    @Flag(
        help:
            "Remove the members it introduced too (but those of --keep), in the same key rotation (more than 3: in rotations one after another)."
    )
    var withIntroduced = false

    @Flag(help: "Keep every member it introduced (they are introduced again).")
    var keepIntroduced = false

    @Option(
        name: .customLong("keep"),
        help: ArgumentHelp(
            "Members it introduced that stay (ids, prefixes or names, comma-separated or repeated; a name with commas is taken whole).",
            valueName: "names"))
    var keep: [String] = []

    @OptionGroup var output: JSONOutputOptions

    struct Removal: Encodable {
        var member: String
        var session: String
        var handedTo: Int
        var introduced: [String]
    }

    func validate() throws {
        guard !(withIntroduced && keepIntroduced) else {
            throw ValidationError("--with-introduced and --keep-introduced say opposite things: give one")
        }
    }

    func run() async throws {
        let response: ControlResponse
        do {
            // Split by the node, which knows whether a value with commas is one member's name.
            var client = ControlClient(directory: data.directory)
            // A removal of many goes in rotations a few seconds apart, answered after the last.
            client.timeout = .seconds(120)
            response = try client.send(
                .removeMember(member, withIntroduced: withIntroduced, keep: keep, keepIntroduced: keepIntroduced))
        } catch {
            throw fail(error)
        }
        guard case let .memberRemoved(id, session, delivered, introduced) = response else {
            throw unexpectedAnswer("no removal")
        }
        let with =
            introduced.isEmpty
            ? ""
            : " and the \(introduced.count) it introduced (\(introduced.map { String($0.prefix(12)) }.joined(separator: ", ")))"
        output.emit(
            "removed \(id.prefix(12))\(with): session \(session) handed to \(delivered) live member(s); "
                + "old invites no longer work",
            json: Removal(member: id, session: session, handedTo: delivered, introduced: introduced))
    }
}
