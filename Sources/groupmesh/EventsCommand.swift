import ArgumentParser
import Foundation
import GroupMesh

struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Print what happens to the session, one line per event, until interrupted.",
        discussion: """
            Members joining, suspected, dead, left, rejoined, removed; attachments added, complete \
            here, removed, unavailable; key epochs; the session's end. Each event has a sequence \
            number: --after N first prints the events after N that the node still holds (the last \
            1,024), so a client that reconnects misses nothing. Messages are `listen`'s.
            """
    )

    @OptionGroup var data: DataDirectoryOptions

    @Flag(help: "One JSON object per line.")
    var json = false

    // Unconditional: `--after -5` is a number to refuse, not a missing value.
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Print the held events after this sequence number first (0: all held).", valueName: "SEQ"))
    var after: UInt64?

    func run() async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let ended: Bool
        // A node that stops once its session ended stopped as it should: the stream's end is no failure.
        var sessionEnded = false
        do {
            ended = try ControlClient(directory: data.directory).subscribe(.events(after: after)) { response in
                switch response {
                case .subscribed:
                    FileHandle.standardError.write(Data("events: following \(data.directory.path)\n".utf8))
                case let .missed(count):
                    FileHandle.standardError.write(
                        Data("events: \(count) event(s) before these are no longer held\n".utf8))
                case let .event(event):
                    if event.type == .sessionEnded { sessionEnded = true }
                    if json {
                        emit(String(decoding: (try? encoder.encode(event)) ?? Data(), as: UTF8.self))
                    } else {
                        emit(Self.line(event))
                    }
                case let .dropped(count):
                    FileHandle.standardError.write(
                        Data("events: \(count) event(s) dropped while this client was not reading\n".utf8))
                default:
                    break
                }
                return true
            }
        } catch {
            throw fail(error)
        }
        guard !ended else { return }
        guard sessionEnded else { throw fail("the node on \(data.directory.path) stopped", kind: .unavailable) }
        FileHandle.standardError.write(Data("the node on \(data.directory.path) stopped: the session ended\n".utf8))
    }

    /// `2026-11-24T12:00:01.250Z #7 member-joined bob (a1b2c3d4e5f6) 10.0.0.2:7946`.
    static func line(_ event: MeshEvent) -> String {
        var parts = [event.time, "#\(event.seq)", event.type.rawValue]
        if let member = event.member {
            let prefix = String(member.id.prefix(12))
            parts.append(member.name.isEmpty ? prefix : "\(member.name) (\(prefix))")
            if !member.address.isEmpty { parts.append(member.address) }
        }
        if let attachment = event.attachment {
            parts.append(attachment.id)
            if !attachment.content.isEmpty {
                parts.append("content \(attachment.content.prefix(16)), \(ByteCount.text(attachment.size))")
            }
        }
        if let session = event.session { parts.append("session \(session)") }
        return TerminalText.escaped(parts.joined(separator: " "))
    }
}
