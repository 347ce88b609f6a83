import Foundation
import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// A new user's first hour: an invite that nobody answers. Real processes on loopback.
@Suite("groupmesh run: an invite nobody answers", .serialized)
struct JoinWaitingTests {
    @Test(
        "says within 10 s that nobody answers, naming the address; status shows it; a restart without the invite still tries it, and says when it joined"
    )
    func waitsKeepsTheSeedAndJoins() async throws {
        // The inviter: its invite taken, then stopped. Its data dir is kept, to bring it back on
        // the same address later.
        let inviter = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "inviter"])
        defer { Task { await inviter.cleanUp() } }
        let address = try PeerAddress(parsing: try await inviter.waitForLine(prefix: "listening:"))
        let invite = try await inviter.waitForLine(prefix: "invite:")
        inviter.signal(SIGTERM)
        #expect(try await inviter.waitForExit() == 0)

        // (a) The joiner: one line within 10 s of its start, naming the address it tries.
        let joiner = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--invite", invite])
        defer { Task { await joiner.cleanUp() } }
        _ = try await joiner.waitForLine(prefix: "listening:", timeout: .seconds(30))
        let listeningAt = ContinuousClock.now
        let waiting = try await joiner.waitForLine(prefix: "waiting for a first member:", timeout: .seconds(10))
        #expect(ContinuousClock.now - listeningAt < .seconds(10))
        #expect(waiting.contains("no answer yet from \(address)"), "\(waiting)")
        #expect(waiting.contains("still trying") && waiting.contains("firewall"), "\(waiting)")
        #expect(waiting.contains("the invite is the right one"), "\(waiting)")
        let status = try await joiner.waitForStatus(timeout: .seconds(10), "the join shown as waiting") {
            $0.joining?.state == "waiting"
        }
        #expect(status.joining?.addresses == ["\(address)"])
        #expect(
            (status.joining?.attempts ?? 0) >= 2 && (status.joining?.since ?? 0) >= 5,
            "\(String(describing: status.joining))")
        // Nothing of the session is known yet: an attachment is not called unknown to it.
        let get = try await NodeProcess.runCommand(["get", "--data-dir", joiner.dataDirectory, "a91370c9", "-o", "-"])
        #expect(get.status == 69 && get.stderr.contains("has not met a member yet"), "\(get.stderr)")
        let human = try await NodeProcess.runCommand(["status", "--data-dir", joiner.dataDirectory])
        #expect(human.stdout.contains("waiting for a first member (no answer from 1 address for "), "\(human.stdout)")
        #expect(human.stdout.contains("data dir \(joiner.dataDirectory): "), "\(human.stdout)")
        #expect((status.storage?.freeBytes ?? 0) > 0, "\(String(describing: status.storage))")
        #expect(
            Self.count("waiting for a first member", in: joiner.stdout) == 1, "told more than once: \(joiner.stdout)")
        joiner.signal(SIGTERM)
        #expect(try await joiner.waitForExit() == 0)

        // (b) Restarted on its data dir without the invite: it still tries the address.
        let restarted = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0"], dataDirectory: joiner.dataDirectory,
            ownsDataDirectory: false)
        defer { Task { await restarted.cleanUp(removeData: false) } }
        try await restarted.waitForStatus(timeout: .seconds(30), "the kept address tried after a restart") {
            $0.joining?.addresses == ["\(address)"]
        }
        // Told again in this run (a new waiting episode), before the inviter comes back.
        let waitingAgain = try await restarted.waitForLine(
            prefix: "waiting for a first member:", timeout: .seconds(15),
            containing: "\(address)")
        // No invite in this start, but the address is the invite's (the data dir knows no member).
        #expect(waitingAgain.contains("the invite is the right one"), "\(waitingAgain)")

        // (c) The inviter back on its address: the next try reaches it (the waits are at most
        // 30 s), and the joiner says it joined.
        let back = try NodeProcess(
            ["run", "--listen", "127.0.0.1:\(address.port)", "--name", "inviter"],
            dataDirectory: inviter.dataDirectory, ownsDataDirectory: false)
        defer { Task { await back.cleanUp(removeData: false) } }
        _ = try await back.waitForLine(prefix: "listening:", timeout: .seconds(30))
        let joined = try await restarted.waitForLine(prefix: "joined:", timeout: .seconds(60))
        #expect(joined.hasPrefix("met inviter (") && joined.contains(" at \(address)"), "\(joined)")
        let after = try await restarted.waitForStatus(timeout: .seconds(10), "the inviter alive and the wait over") {
            status in
            status.joining == nil && status.members.contains { $0.name == "inviter" && $0.state == "alive" }
        }
        #expect(after.joining == nil)
        #expect(Self.count("waiting for a first member", in: restarted.stdout) == 1, "\(restarted.stdout)")
        #expect(Self.count("joined:", in: restarted.stdout) == 1, "\(restarted.stdout)")
        // The joiner first: it leaves knowing the inviter alive (a member that left is not kept).
        for node in [restarted, back] {
            node.signal(SIGTERM)
            #expect(try await node.waitForExit() == 0)
        }
        // Joined: the address kept for a restart is dropped (members.json now says where the session is).
        let file = try Data(contentsOf: URL(fileURLWithPath: joiner.dataDirectory + "/members.json"))
        let remembered = try JSONDecoder().decode(RememberedMembers.self, from: file)
        #expect(remembered.seeds.isEmpty && remembered.members.map(\.name) == ["inviter"], "\(remembered)")

        // (d) Started again while the inviter is down: the members it knows are what to check.
        let alone = try NodeProcess(
            ["run", "--listen", "127.0.0.1:0"], dataDirectory: joiner.dataDirectory, ownsDataDirectory: false)
        defer { Task { await alone.cleanUp(removeData: false) } }
        let offline = try await alone.waitForLine(prefix: "waiting for a first member:", timeout: .seconds(15))
        #expect(offline.contains("may all be offline") && !offline.contains("invite"), "\(offline)")
        alone.signal(SIGTERM)
        #expect(try await alone.waitForExit() == 0)
    }

    @Test("a node that made the session shows no join and prints no waiting line")
    func creatorDoesNotWait() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "invite:")
        let status = try await node.status()
        #expect(status.joining == nil)
        node.signal(SIGTERM)
        #expect(try await node.waitForExit() == 0)
        #expect(!node.stdout.contains("waiting for a first member"))
    }

    static func count(_ text: String, in output: String) -> Int {
        output.components(separatedBy: text).count - 1
    }
}
