import Foundation

/// Real `groupmesh run` processes in one mesh, for end-to-end tests: the first node makes the
/// session and its invite, the others join with it. Made by `withProcessMesh`, which tears it
/// down when the test body returns or throws; nodes a body starts through it (`join`, `restart`,
/// `client`, `track`) are torn down with it.
package final class ProcessMesh: @unchecked Sendable {
    /// The address every node listens on unless told otherwise (`127.0.0.1:0`, `[::1]:0`).
    package let listen: String
    /// How long `waitUntilAllSee` waits by default.
    package let timeout: Duration
    private let arguments: [String]
    private let argumentsByName: [String: [String]]
    private let lazy: Set<String>
    /// The `groupmesh` binary of the nodes that run another one (another release's), by name.
    private let binaries: [String: String]
    private let lock = NSLock()
    private var currentInvite = ""
    private var order: [String] = []
    private var current: [String: NodeProcess] = [:]
    /// Every process started, restarts and clients included: all are killed at the end.
    private var started: [NodeProcess] = []
    /// The data dirs the mesh made (not those a test handed it), removed at the end.
    private var madeDirectories: [String] = []

    init(
        listen: String, arguments: [String], argumentsByName: [String: [String]], lazy: Set<String>,
        binaries: [String: String] = [:], timeout: Duration
    ) {
        self.binaries = binaries
        self.listen = listen
        self.arguments = arguments
        self.argumentsByName = argumentsByName
        self.lazy = lazy
        self.timeout = timeout
    }

    /// The invite the first node printed, which every `join` uses unless given another.
    package var invite: String { lock.withLock { currentInvite } }

    /// The nodes' names, in the order they were started.
    package var names: [String] { lock.withLock { order } }

    /// The nodes, in the order they were started (for a restarted node, its latest process).
    package var nodes: [NodeProcess] { lock.withLock { order.compactMap { current[$0] } } }

    /// The node called `name` (its latest process, after a `restart`).
    package subscript(name: String) -> NodeProcess {
        get throws {
            guard let node = lock.withLock({ current[name] }) else { throw ProcessMeshError.unknownNode(name) }
            return node
        }
    }

    /// `run` and its arguments for node `name`: the mesh's listen address and name, the arguments
    /// for every node, then `name`'s own, then `--lazy` if it is one of the lazy ones.
    func runArguments(_ name: String) -> [String] {
        ["run", "--listen", listen, "--name", name] + arguments + (argumentsByName[name] ?? [])
            + (lazy.contains(name) ? ["--lazy"] : [])
    }

    /// Starts the node that makes the session and waits (bounded) for its invite.
    func startFirst(_ name: String) async throws {
        let node = try start(name, runArguments(name))
        let invite = try await node.waitForLine(prefix: "invite:")
        lock.withLock { currentInvite = invite }
    }

    /// Starts node `name` joining with the mesh's invite (or `invite`); does not wait for it to
    /// join (`waitUntilAllSee` does). `arguments` come after those the mesh gives every node and
    /// `name`. A `dataDirectory` given here is the caller's and is not removed.
    @discardableResult
    package func join(
        _ name: String, arguments extra: [String] = [], invite: String? = nil,
        dataDirectory: String? = nil
    ) throws -> NodeProcess {
        try start(name, runArguments(name) + ["--invite", invite ?? self.invite] + extra, dataDirectory: dataDirectory)
    }

    /// Starts node `name` again on its data dir, once its process has exited: `run --listen` (on
    /// `listen`, e.g. the address it had, or the mesh's) and `arguments` only, since the data dir
    /// holds its session and members. `mesh[name]` is the new process from then on.
    @discardableResult
    package func restart(_ name: String, listen: String? = nil, arguments extra: [String] = []) throws -> NodeProcess {
        let previous = try self[name]
        guard !previous.process.isRunning else { throw ProcessMeshError.stillRunning(name) }
        let node = try NodeProcess(
            ["run", "--listen", listen ?? self.listen] + extra,
            dataDirectory: previous.dataDirectory, ownsDataDirectory: false, binary: previous.binary)
        lock.withLock {
            current[name] = node
            started.append(node)
        }
        return node
    }

    /// Starts a client command (`listen`, `events`, `get` …) on node `name`'s data dir, of the
    /// node's own binary, stopped with the mesh.
    @discardableResult
    package func client(_ arguments: [String], of name: String) throws -> NodeProcess {
        let node = try self[name]
        return track(
            try NodeProcess(arguments, dataDirectory: node.dataDirectory, ownsDataDirectory: false, binary: node.binary)
        )
    }

    /// Runs a short-lived command (`send`, `attach`, `get` …) on node `name`'s data dir, of the
    /// node's own binary, to completion (bounded).
    package func command(
        _ arguments: [String], of name: String, timeout: Duration = .seconds(60)
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        let node = try self[name]
        return try await NodeProcess.runCommand(
            arguments + ["--data-dir", node.dataDirectory], timeout: timeout, binary: node.binary)
    }

    /// Stops `process` with the mesh (its data dir is left alone).
    @discardableResult
    package func track(_ process: NodeProcess) -> NodeProcess {
        lock.withLock { started.append(process) }
        return process
    }

    /// Waits (bounded) until each of `names` (every node by default) sees `alive` members alive
    /// (as many as `names` by default) in `status --json`. A node that exited fails the wait.
    package func waitUntilAllSee(
        _ names: [String]? = nil, alive count: Int? = nil,
        timeout: Duration? = nil
    ) async throws {
        let nodes = try (names ?? self.names).map { try self[$0] }
        try await nodes.waitForMesh(alive: count ?? nodes.count, timeout: timeout ?? self.timeout)
    }

    private func start(_ name: String, _ arguments: [String], dataDirectory: String? = nil) throws -> NodeProcess {
        guard lock.withLock({ current[name] }) == nil else { throw ProcessMeshError.duplicateName(name) }
        let directory = dataDirectory ?? NodeProcess.makeTemporaryDirectory(name)
        if dataDirectory == nil { lock.withLock { madeDirectories.append(directory) } }
        let node = try NodeProcess(
            arguments, dataDirectory: directory, ownsDataDirectory: dataDirectory == nil,
            binary: binaries[name] ?? NodeProcess.executable)
        lock.withLock {
            order.append(name)
            current[name] = node
            started.append(node)
        }
        return node
    }

    /// Kills every process the mesh started (all signalled first, then each waited for) and
    /// removes the data dirs it made unless `keepingData`.
    func tearDown(keepingData: Bool) async {
        let (processes, directories) = lock.withLock { (started, madeDirectories) }
        for process in processes { process.signal(SIGKILL) }
        for process in processes { _ = try? await process.waitForExit(timeout: .seconds(10)) }
        guard !keepingData else { return }
        for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
    }
}

package enum ProcessMeshError: Error, CustomStringConvertible {
    case unknownNode(String)
    case duplicateName(String)
    case stillRunning(String)
    case noNodes

    package var description: String {
        switch self {
        case let .unknownNode(name): return "no node called '\(name)' in the mesh"
        case let .duplicateName(name): return "a node called '\(name)' is already in the mesh"
        case let .stillRunning(name): return "'\(name)' is still running; stop it before a restart"
        case .noNodes: return "a mesh needs at least one node"
        }
    }
}

/// Starts a mesh of real `groupmesh run` processes on loopback, runs `body` with it, and always
/// tears it down (every process it started killed, the data dirs it made removed), also when
/// `body` throws.
///
/// The first of `names` makes the session; the others join with its invite, all at once. Every
/// node runs `run --listen LISTEN --name NAME`, then `arguments`, then `argumentsByName[NAME]`,
/// then `--lazy` if NAME is in `lazy` (nodes a body `join`s later get theirs the same way). With
/// `waitForMembership`, the mesh is handed over once every node sees every node alive in
/// `status --json` (bounded by `timeout`, which is also `waitUntilAllSee`'s default).
/// `keepDataDirectories` leaves the data dirs to the body's caller (they still go when the test
/// process exits, like every temporary directory, unless `GROUPMESH_KEEP_TEST_DIRS` is set).
/// `binaries` names the nodes that run another `groupmesh` (a previous release's, `PreviousRelease`).
package func withProcessMesh<Value>(
    names: [String], listen: String = "127.0.0.1:0", arguments: [String] = [],
    argumentsByName: [String: [String]] = [:], lazy: Set<String> = [], waitForMembership: Bool = true,
    timeout: Duration = .seconds(60), keepDataDirectories: Bool = false, binaries: [String: String] = [:],
    _ body: (ProcessMesh) async throws -> Value
) async throws -> Value {
    guard let first = names.first else { throw ProcessMeshError.noNodes }
    let mesh = ProcessMesh(
        listen: listen, arguments: arguments, argumentsByName: argumentsByName, lazy: lazy,
        binaries: binaries, timeout: timeout)
    do {
        try await mesh.startFirst(first)
        for name in names.dropFirst() { try mesh.join(name) }
        // A lone node is whole once it printed its invite.
        if waitForMembership, names.count > 1 { try await mesh.waitUntilAllSee() }
        let value = try await body(mesh)
        await mesh.tearDown(keepingData: keepDataDirectories)
        return value
    } catch {
        await mesh.tearDown(keepingData: keepDataDirectories)
        throw error
    }
}
