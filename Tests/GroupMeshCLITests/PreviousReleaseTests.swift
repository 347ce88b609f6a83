import Foundation
import MeshCore
import MeshTestKit
import Testing

/// Today's `groupmesh` and the previous release's in one session (PROTOCOL.md §3, "Protocol
/// versions"): a node speaks its own protocol and the one before, so members one release apart
/// keep working. The previous release is built from its release commit, once (`PreviousRelease`); the
/// test is skipped, with the reason printed, when that cannot be done.
@Suite("a session with the previous release", .serialized)
struct PreviousReleaseTests {
    /// The previous release's binary (the one `scripts/previous-release` pins: moved when cutting
    /// a release, DEVELOPMENT.md "Releases"), or nil (the reason printed) when it cannot be had.
    static func previousBinary() async -> String? {
        guard let repository = PreviousRelease.repository(of: #filePath) else {
            print("skipped: no repository around \(#filePath) to build the previous release from")
            return nil
        }
        let tag = PreviousRelease.tag(in: repository) ?? "the previous release"
        do {
            return try await PreviousRelease.binary(in: repository)
        } catch {
            print("skipped: no groupmesh \(tag) to run: \(error)")
            return nil
        }
    }

    @Test(
        "alive both ways, a message each way, each one's attachment fetched by the other, the old member at its protocol",
        arguments: [true, false])
    func mixedSession(previousCreates: Bool) async throws {
        guard let previous = await Self.previousBinary() else { return }
        let previousProtocol = try PreviousRelease.protocolVersion(of: previous)
        // N-1: the previous release speaks this one's oldest protocol at least.
        #expect(previousProtocol >= ProtocolVersion.oldestSpoken, "the previous release speaks \(previousProtocol)")
        let names = previousCreates ? ["previous", "today"] : ["today", "previous"]
        try await withProcessMesh(names: names, binaries: ["previous": previous]) { mesh in
            let today = try mesh["today"]
            try await today.waitForStatus(
                timeout: .seconds(60), "the previous release's member at protocol \(previousProtocol)"
            ) {
                $0.members.contains { $0.name == "previous" && $0.protocol == previousProtocol }
            }

            var listeners: [String: NodeProcess] = [:]
            for name in names {
                let listener = try mesh.client(["listen", "--json"], of: name)
                _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
                listeners[name] = listener
            }
            for (from, to) in [("previous", "today"), ("today", "previous")] {
                let sent = try await mesh.command(["send", "--to", to, "from \(from)"], of: from)
                #expect(sent.status == 0, "\(from): \(sent.stderr)")
            }
            for (from, to) in [("previous", "today"), ("today", "previous")] {
                let listener = try #require(listeners[to])
                try await waitUntil("\(to) heard \(from)") {
                    MessengerCommandTests.heard(listener).contains { $0.text == "from \(from)" && $0.fromName == from }
                }
                let heard = MessengerCommandTests.heard(listener).filter { $0.text == "from \(from)" }
                #expect(heard.count == 1, "\(to): \(heard)")
            }

            let work = NodeProcess.makeTemporaryDirectory("previous-release")
            defer { try? FileManager.default.removeItem(atPath: work) }
            for (index, (holder, getter)) in [("previous", "today"), ("today", "previous")].enumerated() {
                let (path, bytes) = try FirstHourTests.randomFile(
                    work, name: "\(holder).bin", size: 700_000, seed: UInt64(index + 1))
                let attach = try await mesh.command(["attach", path], of: holder)
                try #require(attach.status == 0, "\(holder): \(attach.stderr)")
                let id = attach.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                let output = work + "/\(getter)-got-\(holder).bin"
                // Until the journal brought the attachment there, `get` does not know it.
                try await waitUntil("\(getter) got \(holder)'s attachment", every: .milliseconds(500)) {
                    try await mesh.command(["get", id, "-o", output], of: getter).status == 0
                }
                #expect(
                    (try? Data(contentsOf: URL(fileURLWithPath: output))) == bytes,
                    "\(getter)'s copy of \(holder)'s attachment differs")
            }

            let status = try await today.status()
            #expect(status.members.first { $0.name == "previous" }?.protocol == previousProtocol)
            #expect(status.members.first { $0.name == "today" }?.protocol == ProtocolVersion.current)
            #expect(status.members.allSatisfy { $0.state == "alive" }, "\(status.members.map(\.state))")
            let previousStatus = try await mesh["previous"].status()
            #expect(previousStatus.aliveCount == 2)
            // The founding id: today's founder holds its own (the previous release passes it over,
            // and counts no malformed frame); a session the previous release made has none.
            #expect(
                (status.`self`.founding != nil) == !previousCreates, "\(String(describing: status.`self`.founding))")
            #expect((status.`self`.founder != nil) == !previousCreates)
            #expect(previousStatus.dropped("malformed") == 0, "the previous release dropped frames of ours")
            // N-1 is spoken: no member is reported as one this node cannot follow.
            #expect(!(today.stdout + today.stderr).contains("speaks protocol"), "\(today.stdout)")
        }
    }
}
