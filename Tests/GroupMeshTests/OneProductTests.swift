import Foundation
import GroupMesh
import Testing

// This file imports GroupMesh alone, on purpose: it compiles only while everything an app
// needs (invites, addresses, logging, the session, messenger and journal types) is reachable
// through the one product.

@Suite("One product")
struct OneProductTests {
    @Test(
        "an app that imports GroupMesh alone parses invites, sets logging, joins, sends and adds",
        .timeLimit(.minutes(1)))
    func importGroupMeshAlone() async throws {
        let logger = GroupMeshLogging.standardError(label: "app", level: GroupMeshLogLevel.warning)
        #expect(logger.logLevel == .warning)
        #expect(throws: GroupMeshError.self) { _ = try Invite("gm1-not-an-invite") }

        let path = NSTemporaryDirectory() + "groupmesh-one-product-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: path) }
        var configuration = NodeConfiguration(dataDirectory: DataDirectory(path: path))
        configuration.listenHost = "127.0.0.1"
        configuration.listenPort = 0
        configuration.profile = .lan
        let session = try await MeshSession(configuration, logger: logger)
        let state: SessionState = await session.state
        #expect(state == .waiting)
        try await session.join()
        let invite: Invite = await session.invite()
        #expect(try Invite(invite.text) == invite, "an invite round-trips through its text")
        let address: MeshAddress = session.localAddress
        #expect(try MeshAddress(address.description) == address)

        let messenger = Messenger(session: session)
        try await messenger.send("to nobody", to: .only(await session.localParticipant))
        let journal = Journal(session: session)
        let attachment: GroupMesh.Attachment = try await journal.add(Data("bytes".utf8), metadata: ["title": "x"])
        #expect(attachment.state == .available)
        #expect(try await attachment.load(Data.self) == Data("bytes".utf8))
        #expect(try await attachment.loadMetadata(of: [String: String].self) == ["title": "x"])
        let summary: LeaveSummary? = await session.leave()
        #expect(summary?.alone == true && summary?.unavailable == [attachment.id])
        let reason: InvalidationReason? = {
            if case let .invalidated(reason) = $0 { return reason }; return nil
        }(await session.state)
        #expect(reason == .left)
    }
}
