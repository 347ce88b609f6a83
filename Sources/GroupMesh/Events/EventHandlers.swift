import Foundation
import Logging
import NIOConcurrencyHelpers

/// `run --event-handler [TYPE[,TYPE…]=]COMMAND`: which events a handler takes, and what it runs.
public struct EventHandlerSpec: Sendable, Equatable {
    /// Nil: every event.
    public var types: Set<MeshEvent.Kind>?
    public var command: String

    public init(types: Set<MeshEvent.Kind>?, command: String) {
        self.types = types
        self.command = command
    }

    /// `member-joined,member-dead=notify.sh`, or a bare command for every event. What comes
    /// before the first `=` is taken as types only when every one of them is an event type, so
    /// a command with `=` in it (`FOO=1 script.sh`) stays whole; words with a hyphen that are not
    /// all types are a mistake, refused.
    public init(parsing text: String) throws(GroupMeshError) {
        if let equals = text.firstIndex(of: "=") {
            let names = text[..<equals].split(separator: ",").map(String.init)
            let kinds = names.compactMap(MeshEvent.Kind.init(rawValue:))
            if !names.isEmpty, kinds.count == names.count {
                let command = String(text[text.index(after: equals)...])
                guard !command.trimmingCharacters(in: .whitespaces).isEmpty else {
                    throw .control("--event-handler \(text): no command after '='")
                }
                self.init(types: Set(kinds), command: command)
                return
            }
            // Words with a hyphen before the `=` are no shell assignment (a variable's name has
            // none): a mistyped type, which would otherwise run as a command for every event.
            let typeLike = names.allSatisfy { name in
                name.unicodeScalars.allSatisfy {
                    ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-"
                        || $0 == "_"
                }
            }
            if typeLike, names.contains(where: { $0.contains("-") }),
                let unknown = names.first(where: { MeshEvent.Kind(rawValue: $0) == nil })
            {
                let known = MeshEvent.Kind.allCases.map(\.rawValue).joined(separator: ", ")
                throw .control("--event-handler: no event type '\(unknown)'; the types are \(known)")
            }
        }
        guard !text.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .control("--event-handler: an empty command")
        }
        self.init(types: nil, command: text)
    }

    func takes(_ event: MeshEvent) -> Bool { types?.contains(event.type) ?? true }
}

/// Runs the event handlers, as Serf does: one at a time, in event order, each through
/// `/bin/sh -c` with the event in environment variables and as JSON on standard input, in a
/// process group of its own so that a time limit kills everything it started. The node only enqueues
/// (never waits): past 1,024 waiting, events are dropped for the handlers and counted.
final class EventHandlers: Sendable {
    struct Counters: Sendable {
        var run: UInt64 = 0
        var failed: UInt64 = 0
        var timedOut: UInt64 = 0
        var dropped: UInt64 = 0
    }

    static let queueLimit = 1024
    private let specs: [EventHandlerSpec]
    private let timeout: Duration
    private let environment: [String: String]
    private let logger: Logger
    private let queue: AsyncStream<MeshEvent>.Continuation
    private let state = NIOLockedValueBox(Counters())
    private let worker: Task<Void, Never>

    init(specs: [EventHandlerSpec], timeout: Duration, environment: [String: String], logger: Logger) {
        self.specs = specs
        self.timeout = timeout
        self.environment = environment
        self.logger = logger
        // Writing an event to a handler that exited without reading it must not kill the node.
        signal(SIGPIPE, SIG_IGN)
        let (stream, continuation) = AsyncStream<MeshEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(Self.queueLimit))
        queue = continuation
        let specs = specs, state = state
        worker = Task.detached {
            for await event in stream {
                for spec in specs where spec.takes(event) {
                    let outcome = await Self.invoke(spec, event: event, timeout: timeout, environment: environment)
                    state.withLockedValue { counters in
                        counters.run += 1
                        switch outcome {
                        case .succeeded: break
                        case .failed: counters.failed += 1
                        case .timedOut: counters.timedOut += 1
                        }
                    }
                    switch outcome {
                    case .succeeded: break
                    case let .failed(reason):
                        logger.warning(
                            "event handler failed",
                            metadata: [
                                "event": "\(event.type.rawValue)", "seq": "\(event.seq)",
                                "command": "\(spec.command)", "reason": "\(reason)",
                            ])
                    case .timedOut:
                        logger.warning(
                            "event handler killed after its time limit",
                            metadata: [
                                "event": "\(event.type.rawValue)", "command": "\(spec.command)",
                                "limit": "\(timeout)",
                            ])
                    }
                }
            }
        }
    }

    var counters: Counters { state.withLockedValue { $0 } }

    /// Queues the events for the handlers that take them; never waits.
    func run(_ events: [MeshEvent]) {
        for event in events where specs.contains(where: { $0.takes(event) }) {
            if case .dropped = queue.yield(event) {
                state.withLockedValue { $0.dropped += 1 }
            }
        }
    }

    /// No more events; the one running finishes (within its time limit).
    func finish() {
        queue.finish()
    }

    enum Outcome: Sendable {
        case succeeded, timedOut
        case failed(String)
    }

    /// The environment a handler gets for `event` (Docs/CLI.md §events).
    static func variables(for event: MeshEvent) -> [String: String] {
        var variables = [
            "GROUPMESH_EVENT": event.type.rawValue, "GROUPMESH_EVENT_SEQ": "\(event.seq)",
            "GROUPMESH_EVENT_TIME": event.time,
        ]
        if let member = event.member {
            variables["GROUPMESH_MEMBER_ID"] = member.id
            variables["GROUPMESH_MEMBER_NAME"] = member.name
            variables["GROUPMESH_MEMBER_ADDRESS"] = member.address
        }
        if let attachment = event.attachment {
            variables["GROUPMESH_ATTACHMENT_ID"] = attachment.id
            variables["GROUPMESH_ATTACHMENT_CONTENT"] = attachment.content
            variables["GROUPMESH_ATTACHMENT_SIZE"] = "\(attachment.size)"
        }
        if let session = event.session { variables["GROUPMESH_SESSION"] = session }
        return variables
    }

    private static func invoke(
        _ spec: EventHandlerSpec, event: MeshEvent, timeout: Duration,
        environment: [String: String]
    ) async -> Outcome {
        let variables = ProcessInfo.processInfo.environment
            .filter { $0.key != "GROUPMESH_INVITE" }
            .merging(environment) { $1 }
            .merging(variables(for: event)) { $1 }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let input = ((try? encoder.encode(event)) ?? Data()) + Data("\n".utf8)
        let process: HandlerProcess
        do {
            process = try HandlerProcess.start(command: spec.command, environment: variables, input: Array(input))
        } catch {
            return .failed(error.description)
        }
        let pid = process.pid
        // The limit is kept by a dispatch timer, not a task: it must fire however busy the
        // cooperative pool is.
        let killed = NIOLockedValueBox(false)
        let limit = DispatchWorkItem {
            killed.withLockedValue { $0 = true }
            kill(-pid, SIGKILL)
        }
        DispatchQueue.global().asyncAfter(
            deadline: .now() + .nanoseconds(Int(timeout.nanosecondsClamped)), execute: limit)
        let status = await process.exitStatus()
        limit.cancel()
        if killed.withLockedValue({ $0 }) { return .timedOut }
        return status == 0
            ? .succeeded : .failed(status > 128 ? "killed by signal \(status - 128)" : "exit status \(status)")
    }
}
