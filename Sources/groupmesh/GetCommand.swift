import ArgumentParser
import Dispatch
import Foundation
import GroupMesh

struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Write an attachment to a file, fetching what is missing from the members that hold it.",
        discussion: """
            Without -o the file gets the name it was attached with, in this directory. A file that \
            is there already is kept unless --force is given. Ctrl-C gives the fetch up: nothing is \
            written, and a --lazy node stops fetching it (a node that replicates everything goes on).
            """
    )

    @OptionGroup var data: DataDirectoryOptions

    @Argument(
        help:
            "The attachment: its id or content hash (or a unique prefix of 4 characters or more), or the file name it was attached under."
    )
    var id: String

    @Option(
        name: [.short, .long],
        help: ArgumentHelp(
            "Where to write it; - for standard output (default: the name it was attached with).",
            valueName: "PATH"))
    var output: String?

    @Flag(help: "Replace a file already at the output path.")
    var force = false

    @OptionGroup var result: JSONOutputOptions

    struct Summary: Encodable {
        var id: String
        var path: String
        var size: UInt64
        /// Bytes that had to be fetched (those already here are not counted).
        var fetched: UInt64
        var seconds: Double
        var bytesPerSecond: Double
    }

    func validate() throws {
        if output == "-", result.json {
            throw ValidationError("--json and -o - both want standard output; give -o PATH")
        }
        if output?.isEmpty == true { throw ValidationError("-o needs a path (or - for standard output)") }
    }

    func run() async throws {
        // A reader that goes away (`| head`) is a write error to report, not a signal that
        // kills us before the temporary copy for -o - is removed.
        signal(SIGPIPE, SIG_IGN)
        let (attachment, found) = try named()
        let destination = try self.destination(of: attachment, found: found)
        let display = ProgressDisplay(terminal: isatty(STDERR_FILENO) == 1)
        let closer = ConnectionCloser()
        let before = FileIdentity(path: destination.path)
        let interruption = Interruption.install {
            // The answer came first: the file is in place, and the command ends as it would have
            // (its summary, status 0).
            guard case let .closed(hadConnection) = closer.close() else { return nil }
            // The node sees the connection close, gives the load up and removes what it wrote:
            // waited for (briefly), so that nothing is left behind once the command is gone.
            if hadConnection { destination.waitForPartialFileToGo(within: .seconds(5)) }
            // A file already whole here is copied out to the end: then it is there.
            if !destination.isStandardOutput, let now = FileIdentity(path: destination.path), now != before {
                display.interrupted(destination.shownPath, afterWriting: true)
                return 0
            }
            display.interrupted(destination.shownPath)
            destination.discard()
            return interruptedStatus
        }
        var client = ControlClient(directory: data.directory)
        client.timeout = .seconds(60)
        var finalID: String?
        do {
            // The file is ours, not the node's: made with our umask.
            let mask = umask(0)
            umask(mask)
            let request = ControlRequest.get(
                attachment: attachment, path: destination.path, mode: 0o666 & ~UInt32(mask),
                replace: force || destination.isStandardOutput)
            _ = try client.subscribe(request, closer: closer) { response in
                switch response {
                case let .progress(progress):
                    display.show(progress)
                    return true
                case let .attachment(id):
                    if closer.finished() { finalID = id }
                    return false
                default:
                    return false
                }
            }
        } catch {
            closer.parkIfInterrupted()
            // Stopped gracefully (SIGTERM, leave) while the get ran: said below, as for a node that died.
            guard case let .refused(message, _) = error, message == GroupMeshError.notRunning.description else {
                display.abandon()
                destination.discard()
                // For -o -, the node writes a copy in $TMPDIR first: said in those words.
                if case let .refused(message, kind) = error, let directory = destination.temporaryDirectory,
                    message.contains(directory)
                {
                    let base = (directory as NSString).deletingLastPathComponent
                    throw fail(
                        message.replacingOccurrences(of: destination.path, with: "the copy -o - stages in \(base)")
                            + " (set TMPDIR to a directory with room)", kind: kind)
                }
                throw fail(error)
            }
        }
        closer.parkIfInterrupted()
        guard let finalID else {
            display.abandon()
            destination.discard()
            throw fail(
                "the node on \(data.directory.path) stopped before \(destination.shownPath) was written; "
                    + "run get again once it runs", kind: .unavailable)
        }
        // Written: what is left is the summary, which a signal no longer cuts short; for -o -,
        // the copy to standard output, which Ctrl-C stops as it stops `cat`.
        interruption.disarm(ignoringLaterSignals: !destination.isStandardOutput)
        // Ctrl-C stops the copy to standard output, as it stops `cat`: also one whose handler ran
        // between the answer and the line above. (This runs on a pool thread that blocks
        // signals, so a `raise` would only leave the signal pending.)
        if destination.isStandardOutput, closer.wasClosedAfterAnswer {
            display.abandon()
            destination.discard()
            throw ExitCode(interruptedStatus)
        }
        let summary = display.finish()
        if destination.isStandardOutput {
            do { try destination.copyToStandardOutput() } catch { throw fail(error) }
        }
        let report = Summary(
            id: finalID, path: destination.shownPath, size: summary.size, fetched: summary.fetched,
            seconds: (summary.seconds * 1000).rounded() / 1000,
            bytesPerSecond: summary.seconds > 0 ? (Double(summary.fetched) / summary.seconds).rounded() : 0)
        if result.json {
            emitJSON(report)
        } else {
            FileHandle.standardError.write(Data((summary.line(to: destination.shownPath) + "\n").utf8))
        }
    }

    /// Where the bytes go: `-o`, standard output (through a private temporary file), or the
    /// name the attachment was added with (from `found`, the list's entry when it named one).
    private func destination(of attachment: String, found: StatusReport.AttachmentInfo?) throws -> GetDestination {
        if output == "-" {
            do { return try .standardOutput() } catch { throw fail(error) }
        }
        let path: String
        if let output {
            path = absolutePath(output)
        } else {
            let name = try attachedName(of: found ?? lookedUp(attachment))
            path = absolutePath(name)
        }
        // Said at once, before anything is fetched (the node checks again when it writes: a node
        // of an earlier release would replace the file).
        var info = stat()
        if !force, !data.directory.ownsFile(path), lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG {
            throw fail(GroupMeshError.outputExists(output ?? String(path.split(separator: "/").last ?? "")))
        }
        return GetDestination(path: path, shownPath: output ?? String(path.split(separator: "/").last ?? ""))
    }

    /// What to ask the node for: the argument, as the node resolves it (an id or a content hash,
    /// or a prefix of one), or else the id of the one attachment attached under that file name;
    /// with the list's entry, when one matched (the list is asked for once).
    private func named() throws -> (request: String, found: StatusReport.AttachmentInfo?) {
        let list: [StatusReport.AttachmentInfo]
        do { list = try ControlClient(directory: data.directory).attachments() } catch { throw fail(error) }
        let named = list.filter { info in
            guard let metadata = info.metadata else { return false }
            return AttachmentName.rawName(fromMetadata: metadata) == id
                || AttachmentName.fileName(fromMetadata: metadata) == id
        }
        if let byID = ControlClient.resolve(id, in: list) {
            // A content hash is what its member's bytes make it: a file name of hex digits must
            // not be taken over by an attachment whose hash was made to start so.
            guard named.isEmpty || named.map(\.id) == [byID.id] else {
                throw fail(
                    "'\(id)' starts attachment \(byID.id.prefix(12))'s id or content hash and is the file name of "
                        + "\(named.map { String($0.id.prefix(12)) }.joined(separator: ", ")); give more of the id",
                    kind: .input)
            }
            return (id, byID)
        }
        if named.count > 1 {
            throw fail(
                "'\(id)' is the file name of several attachments: \(named.map { String($0.id.prefix(12)) }.joined(separator: ", ")); give one's id",
                kind: .input)
        }
        // None: the node says why (unknown, too short, or not met a member yet).
        return (named.first?.id ?? id, named.first)
    }

    /// The attachment the node's list names `attachment`, or the one-line reason it names none.
    private func lookedUp(_ attachment: String) throws -> StatusReport.AttachmentInfo {
        do { return try ControlClient(directory: data.directory).attachment(named: attachment) } catch {
            throw fail(error)
        }
    }

    /// The file name `attach` kept in the attachment's metadata, made safe to write here.
    private func attachedName(of info: StatusReport.AttachmentInfo) throws -> String {
        guard let name = AttachmentName.fileName(fromMetadata: info.metadata) else {
            throw fail(
                "attachment \(info.id.prefix(16)) has no file name to write it under; give -o PATH (or -o - for standard output)",
                kind: .input)
        }
        return name
    }
}

/// The file a `get` writes: the path the node is asked to write, and what the user is shown.
struct GetDestination {
    let path: String
    let shownPath: String
    /// For `-o -`: a private directory holding the file until it is copied to standard output.
    var temporaryDirectory: String?

    var isStandardOutput: Bool { temporaryDirectory != nil }

    static func standardOutput() throws(GroupMeshError) -> GetDestination {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/groupmesh-get-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw .store(
                "cannot make a temporary directory in \(base) for -o -: \(String(cString: strerror(errno))); set TMPDIR"
            )
        }
        let directory = String(cString: made)
        return GetDestination(
            path: directory + "/attachment", shownPath: "standard output", temporaryDirectory: directory)
    }

    /// Streams the written file to standard output. The file is removed first (the open
    /// descriptor still reads it), so nothing is left behind however the copy ends.
    func copyToStandardOutput() throws(GroupMeshError) {
        let input = FileHandle(forReadingAtPath: path)
        discard()
        guard let input else { throw .store("cannot read back the attachment from \(path)") }
        var block: Data
        repeat {
            do { block = try input.read(upToCount: 1 << 20) ?? Data() } catch {
                throw .store("cannot read back the attachment from \(path): \(error.localizedDescription)")
            }
            let failure: Int32? = block.withUnsafeBytes { bytes in
                guard let base = bytes.baseAddress else { return nil }
                var offset = 0
                while offset < bytes.count {
                    let written = write(STDOUT_FILENO, base + offset, bytes.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        return errno
                    }
                    offset += written
                }
                return nil
            }
            if let failure {
                throw failure == EPIPE
                    ? .store("standard output was closed before the whole attachment was written to it")
                    : GroupMeshError.fileWrite(failure, "standard output", doing: "write to")
            }
        } while !block.isEmpty
    }

    /// Waits until the node's partial file is gone, or `limit` passed (another `get` of the same
    /// path may own a file by that name: its removal is not ours to do).
    func waitForPartialFileToGo(within limit: Duration) {
        let deadline = ContinuousClock.now + limit
        var info = stat()
        while lstat(path + ".groupmesh-partial", &info) == 0, ContinuousClock.now < deadline {
            usleep(20_000)
        }
    }

    /// What this `get` made of its own goes, with the node's partial file in it (the node
    /// removes that too, once it sees the connection close: whoever comes first).
    func discard() {
        guard let temporaryDirectory else { return }
        unlink(path)
        unlink(path + ".groupmesh-partial")
        rmdir(temporaryDirectory)
    }
}

/// The name `attach` keeps in an attachment's metadata (`{"name": …}`), as a file name that is
/// safe to write in the current directory: another member chose it, so no directories, no
/// `..`, no hidden files, no control characters.
enum AttachmentName {
    static let key = "name"

    static func fileName(fromMetadata metadata: String?) -> String? {
        rawName(fromMetadata: metadata).flatMap(safe)
    }

    /// The name as the member that attached it wrote it (not safe to write under as it is).
    static func rawName(fromMetadata metadata: String?) -> String? {
        guard let metadata, let object = try? JSONSerialization.jsonObject(with: Data(metadata.utf8)) as? [String: Any]
        else { return nil }
        return object[key] as? String
    }

    static func safe(_ raw: String) -> String? {
        // Scalars, not Characters: a "/" followed by a combining mark is one Character, not "/".
        guard let last = raw.unicodeScalars.split(separator: "/", omittingEmptySubsequences: true).last else {
            return nil
        }
        let base = String(String.UnicodeScalarView(last))
        guard last.first != ".", base.utf8.count <= 255,
            // Nothing a terminal would show escaped: controls, bidirectional overrides, line separators.
            TerminalText.escaped(base) == base
        else { return nil }
        return base
    }

    /// `metadata` (JSON text, or nil) with the file's name added: a JSON object without a name
    /// gets one, written in front so the rest stays as the user wrote it; other JSON is kept as is.
    static func adding(_ fileName: String, to metadata: String?) -> String? {
        guard let encoded = try? JSONEncoder().encode(fileName), let name = String(data: encoded, encoding: .utf8)
        else {
            return metadata
        }
        guard let metadata else { return "{\"\(key)\":\(name)}" }
        guard let object = try? JSONSerialization.jsonObject(with: Data(metadata.utf8)) as? [String: Any],
            object[key] == nil, let brace = metadata.firstIndex(of: "{")
        else { return metadata }
        let rest = metadata[metadata.index(after: brace)...]
        let separator = object.isEmpty ? "" : ","
        return String(metadata[..<brace]) + "{\"\(key)\":\(name)" + separator + rest
    }
}

/// SIGINT and SIGTERM during a `get`: the line is finished, what the command made goes, and the
/// command exits 130 (the node, seeing its connection close, gives the fetch up).
extension ConnectionCloser {
    /// The interruption came first and ends the command itself (it exits): what the
    /// subscription saw then is not reported.
    func parkIfInterrupted() {
        while wasInterrupted { sleep(60) }
    }
}

/// Which file is at a path (device and inode), to tell one written meanwhile from one that was there.
struct FileIdentity: Equatable {
    let device: UInt64
    let inode: UInt64

    init?(path: String) {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }
}

final class Interruption: @unchecked Sendable {
    private var sources: [any DispatchSourceSignal] = []

    /// `handler` is fixed before the first signal can arrive, then run on a signal: the process
    /// exits with the status it returns, or goes on when it returns nil.
    static func install(_ handler: @escaping @Sendable () -> Int32?) -> Interruption {
        let interruption = Interruption()
        // One serial queue: a SIGINT and a SIGTERM together run the handler once (it exits).
        let queue = DispatchQueue(label: "groupmesh.interruption")
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            source.setEventHandler {
                if let status = handler() { exit(status) }
            }
            source.resume()
            interruption.sources.append(source)
        }
        return interruption
    }

    /// The answer came: a signal now ends the command the ordinary way, or is ignored.
    func disarm(ignoringLaterSignals ignoring: Bool = false) {
        for source in sources { source.cancel() }
        sources = []
        signal(SIGINT, ignoring ? SIG_IGN : SIG_DFL)
        signal(SIGTERM, ignoring ? SIG_IGN : SIG_DFL)
    }
}
