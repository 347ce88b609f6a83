import ArgumentParser
import Foundation
import GroupMesh
import Logging
import ServiceLifecycle

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Start a node: create or join a session and stay in it until SIGINT/SIGTERM."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Option(help: ArgumentHelp("UDP address to listen on; port 0 picks a free port.", valueName: "HOST:PORT"),
            transform: ListenAddress.init(parsing:))
    var listen = ListenAddress(host: "0.0.0.0", port: 7946)

    @Option(help: ArgumentHelp("Address others should use to reach this node (repeatable).", valueName: "HOST:PORT"),
            transform: { text throws(GroupMeshError) in try MeshAddress(text) })
    var advertise: [MeshAddress] = []

    @Option(help: ArgumentHelp("Join the session of this invite token. It is the session's secret, and every local "
                               + "user sees a command line (ps): prefer --invite-file or $GROUPMESH_INVITE.", valueName: "TOKEN"),
            transform: { text throws(GroupMeshError) in try Invite(text) })
    var invite: Invite?

    @Option(help: ArgumentHelp("Read the invite token from this file ('-': standard input).", valueName: "PATH"))
    var inviteFile: String?

    @Option(help: ArgumentHelp("Also contact this member address when joining (repeatable).", valueName: "HOST:PORT"),
            transform: { text throws(GroupMeshError) in try MeshAddress(text) })
    var join: [MeshAddress] = []

    @Option(help: "A human-readable name for this node.")
    var name: String?

    @Flag(help: "Fetch an attachment only when asked for it (default: replicate everything).")
    var lazy = false

    @Flag(help: "Never carry sealed datagrams between two other members (default: relay for members that cannot meet).")
    var noRelay = false

    @Option(help: "Timing defaults: lan (default), local or wan.")
    var profile: NodeConfiguration.Profile = .lan

    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error, critical.", valueName: "LEVEL"))
    var logLevel: Logger.Level = .warning

    @Option(help: ArgumentHelp("Run COMMAND (through /bin/sh) for each event, or only for these types (repeatable); "
                               + "the event is in GROUPMESH_* variables and as JSON on standard input.",
                               valueName: "[TYPE[,TYPE]=]COMMAND"),
            transform: { text throws(GroupMeshError) in try EventHandlerSpec(parsing: text) })
    var eventHandler: [EventHandlerSpec] = []

    @Option(help: ArgumentHelp("Kill an event handler (and what it started) after this many seconds.", valueName: "SECONDS"))
    var eventHandlerTimeout: Double = 30

    @Option(help: ArgumentHelp("Serve Prometheus metrics at http://HOST:PORT/metrics (off by default; "
                               + "bind it to loopback, e.g. 127.0.0.1:9464; port 0 picks a free one).",
                               valueName: "HOST:PORT"),
            transform: ListenAddress.init(parsing:))
    var metrics: ListenAddress?

    @Option(help: ArgumentHelp("Drop this share of received datagrams (0 to 0.5), to test under loss.",
                               visibility: .hidden))
    var simulateLoss: Double = 0

    func validate() throws {
        if invite != nil, inviteFile != nil { throw ValidationError("give the invite once: --invite or --invite-file, not both") }
        guard (0...0.5).contains(simulateLoss) else { throw ValidationError("--simulate-loss must be between 0 and 0.5") }
        // Others print our name; one that would need escaping there is refused here.
        guard eventHandlerTimeout >= 0.1, eventHandlerTimeout <= 3600 else {
            throw ValidationError("--event-handler-timeout must be 0.1 to 3600 seconds")
        }
        if let name, name.unicodeScalars.contains(where: TerminalText.needsEscape) {
            throw ValidationError("--name may not hold control characters (newlines, escapes, direction overrides)")
        }
    }

    func run() async throws {
        bootstrapLogging(level: logLevel)
        let logger = Logger(label: "groupmesh")
        var exporter: MetricsExporter?
        do {
            let invite = try resolvedInvite()
            // Before the node: its first figures go to the exporter's registry.
            if let metrics { exporter = try await MetricsExporter.start(metrics) }
            let session = try await MeshSession.join(makeConfiguration(invite: invite), logger: logger)
            // Announced once SIGINT/SIGTERM are trapped: a script may stop the node the moment it reads them.
            let service = MeshNodeService(session: session) { [exporter] in
                let invite = await session.invite()
                emit("listening: \(session.localAddress)")
                emit("invite: \(invite.text)")
                if let exporter { emit("metrics: http://\(exporter.boundAddress)/metrics") }
            }
            // `groupmesh leave` ends the node's service by itself: that is a normal end, not a failure.
            let group = ServiceGroup(configuration: ServiceGroupConfiguration(
                services: [.init(service: service, successTerminationBehavior: .gracefullyShutdownGroup)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            ))
            try await group.run()
            await session.leave()
            await exporter?.stop()
            if let reason = await session.stopReason { throw reason }
            switch await session.state {
            case let .invalidated(.ended(by)):
                emit("ended: the session was ended by \(TerminalText.escaped(by))")
            case let .invalidated(.removed(by)):
                throw GroupMeshError.removedFromSession(by: by)
            default:
                break
            }
        } catch let error as GroupMeshError {
            await exporter?.stop()
            throw fail(error)
        }
    }

    /// `--invite`, else `--invite-file`, else `$GROUPMESH_INVITE` (then removed from the
    /// environment, so nothing the node starts inherits the secret).
    private func resolvedInvite() throws(GroupMeshError) -> Invite? {
        if let invite { return invite }
        if let inviteFile { return try Invite(file: inviteFile) }
        guard let text = ProcessInfo.processInfo.environment[InviteSource.environmentVariable] else { return nil }
        unsetenv(InviteSource.environmentVariable)
        do { return try Invite(text.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            throw .invalidInvite("$\(InviteSource.environmentVariable): \(error)")
        }
    }

    private func makeConfiguration(invite: Invite?) -> NodeConfiguration {
        var configuration = NodeConfiguration(dataDirectory: data.directory)
        configuration.listenHost = listen.host
        configuration.listenPort = listen.port
        configuration.advertise = advertise
        configuration.join = join
        configuration.invite = invite
        configuration.name = name
        configuration.lazy = lazy
        configuration.relays = !noRelay
        configuration.profile = profile
        configuration.simulatedLoss = simulateLoss
        configuration.announce = { emit($0) }
        configuration.eventHandlers = eventHandler
        configuration.eventHandlerTimeout = .milliseconds(Int64(eventHandlerTimeout * 1000))
        return configuration
    }
}

/// Where an invite comes from when it is kept off the command line.
enum InviteSource {
    static let environmentVariable = "GROUPMESH_INVITE"
}

/// `--listen`: a numeric host to bind and a port, 0 for any free one.
struct ListenAddress: CustomStringConvertible {
    var host: String
    var port: Int

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    init(parsing text: String) throws(GroupMeshError) {
        // A port of 0 is allowed here (pick a free one), so the address is checked with port 1.
        guard let (host, port) = MeshAddress.split(text), (try? MeshAddress(MeshAddress.join(host, 1))) != nil else {
            throw .invalidAddress(text)
        }
        self.init(host: host, port: Int(port))
    }

    var description: String { MeshAddress.join(host, port) }
}

extension NodeConfiguration.Profile: ExpressibleByArgument {}
extension Logger.Level: @retroactive ExpressibleByArgument {}
