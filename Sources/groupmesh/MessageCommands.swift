import ArgumentParser
import Foundation
import GroupMesh

struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send a message to every member, or to those named with --to.",
        discussion: "Reliable by default: returns once every target acknowledged, and fails naming those that did not."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Flag(help: "Best effort: no acknowledgement, no retransmission.")
    var unreliable = false

    @Option(
        help: ArgumentHelp(
            "A recipient by id, unique id prefix or name (repeatable; default: everyone).", valueName: "MEMBER"))
    var to: [String] = []

    @Option(help: ArgumentHelp("Send the contents of this file instead of TEXT.", valueName: "PATH"))
    var file: String?

    @Argument(help: "The message text.")
    var text: String?

    @OptionGroup var output: JSONOutputOptions

    func validate() throws {
        if (text == nil) == (file == nil) { throw ValidationError("give either TEXT or --file PATH") }
    }

    /// The message in `path` (`-`: standard input), refused with its reason, and before it is
    /// read whole when over the limit. Opened without blocking (a named pipe with no writer would
    /// hold the open for ever); a pipe (`<(cmd)`, `/dev/stdin`) is then read to its end, as `-` is.
    static func contents(of path: String) throws -> Data {
        let limit = Messenger.maxMessageSize
        if path == "-" { return try stream(FileHandle.standardInput, named: "standard input", limit: limit) }
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let reason = errno == ENOENT ? "no such file" : String(cString: strerror(errno))
            throw fail("cannot read \(path): \(reason)", kind: .input)
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw fail("cannot read \(path): \(String(cString: strerror(errno)))") }
        switch info.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFIFO, S_IFCHR, S_IFSOCK:
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
            let data = try stream(handle, named: path, limit: limit)
            // A named pipe nobody has open for writing reads as empty at once: not a message.
            guard !data.isEmpty || info.st_mode & S_IFMT != S_IFIFO else {
                throw fail("\(path) is a pipe nobody wrote to; nothing was sent", kind: .input)
            }
            return data
        default:
            let kind = info.st_mode & S_IFMT == S_IFDIR ? "a directory" : "not a regular file"
            throw fail(
                "\(path) is \(kind); --file sends the contents of a file (or - for standard input)", kind: .input)
        }
        guard info.st_size <= limit else {
            throw fail(
                "\(path) is \(info.st_size) bytes, over the \(limit / 1024) KiB message limit; nothing was sent",
                kind: .input)
        }
        do { return try handle.read(upToCount: limit + 1) ?? Data() } catch {
            throw fail("cannot read \(path): \(error.localizedDescription)", kind: .input)
        }
    }

    /// What `handle` gives until its end, refused past `limit`.
    private static func stream(_ handle: FileHandle, named name: String, limit: Int) throws -> Data {
        let data: Data
        do { data = try handle.read(upToCount: limit + 1) ?? Data() } catch {
            throw fail("cannot read \(name): \(error.localizedDescription)", kind: .input)
        }
        guard data.count <= limit else {
            throw fail("\(name) holds over the \(limit / 1024) KiB message limit; nothing was sent", kind: .input)
        }
        return data
    }

    func run() async throws {
        let body: Data
        if let file {
            body = try Self.contents(of: file)
        } else {
            body = Data((text ?? "").utf8)
        }
        guard body.count <= Messenger.maxMessageSize else {
            throw fail(
                "message is \(body.count) bytes, over the \(Messenger.maxMessageSize / 1024) KiB limit; nothing was sent",
                kind: .input)
        }
        var client = ControlClient(directory: data.directory)
        client.timeout = .seconds(60)
        let response: ControlResponse
        do {
            response = try client.send(.send(body: Array(body), to: to, unreliable: unreliable))
        } catch {
            throw fail(error)
        }
        guard case let .sent(count) = response else { throw unexpectedAnswer("no count of recipients") }
        if output.json {
            emitJSON(["sentTo": count])
        } else {
            // Not an error (Apple's messenger sends to no participants too), but said: a script
            // that goes on after a send to nobody should be able to tell from the line.
            let alone = count == 0 && to.isEmpty ? ": no other member is in the session now" : ""
            FileHandle.standardError.write(Data("sent to \(count) member\(count == 1 ? "" : "s")\(alone)\n".utf8))
        }
    }
}

struct ListenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Print every message this node receives, one per line, until interrupted."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Flag(help: "One JSON object per message: from, fromName, mode, type, and text or base64.")
    var json = false

    func run() async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            // Every message keeps it going: it ends only when the node closes the connection.
            _ = try ControlClient(directory: data.directory).subscribe(.listen) { response in
                if case .subscribed = response {
                    FileHandle.standardError.write(Data("ready\n".utf8))
                    return true
                }
                if case let .dropped(count) = response {
                    FileHandle.standardError.write(
                        Data("\(count) unreliable messages dropped while this listen was behind\n".utf8))
                    return true
                }
                guard case let .message(message) = response else { return true }
                if json {
                    if let line = try? encoder.encode(message) { emit(String(decoding: line, as: UTF8.self)) }
                } else {
                    let from = message.fromName.isEmpty ? String(message.from.prefix(12)) : message.fromName
                    // One line per message, whatever the sender put in it (a newline, escape sequences).
                    emit(
                        TerminalText.escaped(
                            "\(from): \(message.text ?? "<\(message.base64?.count ?? 0) base64 chars>")"))
                }
                return true
            }
        } catch {
            throw fail(error)
        }
        // The node also ends a listen that stopped reading; then it still answers.
        if (try? ControlClient(directory: data.directory).status()) != nil {
            let stall = ControlRequest.listenStallLimit
            throw fail(
                "the node ended this listen: it read nothing for \(stall) (or too slowly for a long while) "
                    + "while messages waited (a paused terminal or pager?); run listen again")
        }
        FileHandle.standardError.write(Data("the node on \(data.directory.path) stopped\n".utf8))
    }
}
