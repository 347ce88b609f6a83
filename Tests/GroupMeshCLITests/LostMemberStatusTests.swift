import Foundation
import MeshTestKit
import Testing

/// A member away for longer than the dead are kept (`--profile local`: 30 s), as `status` tells
/// it: the node lists it as lost, with the name and address it is asked at, until it is back.
@Suite("lost members in status, with real processes", .serialized)
struct LostMemberStatusTests {
    @Test("a member stopped until it is forgotten is listed lost in status, by name and address, until it is back")
    func lostMemberIsShownUntilBack() async throws {
        try await withProcessMesh(names: ["home", "laptop"], arguments: ["--profile", "local"]) { mesh in
            let (home, laptop) = (try mesh["home"], try mesh["laptop"])
            let me = try await laptop.status().`self`
            laptop.signal(SIGSTOP)
            defer { laptop.signal(SIGCONT) }
            let away = try await home.waitForStatus(timeout: .seconds(90), "the laptop lost") { status in
                status.lost?.contains { $0.id == me.id } == true
            }
            let lost = try #require(away.lost?.first { $0.id == me.id })
            #expect(lost.name == "laptop" && lost.addresses.contains(me.address), "\(lost)")
            #expect(!away.members.contains { $0.id == me.id }, "forgotten, and still a member in the table")
            let table = try await NodeProcess.runCommand(["status", "--data-dir", home.dataDirectory])
            #expect(
                table.stdout.contains("lost touch with 1 member, asked again until found: laptop \(me.id.prefix(12))"),
                "\(table.stdout)")

            laptop.signal(SIGCONT)
            let back = try await home.waitForStatus(timeout: .seconds(60), "the laptop back") { status in
                status.state(of: me.id) == "alive"
            }
            #expect(back.lost == nil, "still lost: \(String(describing: back.lost))")
        }
    }
}
