import Foundation

/// The parts of `groupmesh status --json` that end-to-end tests look at.
public struct NodeStatus: Decodable, Sendable {
    public struct SelfInfo: Decodable, Sendable {
        public var id: String
        public var name: String
        public var address: String
        /// The current key epoch's session id, and how many epochs followed the first.
        public var session: String
        public var keyEpoch: Int?
        /// The UDP socket's kernel buffers, as getsockopt reports them (twice the size set).
        public var receiveBuffer: Int?
        public var sendBuffer: Int?
        /// The NAT behaviour the members' observations tell, the public address adopted, and the
        /// addresses the node's record gives.
        public var nat: String?
        public var reflexiveAddress: String?
        public var candidates: [String]?
    }

    public struct MemberInfo: Decodable, Sendable {
        public var id: String
        public var name: String
        public var address: String
        public var state: String
        public var incarnation: UInt64
        public var rttMs: Double?
        public var datagramSize: Int?
        /// How the node reaches the member, and where it sends to it.
        public var path: String?
        public var pathAddress: String?
        /// The member our datagrams to it go through, while `path` is `relayed` (its id).
        public var relay: String?
        /// The newest protocol version it speaks; nil while unknown (and from release 0.9.0).
        public var `protocol`: Int?
    }

    /// The congestion control of what the node fetches (`status --json` → downlink).
    public struct DownlinkInfo: Decodable, Sendable {
        public var rate: Double
        public var priority: String
        public var roundTripMs: Double?
        public var competing: Bool
        /// Absent from nodes built before them (`GROUPMESH_BIN` may name one).
        public var slowdowns: Int?
        public var slowdownsFoundAnotherFlow: Int?
        public var lossyLine: Bool?
    }

    /// A join no member has answered yet (`status --json` → joining; absent once joined).
    public struct JoiningInfo: Decodable, Sendable {
        public var state: String
        public var addresses: [String]
        public var attempts: Int
        public var since: Double
    }

    /// LAN discovery (`status --json` → lanDiscovery; absent when off).
    public struct LANDiscoveryInfo: Decodable, Sendable {
        public var interfaces: [String]
        public var announcementsSent: UInt64
        public var announcementsHeard: UInt64
        public var announcementsIgnored: UInt64
        public var membersMet: UInt64
    }

    public var `self`: SelfInfo
    public var members: [MemberInfo]
    public var lanDiscovery: LANDiscoveryInfo?
    public var downlink: DownlinkInfo?
    public var joining: JoiningInfo?
    public var counters: [String: JSONValue]

    public func state(of id: String) -> String? {
        members.first { $0.id == id }?.state
    }

    /// A `dropped` counter by reason (`status --json` → counters.dropped).
    public func dropped(_ reason: String) -> Int {
        Int(counters["dropped"]?[reason]?.number ?? 0)
    }

    /// A relay counter (`status --json` → counters.relay: forwardedDatagrams, forwardedBytes,
    /// sentThroughRelays, receivedThroughRelays, droppedOverRate, refused).
    public func relay(_ counter: String) -> Int {
        Int(counters["relay"]?[counter]?.number ?? 0)
    }

    /// A birthday round counter (`status --json` → counters.birthday: roundsTried, roundsSucceeded,
    /// probesSent, socketsOpened, socketsHit, …).
    public func birthday(_ counter: String) -> Int {
        Int(counters["birthday"]?[counter]?.number ?? 0)
    }
}

/// Just enough JSON to read counters without a schema.
public enum JSONValue: Decodable, Sendable {
    case number(Double), string(String), bool(Bool), object([String: JSONValue]), array([JSONValue]), null

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else {
            self = .array(try container.decode([JSONValue].self))
        }
    }

    public var number: Double? { if case let .number(value) = self { value } else { nil } }

    public subscript(key: String) -> JSONValue? {
        if case let .object(object) = self { object[key] } else { nil }
    }
}

extension NodeProcess {
    /// `groupmesh status --json` for this node.
    public func status() async throws -> NodeStatus {
        let result = try await Self.runCommand(["status", "--json", "--data-dir", dataDirectory], binary: binary)
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode(NodeStatus.self, from: Data(result.stdout.utf8))
    }

    /// Polls `status` until `condition` holds; bounded by `timeout`. Returns the last status.
    @discardableResult
    public func waitForStatus(
        timeout: Duration, _ what: String,
        _ condition: (NodeStatus) -> Bool
    ) async throws -> NodeStatus {
        let deadline = ContinuousClock.now + timeout
        var last: NodeStatus?
        while ContinuousClock.now < deadline {
            if let status = try? await status() {
                last = status
                if condition(status) { return status }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        let summary = last.map { $0.members.map { "\($0.name)=\($0.state)" }.joined(separator: " ") } ?? "no status"
        throw NodeProcessError.timeout(
            "\(what) within \(timeout) on \(dataDirectory) (up \(ContinuousClock.now - startedAt)): "
                + "\(summary); last log: \(stderr.split(separator: "\n").suffix(3).joined(separator: " | "))")
    }
}

extension NodeStatus {
    public var aliveCount: Int { members.filter { $0.state == "alive" }.count }
}

extension Array where Element == NodeProcess {
    /// Waits (bounded) until every node sees `count` members alive. The bound is generous because
    /// it only costs time when something is wrong; a failure shows every node's view and last log.
    public func waitForMesh(alive count: Int, timeout: Duration = .seconds(60)) async throws {
        let deadline = ContinuousClock.now + timeout
        for node in self {
            do {
                try await node.waitForStatus(timeout: deadline - ContinuousClock.now, "\(count) alive") {
                    $0.aliveCount == count
                }
            } catch {
                var views: [String] = []
                for other in self {
                    // Every member as this node sees it, so a failure says who is missing where.
                    let view =
                        (try? await other.status()).map { status in
                            "\(status.`self`.name) sees \(status.aliveCount) alive ["
                                + status.members.map { "\($0.name) \($0.state)/\($0.path ?? "-")" }.joined(
                                    separator: ", ") + "]"
                        } ?? "no status"
                    let log = other.stderr.split(separator: "\n").suffix(4).joined(separator: " | ")
                    views.append("\(other.dataDirectory) up \(ContinuousClock.now - other.startedAt): \(view); \(log)")
                }
                throw NodeProcessError.timeout(
                    "\(count) alive on every node within \(timeout): "
                        + views.joined(separator: " ;; "))
            }
        }
    }
}
