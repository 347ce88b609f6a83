import ArgumentParser
import Foundation
import GroupMesh

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the members, their state and round-trip time, attachments and counters."
    )

    @OptionGroup var data: DataDirectoryOptions

    @Flag(help: "Print one JSON object instead of tables.")
    var json = false

    @Flag(help: "Redraw every second until interrupted (into a pipe: a snapshot every second).")
    var watch = false

    func run() async throws {
        let client = ControlClient(directory: data.directory)
        var shown = false
        repeat {
            let report: StatusReport
            do {
                guard case let .status(status) = try client.send(.status) else {
                    throw unexpectedAnswer("no status")
                }
                report = status
            } catch let error as GroupMeshError {
                throw fail(error)
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                emit(String(decoding: try encoder.encode(report), as: UTF8.self))
            } else {
                // The clear goes with the table, in one write: `print` would leave it in stdio's buffer.
                // Into a pipe or a file, snapshots follow each other, a blank line apart, unescaped.
                let before = !watch ? "" : isatty(STDOUT_FILENO) == 1 ? "\u{1B}[H\u{1B}[2J" : shown ? "\n" : ""
                emit(before + StatusTable.render(report, width: Terminal.width))
                shown = true
            }
            if watch { try await Task.sleep(for: .seconds(1)) }
        } while watch
    }
}

struct InviteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invite",
        abstract: "Print an invite token for this node's session."
    )

    @OptionGroup var data: DataDirectoryOptions
    @OptionGroup var output: JSONOutputOptions

    @Option(
        name: [.customShort("o"), .customLong("output")],
        help: ArgumentHelp(
            "Write it to this file, readable by you alone (as --invite-file wants it); - is standard output.",
            valueName: "PATH"))
    var file: String?

    func run() async throws {
        do {
            guard case let .invite(invite) = try ControlClient(directory: data.directory).send(.invite) else {
                throw unexpectedAnswer("no invite")
            }
            if let file, file != "-" {
                try Self.writePrivately(invite + "\n", to: file)
                return output.emit(
                    "wrote the invite to \(file) (mode 600: it holds the session's secret)", json: ["file": file])
            }
            output.emit(invite, json: ["invite": invite])
        } catch let error as GroupMeshError {
            throw fail(error)
        }
    }
}

extension InviteCommand {
    /// Made 0600 (an existing file is made so before it is written).
    /// Writes `text` to `path`, mode 600: a new file, or a regular file replaced. Anything else
    /// there is refused before it is opened: made 600, a device would be closed to other users,
    /// and a pipe with no reader would hold the command forever.
    static func writePrivately(_ text: String, to path: String) throws(GroupMeshError) {
        var info = stat()
        if lstat(path, &info) == 0, let kind = Self.notRegular(info) {
            throw .refused(
                "\(path) is \(kind); the invite goes only to a regular file, and nothing was written", kind: .input)
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .keyFile("cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        // Put there since it was looked at.
        guard fstat(fd, &info) == 0, Self.notRegular(info) == nil else {
            throw .refused(
                "\(path) is not a regular file; the invite goes only to a regular file, and nothing was written",
                kind: .input)
        }
        let bytes = Array(text.utf8)
        guard fchmod(fd, 0o600) == 0, bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count
        else {
            throw .keyFile("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }

    private static func notRegular(_ info: stat) -> String? {
        switch info.st_mode & S_IFMT {
        case S_IFREG: return nil
        case S_IFLNK: return "a symbolic link (give the file it points to)"
        case S_IFDIR: return "a directory (give the path of a file to write)"
        case S_IFCHR, S_IFBLK: return "a device"
        case S_IFIFO: return "a named pipe"
        case S_IFSOCK: return "a socket"
        default: return "not a regular file"
        }
    }
}

struct LeaveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leave",
        abstract: "Leave the session gracefully; the node then exits.",
        discussion: """
            Before it goes, the node makes sure another live member holds every attachment that \
            only it holds whole (members are asked to fetch them; the wait grows with the bytes, \
            10 s plus 1 s per 2 MiB at most). Progress goes to stderr.
            """
    )

    @OptionGroup var data: DataDirectoryOptions

    @Flag(
        name: .long,
        help: "Leave at once, without handing over attachments only this node holds (they become unavailable).")
    var now = false

    @OptionGroup var output: JSONOutputOptions

    func run() async throws {
        var summary: LeaveSummary?
        var lastShown = ""
        do {
            try ControlClient(directory: data.directory).subscribe(.leave(now: now)) { response in
                switch response {
                case let .leaving(info):
                    // Nothing only this node holds: nothing to wait for, nothing to say.
                    let line = info.attachments.isEmpty ? lastShown : Self.progress(info)
                    if line != lastShown {
                        FileHandle.standardError.write(Data("\(line)\n".utf8))
                        lastShown = line
                    }
                    return true
                case let .left(info):
                    summary = info
                    return false
                default:
                    return false
                }
            }
        } catch {
            throw fail(error)
        }
        guard let summary else {
            throw fail(
                "the node on \(data.directory.path) stopped before its leave was complete; see groupmesh status",
                kind: .unavailable)
        }
        output.emit(Self.describe(summary), json: summary)
    }

    static func describe(_ summary: LeaveSummary) -> String {
        let ids = summary.unavailable.map { String($0.prefix(16)) }.joined(separator: ", ")
        if summary.unavailable.isEmpty {
            return summary.handedOver.isEmpty
                ? "left" : "left after other members took \(summary.handedOver.count) attachment(s) only this node held"
        }
        if summary.alone {
            return
                "left; no other member is alive, so \(summary.unavailable.count) attachment(s) only this node held are unavailable until it returns: \(ids)"
        }
        return
            "left; \(summary.unavailable.count) attachment(s) only this node held are unavailable until it returns: \(ids)"
    }

    /// The handover under way, as `leave` and `status` print it.
    static func progress(_ info: StatusReport.LeavingInfo) -> String {
        let mebibytes = String(format: "%.1f", Double(info.bytes) / 1_048_576)
        return
            "leaving: waiting for \(info.askedMembers.count) member(s) to take \(info.attachments.count) attachment(s) "
            + "only this node holds (\(mebibytes) MiB); leaving anyway in \(Int(info.secondsLeft.rounded(.up))) s"
    }
}

struct EndCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "end",
        abstract: "End the session for every member; every node leaves and exits.",
        discussion: """
            Every live member is told (and tells the members it knows), records the end in its \
            data dir, and exits. The session's invites stop working: a data dir whose session \
            ended refuses to start. Attachments are not handed over: the session is over.
            """
    )

    @OptionGroup var data: DataDirectoryOptions
    @OptionGroup var output: JSONOutputOptions

    func run() async throws {
        let client = ControlClient(directory: data.directory)
        // Who is told now: the live members; one away learns it later, from a member that knows.
        let live = (try? client.status()).map {
            $0.members.dropFirst().filter { !["dead", "left", StatusReport.removedState].contains($0.state) }.count
        }
        do {
            _ = try client.send(.end)
        } catch {
            throw fail(error)
        }
        let line =
            switch live {
            case 0?:
                "ended the session; no other member is live now: one that comes back learns it from a data dir "
                    + "of the session started again"
            case let count?: "ended the session for every member: \(count) live now, told"
            case nil: "ended the session for every member"
            }
        output.emit(line, json: ["ended": true])
    }
}

/// Human tables for `status`, cut to the terminal's width.
enum StatusTable {
    /// `status`'s line for a member told it was left out of a rotation (`leftOutBy`).
    static func leftOutLine(by author: String) -> String {
        "left out of the session's new key (by \(TerminalText.escaped(String(author.prefix(12))))): a member was "
            + "removed while this node was away; only a new invite lets it back in"
    }

    /// `status`'s line for the members this node lost touch with and still looks for.
    /// Lost members named in the line; the rest are counted.
    static let shownLostMembers = 8

    static func lostLine(_ lost: [StatusReport.LostMemberInfo]) -> String {
        let shown = lost.prefix(shownLostMembers).map { member in
            let name = member.name.isEmpty ? String(member.id.prefix(12)) : "\(member.name) \(member.id.prefix(12))"
            let place = member.addresses.first.map { " at \($0)" } ?? ""
            return TerminalText.escaped(name + place) + " (lost \(ProgressDisplay.duration(member.lostSeconds)) ago)"
        }
        let rest = lost.count - shown.count
        return "lost touch with \(lost.count) member\(lost.count == 1 ? "" : "s"), asked again until found: "
            + shown.joined(separator: ", ") + (rest > 0 ? " and \(rest) more" : "")
    }

    static func render(_ report: StatusReport, width: Int?) -> String {
        var lines: [String] = []
        let me = report.`self`
        lines.append(
            TerminalText.escaped(
                "node \(me.name) \(me.id.prefix(12)) at \(me.address)  session \(me.session)  profile \(me.profile)"))
        lines.append(
            TerminalText.escaped(
                "nat \(me.nat)" + (me.reflexiveAddress.map { ", public address \($0)" } ?? "")
                    + "  candidates \(me.candidates.joined(separator: ", "))"))
        if let lan = report.lanDiscovery {
            lines.append(
                TerminalText.escaped(
                    "lan discovery on \(lan.interfaces.joined(separator: ", ")): "
                        + "\(lan.announcementsHeard) announcements heard, \(lan.membersMet) members met"))
        }
        if let mapping = report.portMapping { lines.append(TerminalText.escaped(mapping.line)) }
        if let storage = report.storage {
            let free = storage.freeBytes.map { "\(ByteCount.text($0)) free" } ?? "free space unknown"
            lines.append(TerminalText.escaped("data dir \(storage.dataDirectory): \(free)"))
        }
        lines += traversalLines(report.traversal)
        if let joining = report.joining {
            lines.append(
                JoinNotice.statusLine(addresses: joining.addresses.count, seconds: joining.since, state: joining.state)
                    + ": " + JoinNotice.addressList(joining.addresses))
        }
        if let author = report.leftOutBy { lines.append(leftOutLine(by: author)) }
        if let lost = report.lost, !lost.isEmpty { lines.append(lostLine(lost)) }
        lines.append("")
        let rows = report.members.map { member in
            [
                String(member.id.prefix(12)), member.name, member.address, member.state, "\(member.incarnation)",
                member.rttMs.map { String(format: "%.2f", $0) } ?? "-",
                pathColumn(member, in: report), member.protocol.map { "\($0)" } ?? "-",
                introducerColumn(member, in: report),
            ]
        }
        lines += table(
            header: ["ID", "NAME", "ADDRESS", "STATE", "INC", "RTT ms", "PATH", "PROTO", "BY"], rows: rows
        )
        if !report.attachments.isEmpty {
            lines.append("")
            let rows = report.attachments.map { a in
                [
                    a.id, String(a.content.prefix(16)), ByteCount.text(a.size), "\(a.chunksHave)/\(a.chunks)",
                    "\(a.holders)",
                    a.state,
                ]
            }
            lines += table(
                header: ["ATTACHMENT", "CONTENT", "SIZE", "CHUNKS", "HOLDERS", "STATE"], rows: rows)
        }
        if let leaving = report.leaving {
            lines.append("")
            lines.append(LeaveCommand.progress(leaving))
        }
        let c = report.counters
        let dropped = c.dropped.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        lines.append("")
        lines.append(
            "datagrams sent \(c.datagramsSent) (\(ByteCount.text(c.bytesSent))), received \(c.datagramsReceived) "
                + "(\(ByteCount.text(c.bytesReceived)))"
        )
        lines.append("dropped: \(dropped)")
        // Loss the counters above cannot see: the kernel's, before the node read anything.
        if let kernel = c.kernelReceiveDrops, kernel > 0 {
            lines.append("dropped by the kernel (receive buffer full): \(kernel)")
        }
        if c.messagesDroppedForSlowReaders > 0 {
            lines.append("messages not given to slow readers (messages(of:)): \(c.messagesDroppedForSlowReaders)")
        }
        let relay = c.relay
        if relay.forwardedDatagrams + relay.droppedOverRate + relay.refused > 0 || !relay.enabled {
            lines.append(
                "relaying for others: " + (relay.enabled ? "" : "off (--no-relay), ")
                    + "forwarded \(relay.forwardedDatagrams) sealed datagrams (\(ByteCount.text(relay.forwardedBytes))), "
                    + "dropped over rate \(relay.droppedOverRate), refused \(relay.refused)")
        }
        if relay.enabled, let line = Self.relayBudgetLine(relay) { lines.append(line) }
        if let birthday = c.birthday, birthday.roundsTried > 0 {
            lines.append(
                "birthday rounds (symmetric NAT): tried \(birthday.roundsTried), "
                    + "succeeded \(birthday.roundsSucceeded), probes sent \(birthday.probesSent), "
                    + "sockets opened \(birthday.socketsOpened) "
                    + "(failed \(birthday.socketsFailed)), hit \(birthday.socketsHit)")
        }
        return lines.map { Terminal.fitted($0, to: width) }.joined(separator: "\n")
    }

    /// `relay budget: 16.0 MiB/s (from the 8.0 MiB/s measured on our links), 16.0 MiB/s per pair
    /// (1 active); CPU 38.0 ms per MiB carried`.
    static func relayBudgetLine(_ relay: StatusReport.RelayInfo) -> String? {
        guard let budget = relay.budget, let perPair = relay.budgetPerPair else { return nil }
        let rate = RelayBudget.format(bytesPerSecond:)
        var line = "relay budget: \(rate(budget))"
        if let setting = relay.budgetSetting {
            line += " (--relay-budget \(rate(setting)))"
        } else if let capacity = relay.measuredCapacity {
            line +=
                capacity > 0
                ? " (from the \(rate(capacity)) measured on our links)"
                : " (nothing measured yet: the floor)"
        }
        if relay.yielding == true, let own = relay.ownTransferRate {
            line += ", yielding to our own transfers at \(rate(own))"
        }
        line += ", \(rate(perPair)) per pair (\(relay.activePairs ?? 0) active)"
        if let cpu = relay.cpuMillisecondsPerMiB { line += String(format: "; CPU %.1f ms per MiB carried", cpu) }
        return line
    }

    /// How we reach a member, in a few words: `direct`, `punched ADDRESS`, `relayed via NAME`,
    /// `unreachable` (the table escapes it: the relay's name is its own choice).
    static func pathColumn(_ member: StatusReport.MemberInfo, in report: StatusReport) -> String {
        if member.path.isEmpty { return "-" }
        if member.path == "relayed", let relay = member.relay {
            return "relayed via \(shortName(of: relay, in: report))"
        }
        return member.pathAddress == member.address || member.pathAddress.isEmpty
            ? member.path : "\(member.path) \(member.pathAddress)"
    }

    /// Who let the member in: named as the node knows it, also once it has left.
    static func introducerColumn(_ member: StatusReport.MemberInfo, in report: StatusReport) -> String {
        guard let door = member.introducedBy else { return "-" }
        if !report.members.contains(where: { $0.id == door }), let name = member.introducedByName, !name.isEmpty {
            return name
        }
        return shortName(of: door, in: report)
    }

    /// A member named in another's row: its name, or its id's start when unnamed or not in the view.
    static func shortName(of id: String, in report: StatusReport) -> String {
        let named = report.members.first { $0.id == id }
        return named.map { $0.name.isEmpty ? String($0.id.prefix(12)) : $0.name } ?? String(id.prefix(12))
    }

    /// Every cell is escaped: names, addresses and metadata come from other members.
    static func table(header: [String], rows: [[String]]) -> [String] {
        let rows = rows.map { $0.map(TerminalText.escaped) }
        let widths = header.indices.map { column in
            ([header[column]] + rows.map { $0[column] }).map(TerminalText.columns).max() ?? 0
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { TerminalText.padded($1, to: widths[$0]) }
                .joined(separator: "  ")
                .trimmingCharacters(in: .whitespaces)
        }
        return [line(header)] + rows.map(line)
    }
}

enum Terminal {
    /// The columns of the terminal on stdout (else `$COLUMNS`); nil into a pipe or a file, where
    /// nothing is cut (a script that greps a table gets whole lines).
    static var width: Int? {
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        if let columns = ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init), columns > 0 {
            return columns
        }
        return nil
    }

    /// `line` within `width` columns, its cut marked with `…`; whole without a width.
    static func fitted(_ line: String, to width: Int?) -> String {
        guard let width, TerminalText.columns(line) > width else { return line }
        return TerminalText.cut(line, to: max(0, width - 1)) + "…"
    }
}
