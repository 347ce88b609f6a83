import Foundation
import GroupMesh
import Logging

/// `run`'s settings kept in a file (`DATA_DIR/config.json`, or `run --config PATH`), for a node
/// that runs as a service. Each key is the long name of one of `run`'s options (`relay` stands
/// for `--relay`/`--no-relay`); a flag given on the command line wins over its key, and a key over
/// the built-in default. A key this build does not know is refused, not skipped: a misspelt
/// `"lisen"` would otherwise leave the node on the default port without a word.
struct RunConfigurationFile {
    var listen: ListenAddress?
    var advertise: [MeshAddress]?
    var join: [MeshAddress]?
    var name: String?
    var lazy: Bool?
    var relay: Bool?
    var relayBudget: RelayBudget?
    var lanDiscovery: Bool?
    var portMapping: Bool?
    var profile: NodeConfiguration.Profile?
    var logLevel: Logger.Level?
    var metrics: ListenAddress?
    var eventHandler: [EventHandlerSpec]?
    var eventHandlerTimeout: Double?
    var stun: [String]?
    /// `turn:USER:PASS@HOST:PORT`: kept here, the password stays off the command line.
    var turn: String?

    static let keys = [
        "listen", "advertise", "join", "name", "lazy", "relay", "relay-budget", "lan-discovery",
        "profile", "log-level", "metrics", "event-handler", "event-handler-timeout", "port-mapping",
        "stun", "turn",
    ]

    /// Far more than any real configuration: a larger file is a wrong path, not settings.
    static let maxBytes = 64 * 1024

    /// An empty configuration: every value from the command line or the defaults.
    init() {}

    /// The file at `path`; an empty configuration when it is absent and `required` is false.
    static func load(path: String, required: Bool) throws(RunConfigurationError) -> RunConfigurationFile {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT, !required { return RunConfigurationFile() }
            // The data dir's own, under a path that is a file: that is what is wrong.
            if errno == ENOTDIR, !required {
                let directory = (path as NSString).deletingLastPathComponent
                throw RunConfigurationError(
                    "data dir \(directory) is not a directory; give a directory (it is made if missing)")
            }
            throw RunConfigurationError(
                "cannot read the config file \(path): \(String(cString: strerror(errno)))"
                    + (errno == ENOENT ? "; create it (`{}` keeps every default) or drop --config" : ""))
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var info = stat()
        if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
            throw RunConfigurationError("the config file \(path) is a directory; give the JSON file in it")
        }
        let data: Data
        do { data = try handle.read(upToCount: maxBytes + 1) ?? Data() } catch {
            throw RunConfigurationError("cannot read the config file \(path): \(error.localizedDescription)")
        }
        guard data.count <= maxBytes else {
            throw RunConfigurationError("the config file \(path) is over \(maxBytes / 1024) KiB; is it the right file?")
        }
        guard data.contains(where: { !Character(Unicode.Scalar($0)).isWhitespace }) else {
            throw RunConfigurationError("the config file \(path) is empty; write {} in it to keep every default")
        }
        return try RunConfigurationFile(json: data, path: path)
    }

    /// Parses the file's bytes; `path` only names the file in errors.
    init(json data: Data, path: String) throws(RunConfigurationError) {
        let object: [String: JSONValue]
        do {
            object = try JSONDecoder().decode([String: JSONValue].self, from: data)
        } catch let DecodingError.typeMismatch(_, context) where context.codingPath.isEmpty {
            throw RunConfigurationError("the config file \(path) must hold one JSON object ({\"key\": value, …})")
        } catch let DecodingError.valueNotFound(_, context) where context.codingPath.isEmpty {
            throw RunConfigurationError("the config file \(path) must hold one JSON object ({\"key\": value, …})")
        } catch {
            throw RunConfigurationError(
                "the config file \(path) is not valid JSON: \(Self.syntaxError(in: data)); fix it or remove it")
        }
        let known = Set(Self.keys)
        // Sorted: the same file always names the same key first.
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw RunConfigurationError(
                "unknown key \"\(unknown)\" in the config file \(path); the keys are "
                    + Self.keys.joined(separator: ", ") + " (see groupmesh run --help)")
        }
        func wrong(_ key: String, _ expected: String) -> RunConfigurationError {
            RunConfigurationError("\"\(key)\" in the config file \(path) must be \(expected)")
        }
        func string(_ key: String) throws(RunConfigurationError) -> String? {
            guard let value = object[key] else { return nil }
            guard case let .string(text) = value else { throw wrong(key, "a string") }
            return text
        }
        func strings(_ key: String) throws(RunConfigurationError) -> [String]? {
            guard let value = object[key] else { return nil }
            guard case let .array(items) = value else { throw wrong(key, "an array of strings") }
            var texts: [String] = []
            for item in items {
                guard case let .string(text) = item else { throw wrong(key, "an array of strings") }
                texts.append(text)
            }
            return texts
        }
        func bool(_ key: String) throws(RunConfigurationError) -> Bool? {
            guard let value = object[key] else { return nil }
            guard case let .bool(flag) = value else { throw wrong(key, "true or false") }
            return flag
        }
        func parsed<T>(_ key: String, _ text: String, _ parse: (String) throws -> T) throws(RunConfigurationError) -> T
        {
            do { return try parse(text) } catch {
                throw RunConfigurationError("\"\(key)\" in the config file \(path): \(error)")
            }
        }

        if let text = try string("listen") { listen = try parsed("listen", text, ListenAddress.init(parsing:)) }
        if let texts = try strings("advertise") {
            advertise = try texts.map { text throws(RunConfigurationError) in
                try parsed("advertise", text, MeshAddress.init)
            }
        }
        if let texts = try strings("join") {
            join = try texts.map { text throws(RunConfigurationError) in try parsed("join", text, MeshAddress.init) }
        }
        name = try string("name")
        lazy = try bool("lazy")
        relay = try bool("relay")
        if let text = try string("relay-budget") {
            relayBudget = try parsed("relay-budget", text, RelayBudget.init(parsing:))
        }
        lanDiscovery = try bool("lan-discovery")
        portMapping = try bool("port-mapping")
        if let text = try string("profile") {
            guard let value = NodeConfiguration.Profile(rawValue: text) else {
                throw wrong(
                    "profile",
                    NodeConfiguration.Profile.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                        .replacingLastSeparator(with: " or "))
            }
            profile = value
        }
        if let text = try string("log-level") {
            guard let value = Logger.Level(rawValue: text) else {
                throw wrong("log-level", "one of " + Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))
            }
            logLevel = value
        }
        if let text = try string("metrics") { metrics = try parsed("metrics", text, ListenAddress.init(parsing:)) }
        if let texts = try strings("event-handler") {
            eventHandler = try texts.map { text throws(RunConfigurationError) in
                try parsed("event-handler", text, EventHandlerSpec.init(parsing:))
            }
        }
        stun = try strings("stun")
        turn = try string("turn")
        if let value = object["event-handler-timeout"] {
            guard case let .number(seconds) = value else { throw wrong("event-handler-timeout", "a number of seconds") }
            eventHandlerTimeout = seconds
        }
    }

    /// Where the JSON goes wrong. JSONDecoder on Linux says only that it is not JSON;
    /// JSONSerialization gives the offset, told here as a line and column.
    private static func syntaxError(in data: Data) -> String {
        let fallback = "not one JSON object"
        do { _ = try JSONSerialization.jsonObject(with: data) } catch {
            guard var detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String else {
                return fallback
            }
            if detail.hasSuffix(".") { detail.removeLast() }
            guard let range = detail.range(of: "around character "),
                let offset = Int(detail[range.upperBound...]), offset <= data.count
            else { return detail }
            let before = Array(data.prefix(offset))
            let line = before.filter { $0 == UInt8(ascii: "\n") }.count + 1
            let column = offset - (before.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0) + 1
            return String(detail[..<range.lowerBound]).trimmingCharacters(in: .whitespaces)
                + " at line \(line), column \(column)"
        }
        return fallback
    }
}

/// A config file that cannot be used: one line, naming the file and what is wrong with it.
struct RunConfigurationError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Any JSON value, so the file's keys can be checked one by one before any is used.
private enum JSONValue: Decodable {
    case string(String), number(Double), bool(Bool), array([JSONValue]), object([String: JSONValue]), null

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }
}

private extension String {
    /// `"a", "b", "c"` → `"a", "b" or "c"`.
    func replacingLastSeparator(with separator: String) -> String {
        guard let range = range(of: ", ", options: .backwards) else { return self }
        return replacingCharacters(in: range, with: separator)
    }
}
