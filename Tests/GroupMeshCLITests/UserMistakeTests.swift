import Foundation
import MeshTestKit
import Testing

/// What a new user gets wrong in the first hour, each refused in one line that says what to do,
/// with nothing lost: one node on loopback, or none.
@Suite("a new user's mistakes", .serialized)
struct UserMistakeTests {
    static func oneLine(_ result: (status: Int32, stdout: String, stderr: String)) -> Bool {
        result.stderr.split(separator: "\n").count == 1
    }

    @Test(
        "attach of the node's own keys, invite -o onto a device, a pipe or a link, send --file of no file: refused in one line; send and ping of itself say what they do"
    )
    func oneNodeRefusesInOneLine() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "solo"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let directory = node.dataDirectory
        let scratch = NodeProcess.makeTemporaryDirectory("mistakes")
        defer { try? FileManager.default.removeItem(atPath: scratch) }

        // Its identity would go to every member; through a link, or a hard link, too.
        try FileManager.default.createSymbolicLink(
            atPath: scratch + "/key", withDestinationPath: directory + "/identity.key")
        #expect(link(directory + "/identity.key", scratch + "/hard") == 0, "\(String(cString: strerror(errno)))")
        for path in [directory + "/identity.key", directory + "/session.key", scratch + "/key", scratch + "/hard"] {
            let attached = try await NodeProcess.runCommand(["attach", "--data-dir", directory, path])
            #expect(
                attached.status == 65 && attached.stderr.contains("one of the node's own files"), "\(attached.stderr)")
            #expect(Self.oneLine(attached), "\(attached.stderr)")
        }
        let listed = try await NodeProcess.runCommand(["attachments", "--data-dir", directory, "--json"])
        #expect(!listed.stdout.contains("identity.key"), "\(listed.stdout)")

        // invite -o: a pipe would hold the command forever, a device would be made 600.
        #expect(mkfifo(scratch + "/pipe", 0o600) == 0)
        try FileManager.default.createSymbolicLink(atPath: scratch + "/link", withDestinationPath: scratch + "/target")
        var refusals = [
            (scratch + "/pipe", "a named pipe"), (scratch + "/link", "a symbolic link"), (scratch, "a directory"),
        ]
        // A null device of its own (1, 3; as root only): its mode must stay as it is.
        var device = stat()
        if geteuid() == 0, mknod(scratch + "/null", S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0 {
            refusals.append((scratch + "/null", "a device"))
            _ = lstat(scratch + "/null", &device)
        }
        for (path, kind) in refusals {
            let written = try await NodeProcess.runCommand(
                ["invite", "--data-dir", directory, "-o", path], timeout: .seconds(20))
            #expect(written.status != 0 && written.stderr.contains("is \(kind)"), "\(written.stderr)")
            #expect(Self.oneLine(written), "\(written.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: scratch + "/target"), "written through a link")
        var after = stat()
        #expect(lstat(scratch + "/null", &after) != 0 || after.st_mode == device.st_mode, "the device's mode changed")
        let printed = try await NodeProcess.runCommand(["invite", "--data-dir", directory, "-o", "-"])
        #expect(printed.status == 0 && printed.stdout.hasPrefix("gm1"), "\(printed.stdout) \(printed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: "-"), "invite -o - wrote a file named -")

        for (path, reason) in [(scratch, "is a directory"), (scratch + "/missing", "no such file")] {
            let sent = try await NodeProcess.runCommand(["send", "--data-dir", directory, "--file", path])
            #expect(sent.status == 65 && sent.stderr.contains(reason), "\(sent.stderr)")
            #expect(Self.oneLine(sent), "\(sent.stderr)")
        }

        // This node among the targets is skipped (CLI.md), by name, id or prefix.
        let id = try await node.status().`self`.id
        for name in ["solo", id, String(id.prefix(8))] {
            let toSelf = try await NodeProcess.runCommand(["send", "--data-dir", directory, "--to", name, "hi"])
            #expect(toSelf.status == 0 && toSelf.stderr.contains("sent to 0 members"), "\(name): \(toSelf.stderr)")
        }
        let ping = try await NodeProcess.runCommand(["ping", "--data-dir", directory, "solo"])
        #expect(ping.status == 65 && ping.stderr.contains("cannot ping this node itself"), "\(ping.stderr)")
    }

    @Test(
        "get names an attachment by its content hash without -o; under 4 characters is too short, whatever files are here"
    )
    func getNamesAttachmentsAsTheNodeDoes() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let directory = node.dataDirectory
        // A name starting with a dot is not kept: get then needs -o, which it says once it found it.
        let file = directory + "/.hidden"
        try Data("hidden bytes".utf8).write(to: URL(fileURLWithPath: file))
        let attached = try await NodeProcess.runCommand(["attach", "--data-dir", directory, file])
        #expect(attached.status == 0, "\(attached.stderr)")
        #expect(attached.stderr.contains("attached without its file name"), "\(attached.stderr)")
        let listed = try await NodeProcess.runCommand(["attachments", "--data-dir", directory, "--json"])
        let key = try #require(listed.stdout.range(of: "\"content\":\""), "\(listed.stdout)")
        let content = listed.stdout[key.upperBound...].prefix(64)
        let byContent = try await NodeProcess.runCommand(["get", "--data-dir", directory, String(content.prefix(12))])
        #expect(byContent.status == 65 && byContent.stderr.contains("has no file name"), "\(byContent.stderr)")
        let short = try await NodeProcess.runCommand(["get", "--data-dir", directory, String(content.prefix(3))])
        #expect(short.status == 65 && short.stderr.contains("too short"), "\(short.stderr)")
        for result in [byContent, short] { #expect(Self.oneLine(result), "\(result.stderr)") }

        // By the file name it was attached under, when one attachment has it; several: refused.
        try FileManager.default.createDirectory(atPath: directory + "/other", withIntermediateDirectories: true)
        try Data("first notes".utf8).write(to: URL(fileURLWithPath: directory + "/notes.txt"))
        #expect(
            try await NodeProcess.runCommand(["attach", "--data-dir", directory, directory + "/notes.txt"]).status == 0)
        let out = directory + "/fetched.txt"
        let byName = try await NodeProcess.runCommand(["get", "--data-dir", directory, "notes.txt", "-o", out])
        #expect(byName.status == 0, "\(byName.stderr)")
        #expect(FileManager.default.contents(atPath: out) == Data("first notes".utf8))
        try Data("other notes".utf8).write(to: URL(fileURLWithPath: directory + "/other/notes.txt"))
        #expect(
            try await NodeProcess.runCommand(["attach", "--data-dir", directory, directory + "/other/notes.txt"]).status
                == 0)
        let twice = try await NodeProcess.runCommand([
            "get", "--data-dir", directory, "notes.txt", "-o", out, "--force",
        ])
        #expect(
            twice.status == 65 && twice.stderr.contains("is the file name of several attachments"), "\(twice.stderr)")
        #expect(Self.oneLine(twice), "\(twice.stderr)")
    }

    @Test(
        "Ctrl-C while get copies out an attachment already here: nothing written (130), or the file whole (0), and it says which"
    )
    func interruptedCopyOutSaysWhatItLeft() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let directory = node.dataDirectory
        var bytes = Data(count: 32 << 20)
        bytes.replaceSubrange(0..<8, with: Data("copy-out".utf8))
        try bytes.write(to: URL(fileURLWithPath: directory + "/big.bin"))
        let attached = try await NodeProcess.runCommand(["attach", "--data-dir", directory, directory + "/big.bin"])
        #expect(attached.status == 0, "\(attached.stderr)")
        // Interrupted as soon as the copy out began: before or after the node renamed it into place.
        for attempt in 0..<3 {
            let out = directory + "/out-\(attempt).bin"
            let get = try NodeProcess(
                ["get", "big.bin", "-o", out], dataDirectory: directory, ownsDataDirectory: false)
            try await waitUntil("the copy out begins", timeout: .seconds(30)) {
                FileManager.default.fileExists(atPath: out + ".groupmesh-partial")
                    || FileManager.default.fileExists(atPath: out) || get.terminationStatus != nil
            }
            get.signal(SIGINT)
            let status = try await get.waitForExit(timeout: .seconds(30))
            #expect(!FileManager.default.fileExists(atPath: out + ".groupmesh-partial"), "\(get.stderr)")
            if status == 130 {
                #expect(!FileManager.default.fileExists(atPath: out), "said nothing was written: \(get.stderr)")
                #expect(get.stderr.contains("interrupted: nothing was written to \(out)"), "\(get.stderr)")
            } else {
                #expect(status == 0, "\(get.stderr)")
                #expect(FileManager.default.contents(atPath: out) == bytes, "\(get.stderr)")
                #expect(!get.stderr.contains("nothing was written"), "\(get.stderr)")
            }
        }
    }

    @Test(
        "run refuses in one line: --join without an invite into a new dir, an empty or overlong name, an address no interface has or none can reach, a data dir that is a file"
    )
    func runRefusesInOneLine() async throws {
        let scratch = NodeProcess.makeTemporaryDirectory("mistakes")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let file = scratch + "/file"
        try Data("not a dir".utf8).write(to: URL(fileURLWithPath: file))
        let cases: [([String], String)] = [
            // First: the dir must hold no session yet (a later case may make one before it fails).
            (["--join", "127.0.0.1:47001"], "--join 127.0.0.1:47001 reaches a session only with its invite"),
            (["--name", ""], "--name is empty"),
            (["--name", String(repeating: "é", count: 33)], "a name holds at most 64"),
            (["--listen", "192.0.2.1:0"], "no interface of this machine has that address"),
            (["--advertise", "0.0.0.0:7946"], "is a wildcard"),
            (["--advertise", "198.51.100.7:0"], "has port 0"),
            (["--data-dir", file], "is not a directory"),
            (["--data-dir", file, "--join", "127.0.0.1:9"], "is not a directory"),
        ]
        for (arguments, expected) in cases {
            let data = arguments.contains("--data-dir") ? [] : ["--data-dir", scratch + "/dir"]
            let listen = arguments.contains("--listen") ? [] : ["--listen", "127.0.0.1:0"]
            let run = try await NodeProcess.runCommand(["run"] + listen + data + arguments)
            #expect(run.status != 0 && run.stderr.contains(expected), "\(arguments): \(run.stderr)")
            #expect(Self.oneLine(run), "\(arguments): \(run.stderr)")
        }
    }

    @Test(
        "a command that does not exist, also after help, and options before the command: usage status, one line that says what to type"
    )
    func commandLineMistakesSayWhatToType() async throws {
        let commands = "the commands are run, status,"
        let cases: [([String], String)] = [
            (["help", "stauts"], "no command 'stauts'; \(commands)"),
            (["stauts"], "no command 'stauts'; \(commands)"),
            (
                ["--data-dir", "/tmp/a dir", "status", "--json"],
                "options follow the command: groupmesh status --data-dir '/tmp/a dir' --json (see groupmesh status --help)"
            ),
            (["help", "\u{1B}[2J"], "no command '\\e[2J'"),
            // A value that names a command is not the command; `--` ends the options.
            (
                ["--name", "status", "run"],
                "options follow the command: groupmesh run --name status (see groupmesh run --help)"
            ),
            (["show", "status"], "no command 'show'; \(commands)"),
            (
                ["--data-dir", "/tmp/d", "help", "status"],
                "options follow the command, and help takes none: groupmesh help status (see groupmesh status --help)"
            ),
            (
                ["--name", "help", "run"],
                "options follow the command: groupmesh run --name help (see groupmesh run --help)"
            ),
        ]
        for (arguments, expected) in cases {
            let result = try await NodeProcess.runCommand(arguments)
            #expect(result.status == 64 && result.stderr.contains(expected), "\(arguments): \(result.stderr)")
            if expected.hasPrefix("no command") {
                #expect(result.stderr.hasSuffix("(see groupmesh --help)\n"), "\(arguments): \(result.stderr)")
            }
            #expect(Self.oneLine(result), "\(arguments): \(result.stderr)")
        }
        // What is no mistake: help of a command, and the bare command (the overview).
        for arguments in [["help", "status"], ["help", "help"], []] {
            let help = try await NodeProcess.runCommand(arguments)
            #expect(help.status == 0 && help.stdout.contains("OVERVIEW"), "\(arguments): \(help.stderr)")
        }
    }

    @Test(
        "send --file - sends standard input; get -o - into a full disk fails in one line, and the node keeps the attachment"
    )
    func standardStreams() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "solo"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let directory = node.dataDirectory
        let scratch = NodeProcess.makeTemporaryDirectory("streams")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let (binary, dir) = (quoted(NodeProcess.executable), quoted(directory))

        let sent = try await FirstHourTests.shell(
            "printf 'from stdin' | exec \(binary) send --data-dir \(dir) --file -")
        #expect(
            sent.status == 0 && sent.stderr.contains("sent to 0 members: no other member is in the session now"),
            "\(sent.stderr)")
        let over = try await FirstHourTests.shell(
            "head -c 300000 /dev/zero | exec \(binary) send --data-dir \(dir) --file -")
        #expect(over.status == 65 && over.stderr.contains("standard input holds over"), "\(over.stderr)")
        #expect(Self.oneLine(over), "\(over.stderr)")
        // A pipe by name is read as `-` is; a named pipe nobody writes to is refused, not sent empty.
        let piped = try await FirstHourTests.shell(
            "printf 'through a pipe' | exec \(binary) send --data-dir \(dir) --file /dev/stdin")
        #expect(piped.status == 0 && piped.stderr.contains("sent to 0 members"), "\(piped.stderr)")
        let fifo = scratch + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        let unwritten = try await NodeProcess.runCommand(["send", "--data-dir", directory, "--file", fifo])
        #expect(unwritten.status == 65 && unwritten.stderr.contains("a pipe nobody wrote to"), "\(unwritten.stderr)")

        var device = stat()
        guard stat("/dev/full", &device) == 0, device.st_mode & S_IFMT == S_IFCHR else {
            print("skipped: no /dev/full to stand for a full disk")
            return
        }
        let (path, bytes) = try FirstHourTests.randomFile(scratch, name: "file.bin", size: 300_000, seed: 7)
        let attached = try await NodeProcess.runCommand(["attach", "--data-dir", directory, path])
        try #require(attached.status == 0, "\(attached.stderr)")
        let id = attached.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let full = try await FirstHourTests.shell("exec \(binary) get --data-dir \(dir) \(id) -o - > /dev/full")
        #expect(full.status != 0 && full.stderr.contains("standard output"), "\(full.stderr)")
        #expect(Self.oneLine(full), "\(full.stderr)")
        // Nothing lost: the attachment is still whole here.
        let copy = scratch + "/copy.bin"
        let got = try await NodeProcess.runCommand(["get", "--data-dir", directory, id, "-o", copy])
        #expect(got.status == 0, "\(got.stderr)")
        #expect((try? Data(contentsOf: URL(fileURLWithPath: copy))) == bytes)
    }

    @Test("run on a port under 1024 without the right to: one line that says what it needs")
    func privilegedPortIsRefusedInOneLine() async throws {
        let threshold = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding: .utf8))
            .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), let threshold,
            threshold > 80
        else {
            print("skipped: needs root and setpriv to run a node as nobody, and port 80 privileged")
            return
        }
        // A copy of the binary nobody can reach, in a dir nobody may write.
        let scratch = NodeProcess.makeTemporaryDirectory("privileged")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let binary = scratch + "/groupmesh"
        // Copied by cp(1): a descriptor open for writing in this process, inherited by a child
        // another test starts meanwhile, would make the exec fail (ETXTBSY).
        let copied = try ChildProcess.run("/bin/cp", [NodeProcess.executable, binary])
        try #require(copied.status == 0, "\(copied.stderr)")
        #expect(chmod(scratch, 0o755) == 0 && chmod(binary, 0o755) == 0)
        #expect(mkdir(scratch + "/data", 0o700) == 0 && chown(scratch + "/data", 65534, 65534) == 0)
        let run = try ChildProcess.run(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", binary, "run", "--listen", "127.0.0.1:80",
                "--data-dir", scratch + "/data/node",
            ], timeout: .seconds(30))
        if run.stderr.contains("error while loading shared libraries") || run.stderr.contains("Permission denied") {
            print("skipped: nobody cannot run the binary here: \(run.stderr)")
            return
        }
        #expect(
            run.status != 0 && run.stderr.contains("cannot listen on 127.0.0.1:80: permission denied"), "\(run.stderr)")
        #expect(run.stderr.contains("CAP_NET_BIND_SERVICE"), "\(run.stderr)")
        #expect(Self.oneLine(run), "\(run.stderr)")
    }

    @Test("a restart without --name keeps the name the node was given; a new --name replaces it")
    func nameOutlivesARestart() async throws {
        let directory = NodeProcess.makeTemporaryDirectory("named")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (arguments, expected) in [(["--name", "party🎉"], "party🎉"), ([], "party🎉"), (["--name", "kim"], "kim")] {
            let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"] + arguments, dataDirectory: directory)
            _ = try await node.waitForLine(prefix: "listening:")
            let name = try await node.status().`self`.name
            await node.cleanUp(removeData: false)
            #expect(name == expected, "\(arguments)")
        }
    }

    @Test("a members.json that cannot be read is kept aside and said, not written over")
    func damagedMembersFileIsKept() async throws {
        let directory = NodeProcess.makeTemporaryDirectory()
        let garbage = "{\"members\": [truncated"
        try Data(garbage.utf8).write(to: URL(fileURLWithPath: directory + "/members.json"))
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"], dataDirectory: directory)
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let kept = try String(contentsOfFile: directory + "/members.json.damaged", encoding: .utf8)
        #expect(kept == garbage)
        #expect(node.stderr.contains("members.json cannot be read; kept as"), "\(node.stderr)")
    }
}
