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

    @Option(
        help: ArgumentHelp(
            "Read run's settings from this JSON file (default: DATA_DIR/config.json when it exists); "
                + "an option given here wins over the file.", valueName: "PATH"))
    var config: String?

    @Option(
        help: ArgumentHelp(
            "UDP address to listen on (default 0.0.0.0:7946); port 0 picks a free port.", valueName: "HOST:PORT"),
        transform: ListenAddress.init(parsing:))
    var listen: ListenAddress?

    @Option(
        help: ArgumentHelp("Address others should use to reach this node (repeatable).", valueName: "HOST:PORT"),
        transform: { text throws(GroupMeshError) in try MeshAddress(text) })
    var advertise: [MeshAddress] = []

    @Option(
        help: ArgumentHelp(
            "Join the session of this invite token. It is the session's secret, and every local "
                + "user sees a command line (ps): prefer --invite-file or $GROUPMESH_INVITE.", valueName: "TOKEN"))
    // Parsed in `run`, not by the argument parser: its error would quote the token, a secret, and
    // a bad invite is bad input (65), not a command line that does not parse (64).
    var invite: String?

    @Option(help: ArgumentHelp("Read the invite token from this file ('-': standard input).", valueName: "PATH"))
    var inviteFile: String?

    @Flag(
        help: ArgumentHelp(
            "Print the invite even when standard output is not a terminal (by default it is printed "
                + "only to a terminal: it holds the session's secret, and a service's output goes to the system log)."))
    var printInvite = false

    @Option(
        help: ArgumentHelp("Also contact this member address when joining (repeatable).", valueName: "HOST:PORT"),
        transform: { text throws(GroupMeshError) in try MeshAddress(text) })
    var join: [MeshAddress] = []

    @Option(
        help: ArgumentHelp(
            "Ask this STUN server where our datagrams come from, when members cannot tell (repeatable; "
                + "port 3478 if none is given).", valueName: "HOST:PORT"))
    var stun: [String] = []

    @Option(
        help: ArgumentHelp(
            "Hold an allocation on this TURN server, to be reached through it when nothing else works. "
                + "Every local user sees a command line (ps): prefer the config file's \"turn\" or $GROUPMESH_TURN.",
            valueName: "turn:USER:PASS@HOST:PORT"))
    // Parsed in `run`: its errors must not quote the password.
    var turn: String?

    @Option(
        help:
            "A human-readable name for this node, kept in the data dir for later starts (default: the kept one, else node- and the first digits of the id)."
    )
    var name: String?

    // Optional, and with a --no- form: the config file may set it, and the command line must be able to undo that.
    @Flag(
        inversion: .prefixedNo,
        help: "Fetch an attachment only when asked for it (default: --no-lazy, replicate everything).")
    var lazy: Bool?

    @Flag(
        inversion: .prefixedNo,
        help: "Carry sealed datagrams between two members that cannot meet (default: --relay).")
    var relay: Bool?

    @Option(
        help: ArgumentHelp(
            "Carry at most this for others, all pairs together: 20MiB/s, 100Mbit, "
                + "or off (as --no-relay) (default: twice what this node's links were measured to carry, 8 MiB/s at least).",
            valueName: "RATE"),
        transform: { text throws(RelayBudgetError) in try RelayBudget(parsing: text) })
    var relayBudget: RelayBudget?

    @Flag(
        inversion: .prefixedNo,
        help: "Announce this node on its LAN and meet members found there directly (default: --lan-discovery).")
    var lanDiscovery: Bool?

    @Flag(
        inversion: .prefixedNo,
        help: "Ask the home router to map our UDP port with PCP, NAT-PMP or UPnP IGD (default: --port-mapping).")
    var portMapping: Bool?

    @Option(help: "Timing defaults: lan (default), local or wan.")
    var profile: NodeConfiguration.Profile?

    @Option(
        help: ArgumentHelp(
            "Log level: trace, debug, info, notice, warning (default), error, critical.", valueName: "LEVEL"))
    var logLevel: Logger.Level?

    @Option(
        help: ArgumentHelp(
            "Run COMMAND (through /bin/sh) for each event, or only for these types (repeatable); "
                + "the event is in GROUPMESH_* variables and as JSON on standard input.",
            valueName: "[TYPE[,TYPE]=]COMMAND"),
        transform: { text throws(GroupMeshError) in try EventHandlerSpec(parsing: text) })
    var eventHandler: [EventHandlerSpec] = []

    @Option(
        help: ArgumentHelp(
            "Kill an event handler (and what it started) after this many seconds (default 30).",
            valueName: "SECONDS"))
    var eventHandlerTimeout: Double?

    @Option(
        help: ArgumentHelp(
            "Serve Prometheus metrics at http://HOST:PORT/metrics (off by default; "
                + "bind it to loopback, e.g. 127.0.0.1:9464; port 0 picks a free one).",
            valueName: "HOST:PORT"),
        transform: ListenAddress.init(parsing:))
    var metrics: ListenAddress?

    @Option(
        help: ArgumentHelp(
            "Drop this share of received datagrams (0 to 0.5), to test under loss.",
            visibility: .hidden))
    var simulateLoss: Double = 0

    func validate() throws {
        if invite != nil, inviteFile != nil {
            throw ValidationError("give the invite once: --invite or --invite-file, not both")
        }
        guard (0...0.5).contains(simulateLoss) else {
            throw ValidationError("--simulate-loss must be between 0 and 0.5")
        }
        if let eventHandlerTimeout, let problem = Settings.eventHandlerTimeoutProblem(eventHandlerTimeout) {
            throw ValidationError("--event-handler-timeout \(problem)")
        }
        // Others print our name; one that would need escaping there is refused here.
        if let name, let problem = NodeConfiguration.nameProblem(name) { throw ValidationError("--name \(problem)") }
    }

    func run() async throws {
        let settings: Settings
        do { settings = try resolvedSettings() } catch { throw fail(error) }
        bootstrapLogging(level: settings.logLevel)
        let logger = Logger(label: "groupmesh")
        var exporter: MetricsExporter?
        do {
            let invite = try resolvedInvite()
            // Before the node: its first figures go to the exporter's registry.
            if let metrics = settings.metrics {
                exporter = try await MetricsExporter.start(metrics)
                // The page names the members and their addresses, to anyone who can connect.
                if !["127.0.0.1", "::1", "localhost"].contains(metrics.host), !metrics.host.hasPrefix("127.") {
                    FileHandle.standardError.write(
                        Data(
                            ("groupmesh: warning: --metrics \(metrics) serves the members' names and "
                                + "addresses to every host that can reach it, without authentication; bind 127.0.0.1 unless a "
                                + "firewall keeps others out\n").utf8))
                }
            }
            var configuration = makeConfiguration(settings, invite: invite)
            (configuration.stunServers, configuration.turnServer) = try traversalServers(settings)
            let session = try await MeshSession.join(configuration, logger: logger)
            let inviteLine = invitePrinting
            // Announced once SIGINT/SIGTERM are trapped: a script may stop the node the moment it reads them.
            let service = MeshNodeService(session: session) { [exporter] in
                emit("listening: \(session.localAddress)")
                switch inviteLine {
                case .token:
                    // The invite should hold the gateway's mapping: its first attempt ends first (bounded).
                    await session.waitForPortMapping()
                    let invite = await session.invite()
                    emit("invite: \(invite.text)")
                case let .hint(line): emit(line)
                }
                if let exporter { emit("metrics: http://\(exporter.boundAddress)/metrics") }
                announcements.open()
            }
            // `groupmesh leave` ends the node's service by itself: that is a normal end, not a failure.
            let group = ServiceGroup(
                configuration: ServiceGroupConfiguration(
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

    /// What `run` prints in place of the invite.
    enum InviteLine: Sendable {
        case token
        case hint(String)
    }

    /// The invite holds the session's secret: printed to a terminal (or when asked), never to a
    /// pipe or file by default, since a service manager keeps a service's output in the system log.
    var invitePrinting: InviteLine {
        if printInvite || isatty(STDOUT_FILENO) == 1 { return .token }
        // Not `invite: gm1…`: nothing that reads the line may take it for a token.
        return .hint(
            "invite: not printed, as standard output is not a terminal; "
                + "print it with: groupmesh invite --data-dir \(Self.shellQuoted(absolutePath(data.directory.path)))")
    }

    /// The values in force: the command line's, else the config file's, else the defaults.
    struct Settings {
        var listen = ListenAddress(host: "0.0.0.0", port: 7946)
        var advertise: [MeshAddress] = []
        var join: [MeshAddress] = []
        var name: String?
        var lazy = false
        var relay = true
        var relayBudget: RelayBudget?
        var lanDiscovery = true
        var portMapping = true
        var profile: NodeConfiguration.Profile = .lan
        var logLevel: Logger.Level = .warning
        var metrics: ListenAddress?
        var eventHandler: [EventHandlerSpec] = []
        var eventHandlerTimeout: Double = 30
        var stun: [String] = []
        var turn: String?

        static func eventHandlerTimeoutProblem(_ seconds: Double) -> String? {
            seconds >= 0.1 && seconds <= 3600 ? nil : "must be 0.1 to 3600 seconds"
        }
    }

    /// The config file's path: `--config`, else `config.json` in the data dir.
    var configPath: String { config ?? data.directory.configurationPath }

    private func resolvedSettings() throws(RunConfigurationError) -> Settings {
        // Only a file named on the command line must exist: a data dir without one keeps the defaults.
        let file = try RunConfigurationFile.load(path: configPath, required: config != nil)
        var settings = Settings()
        // A list on the command line replaces the file's, as any other option does.
        settings.listen = listen ?? file.listen ?? settings.listen
        settings.advertise = !advertise.isEmpty ? advertise : file.advertise ?? []
        for address in settings.advertise {
            if let problem = address.advertisingProblem {
                throw RunConfigurationError("--advertise \(address) \(problem)")
            }
        }
        settings.join = !join.isEmpty ? join : file.join ?? []
        settings.name = name ?? file.name
        settings.lazy = lazy ?? file.lazy ?? settings.lazy
        settings.relay = relay ?? file.relay ?? settings.relay
        settings.relayBudget = relayBudget ?? file.relayBudget
        settings.lanDiscovery = lanDiscovery ?? file.lanDiscovery ?? settings.lanDiscovery
        settings.portMapping = portMapping ?? file.portMapping ?? settings.portMapping
        settings.profile = profile ?? file.profile ?? settings.profile
        settings.logLevel = logLevel ?? file.logLevel ?? settings.logLevel
        settings.metrics = metrics ?? file.metrics
        settings.eventHandler = !eventHandler.isEmpty ? eventHandler : file.eventHandler ?? []
        settings.eventHandlerTimeout = eventHandlerTimeout ?? file.eventHandlerTimeout ?? settings.eventHandlerTimeout
        settings.stun = !stun.isEmpty ? stun : file.stun ?? []
        settings.turn = turn ?? file.turn
        // The command line's values were checked in validate(); the file's are checked here.
        if name == nil, let fileName = file.name, let problem = NodeConfiguration.nameProblem(fileName) {
            throw RunConfigurationError("\"name\" in the config file \(configPath) \(problem)")
        }
        if eventHandlerTimeout == nil, let seconds = file.eventHandlerTimeout,
            let problem = Settings.eventHandlerTimeoutProblem(seconds)
        {
            throw RunConfigurationError("\"event-handler-timeout\" in the config file \(configPath) \(problem)")
        }
        return settings
    }

    /// `--invite`, else `--invite-file`, else the `groupmesh-invite` credential systemd hands a
    /// service (`LoadCredential=`), else `$GROUPMESH_INVITE`. The variable is removed from the
    /// environment whichever wins, so nothing the node starts inherits the secret.
    private func resolvedInvite() throws(GroupMeshError) -> Invite? {
        let environmentText = ProcessInfo.processInfo.environment[InviteSource.environmentVariable]
        if environmentText != nil { InviteSource.scrubEnvironment() }
        if let invite {
            do { return try Invite(invite) } catch { throw .invalidInvite("--invite: \(error)") }
        }
        if let inviteFile { return try Invite(file: inviteFile, requirePrivate: true) }
        if let credential = InviteSource.credentialPath() { return try Invite(file: credential, requirePrivate: true) }
        guard let text = environmentText else { return nil }
        do { return try Invite(text.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            throw .invalidInvite("$\(InviteSource.environmentVariable): \(error)")
        }
    }

    private func makeConfiguration(_ settings: Settings, invite: Invite?) -> NodeConfiguration {
        var configuration = NodeConfiguration(dataDirectory: data.directory)
        configuration.listenHost = settings.listen.host
        configuration.listenPort = settings.listen.port
        configuration.advertise = settings.advertise
        configuration.join = settings.join
        configuration.invite = invite
        configuration.name = settings.name
        configuration.lazy = settings.lazy
        // A budget of nothing is no relay: our record says so, and members pick another.
        configuration.relays = settings.relay && settings.relayBudget != .off
        if case let .bytesPerSecond(rate) = settings.relayBudget { configuration.relayBudget = rate }
        configuration.lanDiscovery = settings.lanDiscovery
        configuration.portMapping = settings.portMapping
        configuration.profile = settings.profile
        configuration.simulatedLoss = simulateLoss
        configuration.announce = { announcements.emit($0) }
        configuration.eventHandlers = settings.eventHandler
        configuration.eventHandlerTimeout = .milliseconds(Int64(settings.eventHandlerTimeout * 1000))
        return configuration
    }

    /// As a shell reads it back: bare when it holds nothing the shell treats specially.
    static func shellQuoted(_ text: String) -> String {
        let plain = CharacterSet(
            charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=")
        if !text.isEmpty, text.unicodeScalars.allSatisfy(plain.contains) { return text }
        return "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}

/// Where an invite comes from when it is kept off the command line.
enum InviteSource {
    static let environmentVariable = "GROUPMESH_INVITE"
    /// Removes the invite from the environment, and overwrites it where the kernel shows the
    /// process's initial environment (`/proc/PID/environ`, readable by the same user and root):
    /// `unsetenv` alone left the secret there for the node's whole life.
    static func scrubEnvironment() { scrubEnvironment(variable: environmentVariable) }

    /// The same for any variable that holds a secret (`GROUPMESH_TURN`).
    static func scrubEnvironment(variable environmentVariable: String) {
        let prefix = environmentVariable + "="
        var entry = environ
        while let pointer = entry.pointee {
            if strncmp(pointer, prefix, prefix.utf8.count) == 0 {
                let value = pointer + prefix.utf8.count
                memset(value, 0x78, strlen(value))  // 'x': the length shows, the token does not
            }
            entry += 1
        }
        unsetenv(environmentVariable)
    }

    /// The credential's name in a systemd unit: `LoadCredential=groupmesh-invite:/etc/groupmesh/invite`.
    static let credentialName = "groupmesh-invite"

    /// `$CREDENTIALS_DIRECTORY/groupmesh-invite` when systemd handed that credential over.
    static func credentialPath() -> String? {
        guard let directory = ProcessInfo.processInfo.environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty else {
            return nil
        }
        let path = directory + "/" + credentialName
        return access(path, F_OK) == 0 ? path : nil
    }
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

/// The node's later lines (`nat: …`), held until `run` printed its first two: scripts read
/// `listening:` and `invite:` as the first lines, and the node may speak before they are out.
final class HeldLines: @unchecked Sendable {
    private let lock = NSLock()
    private var held: [String]? = []

    func emit(_ line: String) {
        let printNow = lock.withLock {
            guard held != nil else { return true }
            held?.append(line)
            return false
        }
        if printNow { groupmesh.emit(line) }
    }

    /// Prints what was held, and every later line at once.
    func open() {
        lock.withLock {
            for line in held ?? [] { groupmesh.emit(line) }
            held = nil
        }
    }
}

/// The one `run` of this process prints through it.
let announcements = HeldLines()
