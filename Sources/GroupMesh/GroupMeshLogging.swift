import Logging

/// swift-log's level, nameable through `import GroupMesh` alone.
public typealias GroupMeshLogLevel = Logger.Level

/// Logging as the `groupmesh` tool sets it up, for apps that `import GroupMesh` only: lines on
/// standard error at `level` and above. An app with its own swift-log backend passes its own
/// `Logger` to `MeshSession` instead.
public enum GroupMeshLogging {
    /// A logger writing to standard error at `level` and above.
    public static func standardError(label: String = "groupmesh", level: GroupMeshLogLevel = .info) -> Logger {
        Logger(label: label) { handler(label: $0, level: level) }
    }

    /// Makes every `Logger` of the process write to standard error at `level` and above.
    /// swift-log allows this once per process.
    public static func bootstrapStandardError(level: GroupMeshLogLevel = .info) {
        LoggingSystem.bootstrap { handler(label: $0, level: level) }
    }

    private static func handler(label: String, level: GroupMeshLogLevel) -> any LogHandler {
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}
