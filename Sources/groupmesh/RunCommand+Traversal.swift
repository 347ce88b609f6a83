import Foundation
import GroupMesh

extension RunCommand {
    /// Where `--turn` comes from when it is not on the command line or in the config file.
    static let turnEnvironmentVariable = "GROUPMESH_TURN"

    /// The STUN servers and the TURN server, parsed and resolved once, at start (a name that
    /// does not resolve is one error line and the node does not start).
    func traversalServers(_ settings: Settings) throws(GroupMeshError) -> ([TraversalServer], TurnServerConfiguration?)
    {
        let ipv6 = settings.listen.host.contains(":")
        var stunServers: [TraversalServer] = []
        for text in settings.stun.prefix(8) {
            stunServers.append(try TraversalServer.resolve(text, ipv6: ipv6, what: "--stun"))
        }
        var turnText = settings.turn
        // Removed even when the option or the file wins: event handlers must not inherit it.
        if let text = ProcessInfo.processInfo.environment[Self.turnEnvironmentVariable] {
            InviteSource.scrubEnvironment(variable: Self.turnEnvironmentVariable)
            if turnText == nil { turnText = text.trimmingCharacters(in: .whitespacesAndNewlines) }
        }
        Self.scrubTurnPasswordFromArguments()
        guard let turnText else { return (stunServers, nil) }
        let url = try TurnServerURL(parsing: turnText)
        let server = try TraversalServer.resolve(url.server, ipv6: ipv6, what: "--turn")
        return (stunServers, TurnServerConfiguration(server: server, username: url.username, password: url.password))
    }

    /// Overwrites the password of a `--turn turn:USER:PASS@HOST:PORT` in the process's own
    /// argument memory, which is what `ps` and `/proc/PID/cmdline` show: the secret is visible
    /// only until the node has read it.
    static func scrubTurnPasswordFromArguments() {
        let arguments = CommandLine.unsafeArgv
        for index in 1..<Int(CommandLine.argc) {
            guard let argument = arguments[index] else { continue }
            let length = strlen(argument)
            let bytes = UnsafeMutableBufferPointer(
                start: UnsafeMutableRawPointer(argument).assumingMemoryBound(to: UInt8.self),
                count: length)
            let text = Array(bytes)
            let prefix = Array("turn:".utf8)
            guard
                let start = (0...max(0, text.count - prefix.count)).first(where: { text[$0...].starts(with: prefix) }),
                text.count >= prefix.count
            else { continue }
            let afterScheme = start + prefix.count
            guard let colon = text[afterScheme...].firstIndex(of: UInt8(ascii: ":")),
                let at = text.lastIndex(of: UInt8(ascii: "@")), at > colon + 1
            else { continue }
            for position in (colon + 1)..<at { bytes[position] = UInt8(ascii: "x") }
        }
    }
}
