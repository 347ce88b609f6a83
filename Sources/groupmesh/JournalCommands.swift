import ArgumentParser
import Foundation
import GroupMesh

/// Turns a relative path into an absolute one: the node runs in another working directory.
func absolutePath(_ path: String) -> String {
    path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
}

struct AttachCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attach",
        abstract: "Add a file to the session's journal; prints the attachment id (64 hex characters)."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The file to add (up to 100 MiB).")
    var path: String

    @Option(help: ArgumentHelp("Metadata for this attachment, as JSON (up to 64 KiB).", valueName: "JSON"))
    var metadata: String?

    func run() async throws {
        let file = absolutePath(path)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory) else { throw fail("no such file: \(path)") }
        guard !isDirectory.boolValue else { throw fail("\(path) is a directory; only files can be attached") }
        if let metadata {
            guard metadata.utf8.count <= 64 * 1024 else {
                throw fail("metadata of \(metadata.utf8.count) bytes is over the 64 KiB limit; nothing was stored")
            }
            guard (try? JSONSerialization.jsonObject(with: Data(metadata.utf8), options: [.fragmentsAllowed])) != nil else {
                throw fail("--metadata is not valid JSON")
            }
        }
        var client = ControlClient(directory: data.directory)
        client.timeout = .seconds(600)
        let response: ControlResponse
        do {
            response = try client.send(.attach(path: file, metadata: metadata))
        } catch {
            throw fail(error)
        }
        guard case let .attachment(id) = response else { throw fail("the node sent no attachment id") }
        emit(id)
    }
}

struct AttachmentsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachments",
        abstract: "List the session's attachments: id, size, chunks held here, holders, metadata."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Flag(help: "Print a JSON array.")
    var json = false

    func run() async throws {
        let response: ControlResponse
        do {
            response = try ControlClient(directory: data.directory).send(.attachments)
        } catch {
            throw fail(error)
        }
        guard case let .attachments(infos) = response else { throw fail("the node sent no attachment list") }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            emit(String(decoding: try encoder.encode(infos), as: UTF8.self))
            return
        }
        let rows = infos.map { info in
            [info.id, String(info.content.prefix(16)), ByteCount.text(info.size), "\(info.chunksHave)/\(info.chunks)",
             "\(info.holders)", info.state, info.metadata ?? ""]
        }
        let lines = StatusTable.table(header: ["ID", "CONTENT", "SIZE", "CHUNKS", "HOLDERS", "STATE", "METADATA"],
                                      rows: rows, width: Terminal.width)
        emit(lines.map { String($0.prefix(Terminal.width)) }.joined(separator: "\n"))
    }
}

struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Write an attachment to a file, fetching what is missing from the members that hold it."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The attachment id (or a unique prefix of it).")
    var id: String

    @Option(help: "Where to write it.")
    var output: String

    func run() async throws {
        var client = ControlClient(directory: data.directory)
        client.timeout = .seconds(60)
        let display = ProgressDisplay(terminal: isatty(STDERR_FILENO) == 1)
        let answered: Bool
        do {
            // Progress lines until the final answer.
            // The file is ours, not the node's: made with our umask.
            let mask = umask(0)
            umask(mask)
            let request = ControlRequest.get(attachment: id, path: absolutePath(output), mode: 0o666 & ~UInt32(mask))
            answered = try client.subscribe(request) { response in
                guard case let .progress(progress) = response else { return false }
                display.show(progress)
                return true
            }
        } catch {
            display.finish()
            throw fail(error)
        }
        display.finish()  // before any error line, which would land on the bar's line
        guard answered else {
            throw fail("the node on \(data.directory.path) stopped before \(output) was written; run get again once it runs")
        }
    }
}

/// `get`'s progress on stderr: a bar with rate and ETA on a terminal, a plain line every few
/// seconds otherwise (logs, CI).
final class ProgressDisplay {
    private let terminal: Bool
    private let start = ContinuousClock.now
    private var lastLine = ContinuousClock.now
    private var drawn = false

    init(terminal: Bool) { self.terminal = terminal }

    func show(_ progress: TransferProgress) {
        let elapsed = max(0.001, (ContinuousClock.now - start).seconds)
        let fraction = progress.chunks == 0 ? 1 : Double(progress.chunksHave) / Double(progress.chunks)
        let bytes = Double(progress.size) * fraction
        let rate = bytes / elapsed
        let eta = rate > 0 ? (Double(progress.size) - bytes) / rate : 0
        let summary = String(format: "%d/%d chunks  %@/s  ETA %.0fs", progress.chunksHave, progress.chunks,
                             ByteCount.text(UInt64(rate)), eta)
        if terminal {
            let width = 30
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            FileHandle.standardError.write(Data("\r[\(bar)] \(String(format: "%3.0f%%", fraction * 100))  \(summary)  ".utf8))
            drawn = true
        } else if ContinuousClock.now - lastLine >= .seconds(2) {
            lastLine = ContinuousClock.now
            FileHandle.standardError.write(Data("get: \(summary)\n".utf8))
        }
    }

    func finish() {
        if drawn { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

struct RemoveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove an attachment from the session's journal, for every member."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The attachment id (or a unique prefix of it).")
    var id: String

    func run() async throws {
        do {
            _ = try ControlClient(directory: data.directory).send(.remove(attachment: id))
        } catch {
            throw fail(error)
        }
    }
}

enum ByteCount {
    static func text(_ bytes: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}
