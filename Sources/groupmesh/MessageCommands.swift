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

    func run() async throws {
        let body: Data
        if let file {
            let attributes = try? FileManager.default.attributesOfItem(atPath: file)
            guard let size = attributes?[.size] as? Int else { throw fail("cannot read \(file)", kind: .input) }
            guard size <= Messenger.maxMessageSize else {
                throw fail(
                    "\(file) is \(size) bytes, over the \(Messenger.maxMessageSize / 1024) KiB message limit; nothing was sent",
                    kind: .input)
            }
            guard let contents = FileManager.default.contents(atPath: file) else {
                throw fail("cannot read \(file)", kind: .input)
            }
            body = contents
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
            FileHandle.standardError.write(Data("sent to \(count) member\(count == 1 ? "" : "s")\n".utf8))
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
