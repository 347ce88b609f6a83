import Foundation
import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// Strings that came from another member, printed by the CLI: a member must not be able to write
/// escape sequences or fake lines to your terminal.
@Suite("what members send is escaped on a terminal", .serialized)
struct TerminalSafetyTests {
    static func hasControlCharacters(_ text: String) -> Bool {
        text.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) }
    }

    @Test("a member's name with escapes and a newline, a message with OSC 52: shown escaped, one row, one line")
    func namesAndMessagesAreEscaped() async throws {
        try await withProcessMesh(names: ["first", "second"], waitForMembership: false, timeout: .seconds(20)) { mesh in
            let (first, second) = (try mesh["first"], try mesh["second"])
            let hostile = try HostileMember(
                invite: try InviteToken(parsing: mesh.invite),
                name: "evil\u{1B}[2J\nfake-row  127.0.0.1:9  alive")
            defer { hostile.stop() }
            try await mesh.waitUntilAllSee(alive: 3)

            let status = try await NodeProcess.runCommand(["status", "--data-dir", first.dataDirectory])
            #expect(status.status == 0, "\(status.stderr)")
            #expect(
                !Self.hasControlCharacters(status.stdout),
                "raw control characters in: \(status.stdout.debugDescription)")
            #expect(!status.stdout.split(separator: "\n").contains { $0.hasPrefix("fake-row") }, "\(status.stdout)")
            #expect(status.stdout.contains("evil\\e[2J\\nfake-row"), "\(status.stdout)")
            // JSON is unchanged: the name is there as the member chose it.
            let json = try await first.status()
            #expect(json.members.contains { $0.name == "evil\u{1B}[2J\nfake-row  127.0.0.1:9  alive" })

            let listener = try mesh.client(["listen"], of: "first")
            _ = try await listener.waitForLine(prefix: "ready", onStderr: true)
            let text = "clip\u{1B}]52;c;aGk=\u{07}\u{1B}[1A\nsecond: fake"
            let sent = try await NodeProcess.runCommand([
                "send", "--data-dir", second.dataDirectory, "--to", "first",
                text,
            ])
            #expect(sent.status == 0, "\(sent.stderr)")
            try await waitUntil("first heard the message") { listener.stdout.contains("clip") }
            #expect(!Self.hasControlCharacters(listener.stdout), "\(listener.stdout.debugDescription)")
            #expect(
                listener.stdout.contains("second: clip\\e]52;c;aGk=\\x07\\e[1A\\nsecond: fake\n"),
                "\(listener.stdout.debugDescription)")
            #expect(
                listener.stdout.split(separator: "\n").count == 1,
                "one line per message: \(listener.stdout.debugDescription)")
        }

        // Our own name is refused before anyone has to print it.
        let refused = try await NodeProcess.runCommand([
            "run", "--name", "bad\u{1B}[31m", "--listen", "127.0.0.1:0",
            "--data-dir", NodeProcess.makeTemporaryDirectory("badname"),
        ])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("--name may not hold control characters"), "\(refused.stderr)")
        #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
    }
}
