import ArgumentParser
import GroupMesh
import Logging
import MeshCore
import MeshCrypto
import ServiceLifecycle

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Start a node: create or join a session and stay in it until SIGINT/SIGTERM."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Option(help: ArgumentHelp("UDP address to listen on; port 0 picks a free port.", valueName: "HOST:PORT"))
    var listen = "0.0.0.0:7946"

    @Option(help: ArgumentHelp("Address others should use to reach this node (repeatable).", valueName: "HOST:PORT"))
    var advertise: [String] = []

    @Option(help: ArgumentHelp("Join the session of this invite token.", valueName: "TOKEN"))
    var invite: String?

    @Option(help: ArgumentHelp("Also contact this member address when joining (repeatable).", valueName: "HOST:PORT"))
    var join: [String] = []

    @Option(help: "A human-readable name for this node.")
    var name: String?

    @Flag(help: "Fetch an attachment only when asked for it (default: replicate everything).")
    var lazy = false

    @Option(help: "Timing defaults: lan (default), local or wan.")
    var profile: MembershipSettings.Profile = .lan

    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error.", valueName: "LEVEL"))
    var logLevel = "warning"

    @Option(help: ArgumentHelp("Drop this share of received datagrams (0 to 0.5), to test under loss.",
                               visibility: .hidden))
    var simulateLoss: Double = 0

    func validate() throws {
        guard (0...0.5).contains(simulateLoss) else { throw ValidationError("--simulate-loss must be between 0 and 0.5") }
    }

    func run() async throws {
        bootstrapLogging(level: Logger.Level(rawValue: logLevel) ?? .warning)
        let logger = Logger(label: "groupmesh")
        do {
            let session = try await MeshSession.join(try makeConfiguration(), logger: logger)
            let node = session.node
            emit("listening: \(await node.localAddress.map(\.description) ?? "?")")
            emit("invite: \(await node.invite().text)")

            // `groupmesh leave` ends the node's service by itself: that is a normal end, not a failure.
            let group = ServiceGroup(configuration: ServiceGroupConfiguration(
                services: [.init(service: MeshNodeService(node: node), successTerminationBehavior: .gracefullyShutdownGroup)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            ))
            try await group.run()
            await session.leave()
        } catch let error as GroupMeshError {
            throw fail(error)
        }
    }

    private func makeConfiguration() throws(GroupMeshError) -> NodeConfiguration {
        var configuration = NodeConfiguration(dataDirectory: data.directory)
        guard let (host, port) = PeerAddress.split(listen) else { throw .invalidAddress(listen) }
        configuration.listenHost = host
        configuration.listenPort = Int(port)
        configuration.advertise = try advertise.map(Self.parseAddress)
        configuration.join = try join.map(Self.parseAddress)
        if let invite {
            do { configuration.invite = try InviteToken(parsing: invite) } catch { throw .crypto(error) }
        }
        configuration.name = name
        configuration.lazy = lazy
        configuration.profile = profile
        configuration.simulatedLoss = simulateLoss
        return configuration
    }

    private static func parseAddress(_ text: String) throws(GroupMeshError) -> PeerAddress {
        do { return try PeerAddress(parsing: text) } catch { throw .invalidAddress(text) }
    }
}

extension MembershipSettings.Profile: ExpressibleByArgument {}
