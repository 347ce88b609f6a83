import ArgumentParser
import Foundation
import GroupMesh

/// Turns a relative path into an absolute one: the node runs in another working directory. A
/// leading `./` goes (`/home/kim/.groupmesh`, not `/home/kim/./.groupmesh`).
func absolutePath(_ path: String) -> String {
    guard !path.hasPrefix("/") else { return path }
    var relative = Substring(path)
    while relative.hasPrefix("./") { relative = relative.dropFirst(2).drop { $0 == "/" } }
    let here = FileManager.default.currentDirectoryPath
    return relative.isEmpty || relative == "." ? here : (here == "/" ? "" : here) + "/" + relative
}

struct AttachCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attach",
        abstract: "Add a file to the session's journal; prints the attachment id (32 hex characters)."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(help: "The file to add (up to 100 MiB).")
    var path: String

    @Option(help: ArgumentHelp("Metadata for this attachment, as JSON (up to 64 KiB).", valueName: "JSON"))
    var metadata: String?

    @OptionGroup var output: JSONOutputOptions

    func run() async throws {
        let file = absolutePath(path)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory) else {
            throw fail("no such file: \(path)", kind: .input)
        }
        guard !isDirectory.boolValue else {
            throw fail("\(path) is a directory; only files can be attached (tar or zip it first)", kind: .input)
        }
        if let metadata {
            guard metadata.utf8.count <= 64 * 1024 else {
                throw fail(
                    "metadata of \(metadata.utf8.count) bytes is over the 64 KiB limit; nothing was stored",
                    kind: .input)
            }
            guard (try? JSONSerialization.jsonObject(with: Data(metadata.utf8), options: [.fragmentsAllowed])) != nil
            else {
                throw fail(
                    "--metadata is not valid JSON; give a JSON value, e.g. --metadata '{\"title\": \"x\"}'",
                    kind: .input)
            }
        }
        var client = ControlClient(directory: data.directory)
        client.timeout = .seconds(600)
        // The file's name goes with it: `get` without -o writes it under that name.
        let name = AttachmentName.safe(String(file.split(separator: "/").last ?? ""))
        let metadata = name.map { AttachmentName.adding($0, to: self.metadata) } ?? self.metadata
        guard (metadata?.utf8.count ?? 0) <= 64 * 1024 else {
            throw fail("metadata with the file's name is over the 64 KiB limit; nothing was stored", kind: .input)
        }
        let response: ControlResponse
        do {
            response = try client.send(.attach(path: file, metadata: metadata))
        } catch {
            throw fail(error)
        }
        guard case let .attachment(id) = response else { throw unexpectedAnswer("no attachment id") }
        if name == nil {
            // Said, so that a `get` asking for -o later is no surprise.
            FileHandle.standardError.write(
                Data(
                    "note: attached without its file name (hidden, or not safe to write as it is); get it with -o PATH\n"
                        .utf8))
        }
        output.emit(id, json: ["id": id])
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
        guard case let .attachments(infos) = response else { throw unexpectedAnswer("no attachment list") }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            emit(String(decoding: try encoder.encode(infos), as: UTF8.self))
            return
        }
        let rows = infos.map { info in
            [
                info.id, String(info.content.prefix(16)), ByteCount.text(info.size),
                "\(info.chunksHave)/\(info.chunks)",
                "\(info.holders)", info.state, info.metadata ?? "",
            ]
        }
        let lines = StatusTable.table(
            header: ["ID", "CONTENT", "SIZE", "CHUNKS", "HOLDERS", "STATE", "METADATA"],
            rows: rows)
        let width = Terminal.width
        emit(lines.map { Terminal.fitted($0, to: width) }.joined(separator: "\n"))
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

    @OptionGroup var output: JSONOutputOptions

    func run() async throws {
        let response: ControlResponse
        do {
            response = try ControlClient(directory: data.directory).send(.remove(attachment: id))
        } catch {
            throw fail(error)
        }
        let removed = if case let .attachment(full) = response { full } else { id }
        output.emit("removed \(removed)", json: ["removed": removed])
    }
}
