import Foundation
import MeshTestKit
import Testing

/// `groupmesh remove-member` with real processes: the session moves to a new key epoch that
/// the removed member never sees; old invites stop working; a member that was offline catches up.
@Suite("removing a member", .serialized)
struct MemberRemovalTests {
    @Test("the removed member is cut off, old invites stop working, an offline member catches up")
    func removeMember() async throws {
        try await withProcessMesh(names: ["a", "b", "c", "mallory", "d"]) { mesh in
            let (a, b, c, mallory, d) = try (mesh["a"], mesh["b"], mesh["c"], mesh["mallory"], mesh["d"])
            let oldInvite = mesh.invite
            let firstSession = try await a.status().`self`.session
            let malloryID = try await mallory.status().`self`.id

            // d goes offline (as a crash would) before the removal.
            d.signal(SIGKILL)
            _ = try await d.waitForExit()

            let removal = try await NodeProcess.runCommand([
                "remove-member", "--data-dir", b.dataDirectory, "--keep-introduced", "mallory",
            ])
            #expect(removal.status == 0, "\(removal.stderr)")
            #expect(removal.stdout.contains("removed \(malloryID.prefix(12))"), "\(removal.stdout)")
            let newSession = try await b.status().`self`.session
            #expect(newSession != firstSession)

            // Every remaining live member moves to the new epoch and sees mallory gone.
            for node in [a, b, c] {
                try await node.waitForStatus(
                    timeout: .seconds(30),
                    "the new epoch, mallory left, a b c alive"
                ) { status in
                    status.`self`.session == newSession && status.`self`.keyEpoch == 1
                        && status.state(of: malloryID) != "alive" && status.aliveCount == 3
                }
                #expect(try await node.status().state(of: malloryID) == "removed", "shown as removed, not as left")
            }
            // mallory is told, with the signed rotation as proof, and stops in one line: it does not
            // stay up alone in the old epoch.
            #expect(try await mallory.waitForExit(timeout: .seconds(30)) == 69, "\(mallory.stderr)")
            #expect(mallory.stderr.contains("this node was removed from the session by b"), "\(mallory.stderr)")
            #expect(
                mallory.stderr.components(separatedBy: "removed from the session").count == 2,
                "said once, not also as a log line: \(mallory.stderr)")
            let send = try await NodeProcess.runCommand([
                "send", "--data-dir", mallory.dataDirectory, "--to", "a",
                "let me in",
            ])
            #expect(send.status == 69, "a send from the removed member went somewhere: \(send.stderr)")
            #expect(
                send.stderr.contains("this node was removed from the session by b")
                    && !send.stderr.contains("start one"),
                "\(send.stderr)")
            // The others still talk.
            let message = try await NodeProcess.runCommand([
                "send", "--data-dir", b.dataDirectory, "--to", "c",
                "still here",
            ])
            #expect(message.status == 0, "\(message.stderr)")

            // An invite from before the removal lets no one in.
            mallory.signal(SIGKILL)
            _ = try await mallory.waitForExit()
            let staleBefore = try await a.status().dropped("staleEpoch")
            let newcomer = try mesh.join("newcomer", invite: oldInvite)
            try await a.waitForStatus(timeout: .seconds(30), "the newcomer's join refused") {
                $0.dropped("staleEpoch") > staleBefore
            }
            #expect(try await a.status().members.allSatisfy { $0.name != "newcomer" })
            #expect(try await newcomer.status().aliveCount == 1, "the newcomer met someone")
            // ...but is told why, in one line, instead of waiting as if nobody were there.
            try await newcomer.waitForStatus(timeout: .seconds(30), "the newcomer told its invite is out of date") {
                $0.joining?.state == "out-of-date"
            }
            _ = try await newcomer.waitForLine(prefix: "this invite is out of date", timeout: .seconds(10))
            let table = try await NodeProcess.runCommand(["status", "--data-dir", newcomer.dataDirectory])
            #expect(table.stdout.contains("not let in: the session moved to a new key"), "\(table.stdout)")
            #expect(!(newcomer.stdout + newcomer.stderr).contains("no answer yet"), "a member answered")
            // Started again on the same data dir with a new invite (it never took part), it is let in.
            let fresh = try await NodeProcess.runCommand(["invite", "--data-dir", a.dataDirectory])
            try #require(fresh.status == 0, "\(fresh.stderr)")
            newcomer.signal(SIGTERM)
            _ = try await newcomer.waitForExit()
            let mark = newcomer.dataDirectory + "/invite-out-of-date"
            #expect(FileManager.default.fileExists(atPath: mark), "the dir keeps what it was told")
            let admitted = try mesh.restart(
                "newcomer", arguments: ["--invite", fresh.stdout.trimmingCharacters(in: .whitespacesAndNewlines)])
            try await admitted.waitForStatus(timeout: .seconds(30), "the newcomer in with the new invite") {
                $0.`self`.session == newSession && $0.aliveCount >= 3
            }
            #expect(!FileManager.default.fileExists(atPath: mark), "let in: no later invite replaces its session")

            // d comes back on the old epoch and catches up through whoever it reaches first.
            let back = try mesh.restart("d")
            try await back.waitForStatus(timeout: .seconds(30), "d on the new epoch with a b c and the newcomer") {
                $0.`self`.session == newSession && $0.aliveCount == 5
            }
            var info = stat()
            #expect(stat(d.dataDirectory + "/epochs.key", &info) == 0)
            #expect(info.st_mode & 0o077 == 0, "epochs.key is readable by others")

            // A restarted member keeps its epoch.
            c.signal(SIGKILL)
            _ = try await c.waitForExit()
            let restarted = try mesh.restart("c")
            try await mesh.waitUntilAllSee(["a", "b", "d", "c", "newcomer"])
            #expect(try await restarted.status().`self`.session == newSession)
        }
    }

    @Test("two members removing two others at the same moment end in one epoch without either")
    func concurrentRemovals() async throws {
        try await withProcessMesh(names: ["a", "b", "x", "y"]) { mesh in
            let (a, b, x, y) = try (mesh["a"], mesh["b"], mesh["x"], mesh["y"])
            let xID = try await x.status().`self`.id, yID = try await y.status().`self`.id
            // Whoever x and y let in stays (which member answered whose join is not the point here).
            async let first = NodeProcess.runCommand([
                "remove-member", "--data-dir", a.dataDirectory, "--keep-introduced", "x",
            ])
            async let second = NodeProcess.runCommand([
                "remove-member", "--data-dir", b.dataDirectory, "--keep-introduced", "y",
            ])
            let (removedX, removedY) = try await (first, second)
            #expect(removedX.status == 0 && removedY.status == 0, "\(removedX.stderr) \(removedY.stderr)")
            var session = ""
            try await waitUntil("a and b in one epoch without x and y", timeout: .seconds(30)) {
                guard let onA = try? await a.status(), let onB = try? await b.status() else { return false }
                session = onA.`self`.session
                return onA.`self`.session == onB.`self`.session && onA.aliveCount == 2 && onB.aliveCount == 2
                    && [xID, yID].allSatisfy { onA.state(of: $0) != "alive" && onB.state(of: $0) != "alive" }
            }
            // Neither removed member stays: each is told and stops.
            for removed in [x, y] {
                #expect(try await removed.waitForExit(timeout: .seconds(30)) == 69, "\(removed.stderr)")
            }
            #expect(!session.isEmpty)
            let message = try await NodeProcess.runCommand([
                "send", "--data-dir", a.dataDirectory, "--to", "b",
                "just us",
            ])
            #expect(message.status == 0, "\(message.stderr)")
        }
    }

    @Test("two members removing each other at the same moment end in one epoch: one stays, the other is told and stops")
    func mutualRemoval() async throws {
        try await withProcessMesh(names: ["a", "b", "c"]) { mesh in
            let (a, b, c) = try (mesh["a"], mesh["b"], mesh["c"])
            let ids = [try await a.status().`self`.id, try await b.status().`self`.id]
            async let first = NodeProcess.runCommand([
                "remove-member", "--data-dir", a.dataDirectory, "--keep-introduced", "b",
            ])
            async let second = NodeProcess.runCommand([
                "remove-member", "--data-dir", b.dataDirectory, "--keep-introduced", "a",
            ])
            let results = try await [first, second]
            for result in results where result.status != 0 {
                // The loser's own command may learn in time that it was removed: one line.
                #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
            }
            try await waitUntil("a or b told it was removed", timeout: .seconds(30)) {
                a.terminationStatus != nil || b.terminationStatus != nil
            }
            let aLost = a.terminationStatus != nil
            let (survivor, loser, loserID) = aLost ? (b, a, ids[0]) : (a, b, ids[1])
            let (survivorName, loserName) = aLost ? ("b", "a") : ("a", "b")
            #expect(try await loser.waitForExit(timeout: .seconds(5)) == 69, "\(loser.stderr)")
            #expect(
                loser.stderr.contains("this node was removed from the session by \(survivorName)"),
                "\(loserName): \(loser.stderr)")
            // The survivor and c in one epoch, without the loser; the survivor is not told it was
            // removed, for a while after.
            var session = ""
            try await waitUntil("\(survivorName) and c in one epoch without \(loserName)", timeout: .seconds(30)) {
                guard let onSurvivor = try? await survivor.status(), let onC = try? await c.status() else {
                    return false
                }
                session = onSurvivor.`self`.session
                return onSurvivor.`self`.session == onC.`self`.session && onSurvivor.aliveCount == 2
                    && onC.aliveCount == 2 && onSurvivor.state(of: loserID) != "alive"
                    && onC.state(of: loserID) != "alive"
            }
            #expect(!session.isEmpty)
            let message = try await NodeProcess.runCommand([
                "send", "--data-dir", survivor.dataDirectory, "--to", "c", "just us",
            ])
            #expect(message.status == 0 && message.stderr.contains("sent to 1 member"), "\(message.stderr)")
            #expect(survivor.terminationStatus == nil, "\(survivorName) stopped: \(survivor.stderr)")
        }
    }

    @Test(
        "a member nobody speaks of any longer (lost while the remover was down) is removed by name after a restart; found again, it is told and stops"
    )
    func memberOnlyRememberedIsRemoved() async throws {
        try await withProcessMesh(names: ["owner", "laptop"]) { mesh in
            let (owner, laptop) = try (mesh["owner"], mesh["laptop"])
            let laptopID = try await laptop.status().`self`.id
            let ownerAddress = try await owner.status().`self`.address
            // The owner's machine sleeps (a leave would tell the laptop, which would then forget
            // where the owner is), then the laptop is lost.
            owner.signal(SIGKILL)
            _ = try await owner.waitForExit()
            laptop.signal(SIGKILL)
            _ = try await laptop.waitForExit()
            // Back alone: nobody tells it of the laptop, which only its members.json remembers.
            let back = try mesh.restart("owner", listen: ownerAddress)
            _ = try await back.waitForLine(prefix: "listening:", timeout: .seconds(30))
            let status = try await back.status()
            #expect(status.state(of: laptopID) == nil, "the laptop is in the view: nothing is tested")
            let removal = try await NodeProcess.runCommand([
                "remove-member", "--data-dir", back.dataDirectory, "--keep-introduced", "laptop",
            ])
            #expect(removal.status == 0, "\(removal.stderr)")
            #expect(removal.stdout.contains("removed \(laptopID.prefix(12))"), "\(removal.stdout)")
            #expect(try await back.status().`self`.keyEpoch == 1)
            let again = try await NodeProcess.runCommand([
                "remove-member", "--data-dir", back.dataDirectory, "--keep-introduced", "laptop",
            ])
            #expect(again.status != 0 && again.stderr.contains("was already removed"), "\(again.stderr)")
            // The laptop found again: told by the owner, with the rotation as proof, it stops.
            let found = try mesh.restart("laptop")
            #expect(try await found.waitForExit(timeout: .seconds(30)) == 69, "\(found.stderr)")
            #expect(found.stderr.contains("this node was removed from the session by owner"), "\(found.stderr)")
            // Its data dir remembers: the next start says so at once, without joining first.
            let second = try mesh.restart("laptop")
            #expect(try await second.waitForExit(timeout: .seconds(30)) == 69, "\(second.stderr)")
            #expect(second.stderr.contains("this node was removed from the session by owner"), "\(second.stderr)")
            #expect(!second.stdout.contains("listening:"), "it started before it said so: \(second.stdout)")
        }
    }

    @Test(
        "a member that let another in is not removed alone: refused naming it; kept (by a name with a comma), it stays and is introduced again"
    )
    func removalNamesWhomTheMemberLetIn() async throws {
        let names = ["a", "pat,sam", "kim,lee"]
        try await withProcessMesh(names: names) { mesh in
            let nodes = try names.map { try mesh[$0] }
            var ids: [String] = []
            for node in nodes { ids.append(try await node.status().`self`.id) }
            // Once every joiner's door is known: y, one that the founder a let in, and r, the other.
            let view = try await nodes[0].waitForStatus(timeout: .seconds(30), "b and c introduced") { status in
                ids.dropFirst().allSatisfy { id in status.members.first { $0.id == id }?.introducedBy != nil }
            }
            let doors = Dictionary(uniqueKeysWithValues: view.members.map { ($0.id, $0.introducedBy) })
            let y = try #require([1, 2].first { doors[ids[$0]] == ids[0] }, "nobody introduced by a: \(doors)")
            let r = 3 - y
            let before = try await nodes[r].status().`self`.session
            let refused = try await NodeProcess.runCommand(["remove-member", "--data-dir", nodes[r].dataDirectory, "a"])
            #expect(refused.status == 65, "\(refused.stderr)")
            #expect(
                refused.stderr.contains("introduced 1 member (\(names[y])")
                    && refused.stderr.contains("--with-introduced")
                    && refused.stderr.contains("nothing was removed"), "\(refused.stderr)")
            #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
            #expect(try await nodes[r].status().`self`.session == before, "a refused removal changed the epoch")

            // A value that is no member's name is split at commas, and each part must name one.
            let split = try await NodeProcess.runCommand([
                "remove-member", "--data-dir", nodes[r].dataDirectory, "--keep", "zz-nobody,\(ids[y].prefix(8)),", "a",
            ])
            #expect(split.status == 65 && split.stderr.contains("unknown member 'zz-nobody'"), "\(split.stderr)")
            #expect(try await nodes[r].status().`self`.session == before, "a refused removal changed the epoch")
            let kept = try await NodeProcess.runCommand([
                "remove-member", "--data-dir", nodes[r].dataDirectory, "--keep", names[y], "--json", "a",
            ])
            #expect(kept.status == 0, "\(kept.stderr)")
            let answer = try JSONSerialization.jsonObject(with: Data(kept.stdout.utf8)) as? [String: Any]
            #expect((answer?["introduced"] as? [String]) == [], "\(kept.stdout)")
            #expect(try await nodes[0].waitForExit(timeout: .seconds(30)) == 69, "\(nodes[0].stderr)")
            // y stays, and is introduced again by r, which removed its door; unless r came in
            // through y (that would be a loop): then y stays unintroduced, a root.
            let rUnderY = doors[ids[r]] == ids[y]
            for node in rUnderY ? [nodes[y]] : [nodes[r], nodes[y]] {
                try await node.waitForStatus(timeout: .seconds(30), "\(names[y]) introduced again") { status in
                    status.aliveCount == 2
                        && status.members.first { $0.id == ids[y] }?.introducedBy == (rUnderY ? nil : ids[r])
                }
            }
        }
    }

    @Test("remove-member errors in one line: unknown member, this node itself")
    func removeMemberErrors() async throws {
        let node = try NodeProcess(["run", "--listen", "127.0.0.1:0", "--name", "solo"])
        defer { Task { await node.cleanUp() } }
        _ = try await node.waitForLine(prefix: "listening:")
        let unknown = try await NodeProcess.runCommand(["remove-member", "--data-dir", node.dataDirectory, "nobody"])
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("unknown member 'nobody'"), "\(unknown.stderr)")
        let own = try await NodeProcess.runCommand(["remove-member", "--data-dir", node.dataDirectory, "solo"])
        #expect(own.status != 0)
        #expect(own.stderr.contains("cannot remove this node itself"), "\(own.stderr)")
        let both = try await NodeProcess.runCommand([
            "remove-member", "--data-dir", node.dataDirectory, "--with-introduced", "--keep-introduced", "nobody",
        ])
        #expect(both.status == 64 && both.stderr.contains("say opposite things"), "\(both.stderr)")
        for result in [unknown, own] { #expect(result.stderr.split(separator: "\n").count == 1) }
    }
}
