import Foundation

/// The parts of `groupmesh status --json` that end-to-end tests look at.
package struct NodeStatus: Decodable, Sendable {
    package struct SelfInfo: Decodable, Sendable {
        package var id: String
        package var name: String
        package var address: String
        /// The current key epoch's session id, and how many epochs followed the first.
        package var session: String
        package var keyEpoch: Int?
        /// The UDP socket's kernel buffers, as getsockopt reports them (twice the size set).
        package var receiveBuffer: Int?
        package var sendBuffer: Int?
        /// The NAT behaviour the members' observations tell, the public address adopted, and the
        /// addresses the node's record gives.
        package var nat: String?
        package var reflexiveAddress: String?
        package var candidates: [String]?
        /// The session's founding id and its founder (id); nil until known, and from older nodes.
        package var founding: String?
        package var founder: String?
    }

    package struct MemberInfo: Decodable, Sendable {
        package var id: String
        package var name: String
        package var address: String
        package var state: String
        package var incarnation: UInt64
        package var rttMs: Double?
        package var datagramSize: Int?
        /// How the node reaches the member, and where it sends to it.
        package var path: String?
        package var pathAddress: String?
        /// The member our datagrams to it go through, while `path` is `relayed` (its id).
        package var relay: String?
        /// The newest protocol version it speaks; nil while unknown (and from release 0.9.0).
        package var `protocol`: Int?
        /// The member that let it in (id); nil for the founder, and from nodes built before it.
        package var introducedBy: String?
    }

    /// The congestion control of what the node fetches (`status --json` → downlink).
    package struct DownlinkInfo: Decodable, Sendable {
        package var rate: Double
        package var priority: String
        package var roundTripMs: Double?
        package var competing: Bool
        /// Absent from nodes built before them (`GROUPMESH_BIN` may name one).
        package var slowdowns: Int?
        package var slowdownsFoundAnotherFlow: Int?
        package var lossyLine: Bool?
    }

    package struct LostMemberInfo: Decodable, Sendable {
        package var id: String
        package var name: String
        package var addresses: [String]
        package var lostSeconds: Double
        package var nextAskSeconds: Double
    }

    /// A join no member has answered yet (`status --json` → joining; absent once joined).
    package struct JoiningInfo: Decodable, Sendable {
        package var state: String
        package var addresses: [String]
        package var attempts: Int
        package var since: Double
    }

    /// LAN discovery (`status --json` → lanDiscovery; absent when off).
    package struct LANDiscoveryInfo: Decodable, Sendable {
        package var interfaces: [String]
        package var announcementsSent: UInt64
        package var announcementsHeard: UInt64
        package var announcementsIgnored: UInt64
        package var membersMet: UInt64
    }

    package var `self`: SelfInfo
    package var members: [MemberInfo]
    package var lanDiscovery: LANDiscoveryInfo?
    package var downlink: DownlinkInfo?
    package var joining: JoiningInfo?
    /// Members the node lost touch with and still looks for (`status --json` → lost).
    package var lost: [LostMemberInfo]?
    /// The author of a rotation the node was told it was left out of (id).
    package var leftOutBy: String?
    /// The data dir and the room on its disk (`status --json` → storage).
    package var storage: StorageInfo?
    package var counters: [String: JSONValue]

    package struct StorageInfo: Decodable, Sendable {
        package var dataDirectory: String
        package var freeBytes: UInt64?
    }

    package func state(of id: String) -> String? {
        members.first { $0.id == id }?.state
    }

    /// A `dropped` counter by reason (`status --json` → counters.dropped).
    package func dropped(_ reason: String) -> Int {
        Int(counters["dropped"]?[reason]?.number ?? 0)
    }

    /// A relay counter (`status --json` → counters.relay: forwardedDatagrams, forwardedBytes,
    /// sentThroughRelays, receivedThroughRelays, droppedOverRate, refused).
    package func relay(_ counter: String) -> Int {
        Int(counters["relay"]?[counter]?.number ?? 0)
    }

    /// A birthday round counter (`status --json` → counters.birthday: roundsTried, roundsSucceeded,
    /// probesSent, socketsOpened, socketsHit, …).
    package func birthday(_ counter: String) -> Int {
        Int(counters["birthday"]?[counter]?.number ?? 0)
    }
}

/// Just enough JSON to read counters without a schema.
package enum JSONValue: Decodable, Sendable {
    case number(Double), string(String), bool(Bool), object([String: JSONValue]), array([JSONValue]), null

    package init(from decoder: any Decoder) throws {
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

    package var number: Double? { if case let .number(value) = self { value } else { nil } }

    package subscript(key: String) -> JSONValue? {
        if case let .object(object) = self { object[key] } else { nil }
    }
}

extension NodeProcess {
    /// `groupmesh status --json` for this node.
    package func status() async throws -> NodeStatus {
        let result = try await Self.runCommand(["status", "--json", "--data-dir", dataDirectory], binary: binary)
        guard result.status == 0 else { throw NodeProcessError.exited(status: result.status, stderr: result.stderr) }
        return try JSONDecoder().decode(NodeStatus.self, from: Data(result.stdout.utf8))
    }

    /// Polls `status` until `condition` holds; bounded by `timeout`. Returns the last status.
    @discardableResult
    package func waitForStatus(
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
    package var aliveCount: Int { members.filter { $0.state == "alive" }.count }
}

extension Array where Element == NodeProcess {
    /// Waits (bounded) until every node sees `count` members alive. The bound is generous because
    /// it only costs time when something is wrong; a failure shows every node's view and last log.
    package func waitForMesh(alive count: Int, timeout: Duration = .seconds(60)) async throws {
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
