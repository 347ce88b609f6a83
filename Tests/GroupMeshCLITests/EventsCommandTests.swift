import Foundation
import GroupMesh
import MeshTestKit
import Testing

/// `groupmesh events` and `run --event-handler` between real processes.
@Suite("events and event handlers with real processes", .serialized)
struct EventsCommandTests {
    static func decode(_ text: String) -> [MeshEvent] {
        text.split(separator: "\n").compactMap { try? JSONDecoder().decode(MeshEvent.self, from: Data($0.utf8)) }
    }

    /// Command lines (NULs as spaces) of the processes whose command line holds `text`.
    static func processes(containing text: String) -> [String] {
        let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).filter {
            $0.allSatisfy(\.isNumber)
        }
        return pids.compactMap { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return nil }
            let line = String(decoding: data.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return line.contains(text) ? "\(pid): \(line)" : nil
        }
    }

    /// `expected` appears in `events` in this order (other events may come between).
    static func inOrder(_ expected: [(MeshEvent.Kind, String)], in events: [MeshEvent]) -> Bool {
        var rest = events[...]
        for (kind, name) in expected {
            guard let index = rest.firstIndex(where: { $0.type == kind && ($0.member?.name ?? "") == name }) else {
                return false
            }
            rest = rest[(index + 1)...]
        }
        return true
    }

    @Test(
        "events --json: join, attach, complete, remove, SIGKILL→dead, leave, in order; handlers get the same; --after resumes"
    )
    func eventsAndHandlers() async throws {
        let scratch = NodeProcess.makeTemporaryDirectory("events")
        let all = scratch + "/all.jsonl", joined = scratch + "/joined.txt"
        let typed = "member-joined=echo \"$GROUPMESH_EVENT $GROUPMESH_MEMBER_NAME $GROUPMESH_EVENT_SEQ\" >> '\(joined)'"
        let handlers = ["--event-handler", "cat >> '\(all)'", "--event-handler", typed]
        try await withProcessMesh(names: ["alice"], argumentsByName: ["alice": handlers]) { mesh in
            let alice = try mesh["alice"]
            let follower = try mesh.client(["events", "--json"], of: "alice")
            _ = try await follower.waitForLine(prefix: "events: following", onStderr: true)

            let bob = try mesh.join("bob")
            let carol = try mesh.join("carol")
            try await mesh.waitUntilAllSee(["alice", "bob", "carol"])
            let file = scratch + "/file.bin"
            try Data(repeating: 3, count: 300_000).write(to: URL(fileURLWithPath: file))
            let attach = try await NodeProcess.runCommand(["attach", "--data-dir", alice.dataDirectory, file])
            let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let remove = try await NodeProcess.runCommand(["remove", "--data-dir", alice.dataDirectory, id])
            #expect(attach.status == 0 && remove.status == 0, "\(attach.stderr) \(remove.stderr)")
            carol.signal(SIGKILL)
            try await alice.waitForStatus(timeout: .seconds(30), "carol dead") {
                $0.members.contains { $0.name == "carol" && $0.state == "dead" }
            }
            let leave = try await NodeProcess.runCommand(["leave", "--data-dir", bob.dataDirectory])
            #expect(leave.status == 0, "\(leave.stderr)")

            // bob and carol start together: their joins come in either order, before the rest.
            func expected(_ events: [MeshEvent]) -> [(MeshEvent.Kind, String)] {
                let first = events.first?.member?.name == "carol" ? ["carol", "bob"] : ["bob", "carol"]
                return [
                    (.memberJoined, first[0]), (.memberJoined, first[1]), (.attachmentAdded, ""),
                    (.attachmentComplete, ""), (.attachmentRemoved, ""), (.memberDead, "carol"),
                    (.memberLeft, "bob"),
                ]
            }
            do {
                try await waitUntil("the follower saw every event", timeout: .seconds(30)) {
                    let events = Self.decode(follower.stdout)
                    return Self.inOrder(expected(events), in: events)
                }
            } catch {
                let saw = Self.decode(follower.stdout).map { "\($0.seq) \($0.type.rawValue) \($0.member?.name ?? "")" }
                Issue.record("the follower saw: \(saw)")
                throw error
            }
            let seen = Self.decode(follower.stdout)
            #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.seq < $1.seq }, "\(seen.map(\.seq))")
            #expect(seen.filter { $0.attachment != nil }.allSatisfy { $0.attachment?.id == id })

            // The handler for every event wrote each one, as JSON on its standard input.
            try await waitUntil("the handler caught up", timeout: .seconds(30)) {
                let written = Self.decode((try? String(contentsOfFile: all, encoding: .utf8)) ?? "")
                return written.map(\.seq).suffix(seen.count) == seen.map(\.seq)
            }
            let handled = Self.decode(try String(contentsOfFile: all, encoding: .utf8))
            #expect(Array(handled.suffix(seen.count)) == seen)
            // The typed one, only for joins, with the event in its environment.
            let joins = try String(contentsOfFile: joined, encoding: .utf8).split(separator: "\n")
                .map { $0.split(separator: " ") }
            #expect(
                Set(joins.map { "\($0[0]) \($0[1])" }) == ["member-joined bob", "member-joined carol"]
                    && joins.count == 2, "\(joins)")

            // A client that reconnects after a sequence number gets what followed it.
            let second = seen[1].seq
            let resumed = try mesh.client(["events", "--json", "--after", "\(second)"], of: "alice")
            try await waitUntil("the resumed client caught up", timeout: .seconds(20)) {
                Self.decode(resumed.stdout).map(\.seq) == handled.map(\.seq).filter { $0 > second }
            }
        }
    }

    @Test("a handler that hangs is killed at its limit, one that fails is counted; neither holds up events or members")
    func misbehavingHandlers() async throws {
        // A duration no other process has, so that what is left of the handlers can be found.
        let marker = "1000.\(UInt32.random(in: 100_000...999_999))"
        let handlers = [
            "--event-handler", "member-joined=sleep \(marker); true",
            "--event-handler", "exit 1", "--event-handler-timeout", "1",
        ]
        try await withProcessMesh(names: ["alice"], argumentsByName: ["alice": handlers]) { mesh in
            let alice = try mesh["alice"]
            let follower = try mesh.client(["events"], of: "alice")
            _ = try await follower.waitForLine(prefix: "events: following", onStderr: true)
            for name in ["bob", "carol", "dave"] { try mesh.join(name) }
            try await mesh.waitUntilAllSee()
            // Every join reached the follower at once, whatever the handlers do.
            for name in ["bob", "carol", "dave"] {
                _ = try await follower.waitForLine(
                    prefix: "", timeout: .seconds(10),
                    containing: "member-joined \(name)")
            }
            let ping = try await NodeProcess.runCommand([
                "ping", "--data-dir", alice.dataDirectory, "dave",
                "--count", "2", "--interval", "0.05",
            ])
            #expect(ping.status == 0, "\(ping.stdout) \(ping.stderr)")
            // Three joins: three hangs killed after 1 s each, and each event failed the other handler.
            try await alice.waitForStatus(timeout: .seconds(30), "the handlers were counted") { status in
                (status.counters["eventHandlersTimedOut"]?.number ?? 0) >= 3
                    && (status.counters["eventHandlersFailed"]?.number ?? 0) >= 3
            }
            // The shell and its sleep were killed together (a process group of their own).
            let left = Self.processes(containing: marker).filter { !$0.contains("groupmesh") }
            #expect(left.isEmpty, "a killed handler left processes behind: \(left)")
        }
    }

    @Test("a handler that starts a daemon and exits holds up no later handler")
    func daemonStartingHandler() async throws {
        let marker = "1000.\(UInt32.random(in: 100_000...999_999))"
        let work = NodeProcess.makeTemporaryDirectory("daemon-handler")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let handled = work + "/handled"
        defer {
            for line in Self.processes(containing: marker) where !line.contains("groupmesh") {
                if let pid = Int32(line.split(separator: ":").first ?? "") { kill(pid, SIGKILL) }
            }
        }
        // The daemon keeps every descriptor the shell had; the handler itself ends at once.
        let handler = [
            "--event-handler",
            "member-joined=sleep \(marker) & echo \"$GROUPMESH_MEMBER_NAME\" >> '\(handled)'",
            "--event-handler-timeout", "60",
        ]
        try await withProcessMesh(names: ["alice", "bob", "carol"], argumentsByName: ["alice": handler]) { mesh in
            let alice = try mesh["alice"]
            // Both joins were handled while the first daemon still runs (60 s apart, before).
            try await waitUntil("both joins handled", timeout: .seconds(20)) {
                let names =
                    (try? String(contentsOfFile: handled, encoding: .utf8))?.split(separator: "\n")
                    .map(String.init) ?? []
                return Set(names) == ["bob", "carol"]
            }
            #expect(
                !Self.processes(containing: marker).filter { !$0.contains("groupmesh") }.isEmpty,
                "the daemons still run")
            let status = try await alice.status()
            #expect((status.counters["eventHandlersTimedOut"]?.number ?? 0) == 0, "no handler was taken for hung")
        }
    }
}
