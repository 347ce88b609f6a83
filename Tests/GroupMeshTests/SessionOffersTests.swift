import Foundation
import GroupMesh
import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

/// `SessionOffers.sessions()`, GroupActivities' `sessions()`, in process on loopback.
@Suite("Session offers", .serialized)
struct SessionOffersTests {
    /// The template every offered session's node starts from.
    static func template(_ name: String) -> NodeConfiguration {
        var configuration = MeshSessionTests.configuration(name)
        configuration.invite = nil
        return configuration
    }

    static func offers(_ name: String, root: String? = nil) throws -> SessionOffers {
        try SessionOffers(
            root: root ?? NodeProcess.makeTemporaryDirectory("offers-\(name)"), configuration: template(name))
    }

    static func tearDown(_ host: MeshSession, _ offers: SessionOffers) async {
        await host.leave(waitingForReplication: false)
        try? FileManager.default.removeItem(atPath: host.node.configuration.dataDirectory.path)
        try? FileManager.default.removeItem(atPath: offers.root)
    }

    @Test(
        "an invite offered as text comes out of sessions() waiting; joined, it meets the inviter; offered again, nothing new"
    )
    func offeredAsText() async throws {
        let host = try await MeshSession.join(MeshSessionTests.configuration("host"))
        let offers = try Self.offers("guest")
        defer { Task { await Self.tearDown(host, offers) } }
        let sessions = await offers.sessions()
        #expect(try await offers.offer(await host.invite()))
        let session = try #require(await MessengerTests.next(sessions, within: .seconds(10)))
        #expect(await session.state == .waiting)
        let chats = await Messenger(session: session).messages(of: MessengerTests.Chat.self)
        try await session.join()
        try await waitUntil("both see each other") {
            let (mine, theirs) = (await session.activeParticipants.count, await host.activeParticipants.count)
            return mine == 2 && theirs == 2
        }
        try await Messenger(session: host).send(MessengerTests.Chat(text: "welcome"))
        #expect(await MessengerTests.next(chats, within: .seconds(5))?.0 == MessengerTests.Chat(text: "welcome"))

        // The same session again, while it is open: nothing new comes out.
        #expect(try await offers.offer(await host.invite()) == false)
        #expect(await MessengerTests.next(sessions, within: .milliseconds(300)) == nil)
        await session.leave(waitingForReplication: false)
    }

    @Test("an invite file put in the inbox is offered and removed; a file that is no invite is renamed .refused")
    func inboxFiles() async throws {
        let host = try await MeshSession.join(MeshSessionTests.configuration("host"))
        let offers = try Self.offers("guest")
        defer { Task { await Self.tearDown(host, offers) } }
        let sessions = await offers.sessions()
        // Written beside the inbox, then renamed in: never read half-written.
        let staging = offers.root + "/invite.tmp"
        try Data("garbage, not an invite\n".utf8).write(to: URL(fileURLWithPath: staging))
        try FileManager.default.moveItem(atPath: staging, toPath: offers.inbox + "/bad")
        try Data(((await host.invite()).text + "\n").utf8).write(to: URL(fileURLWithPath: staging))
        try FileManager.default.moveItem(atPath: staging, toPath: offers.inbox + "/from-host")

        let session = try #require(await MessengerTests.next(sessions, within: .seconds(10)))
        #expect(await session.state == .waiting)
        try await waitUntil("the inbox is read", timeout: .seconds(10)) {
            let names = try FileManager.default.contentsOfDirectory(atPath: offers.inbox)
            return names == ["bad.refused"]
        }
        try await session.join()
        try await waitUntil("they meet") { await host.activeParticipants.count == 2 }
        await session.leave(waitingForReplication: false)
    }

    @Test(
        "a session started here comes out too; after a restart its session comes out again and rejoins without an invite"
    )
    func startedAndRestarted() async throws {
        let root = NodeProcess.makeTemporaryDirectory("offers-restart")
        defer { try? FileManager.default.removeItem(atPath: root) }
        var first: SessionOffers? = try Self.offers("owner", root: root)
        let started = await first!.sessions()
        try await first!.startSession()
        var owner: MeshSession? = try #require(await MessengerTests.next(started, within: .seconds(10)))
        try await owner!.join()
        let invite = await owner!.invite()
        let guest = try await MeshSession.join(MeshSessionTests.configuration("guest", invite: invite))
        defer {
            Task { await guest.leave() }
            try? FileManager.default.removeItem(atPath: guest.node.configuration.dataDirectory.path)
        }
        try await waitUntil("they meet") { await guest.activeParticipants.count == 2 }
        let ownerID = await owner!.localParticipant.id
        // It made the session: it asks nobody for an introduction; the guest took an invite.
        #expect(owner!.node.configuration.dataDirectory.founded)
        #expect(!guest.node.configuration.dataDirectory.founded)

        // The app stops (its node with it, as a crash would) and starts again on the same root.
        await owner!.node.stop()
        owner = nil
        first = nil
        let second = try Self.offers("owner", root: root)
        let again = await second.sessions()
        let reopened = try #require(await MessengerTests.next(again, within: .seconds(10)))
        #expect(await reopened.state == .waiting)
        #expect(await reopened.localParticipant.id == ownerID, "the same member, from the same data dir")
        try await reopened.join()
        try await waitUntil("it rejoins through the member it knew") {
            let (mine, theirs) = (await reopened.activeParticipants.count, await guest.activeParticipants.count)
            return mine == 2 && theirs == 2
        }
        await reopened.leave(waitingForReplication: false)

        // Left: it does not come back at the next start; offered again, it does, in the same dir.
        #expect(SessionOffers.sessionsToReopen(in: root).isEmpty, "a session the app left would come back")
        let third = try Self.offers("owner", root: root)
        let afterLeave = await third.sessions()
        #expect(try await third.offer(invite))
        let rejoined = try #require(await MessengerTests.next(afterLeave, within: .seconds(10)))
        #expect(await rejoined.localParticipant.id == ownerID)
        await rejoined.node.stop()
    }

    @Test("an invite of a key epoch a data dir here forgot is refused as too old, and the dir stays as it was")
    func tooOldInviteChangesNothing() async throws {
        let offers = try Self.offers("old")
        defer { try? FileManager.default.removeItem(atPath: offers.root) }
        // A session this app left, whose chain outgrew the epochs a node keeps.
        var epochs = KeyEpochs(origin: SessionSecret.generate())
        let secrets = try DataDirectoryTests.rotate(&epochs, times: KeyEpochs.maxTransitions + 3)
        let directory = DataDirectory(path: offers.root + "/" + epochs.origin.sessionID.description)
        try directory.prepare()
        _ = try directory.loadOrCreateSession(invited: epochs.origin)
        try directory.saveEpochs(epochs.files)
        directory.markLeft()
        let invite = try Invite(
            InviteToken(secret: secrets[0], addresses: [PeerAddress(ipv4: [127, 0, 0, 1], port: 9)]).text)
        await #expect(throws: GroupMeshError.inviteTooOld(path: directory.path)) { try await offers.offer(invite) }
        #expect(directory.wasLeft, "the refused offer took the left mark away")
    }

    @Test("an ended session's invite is refused with the reason; a bad invite file offered directly says why")
    func refusals() async throws {
        let offers = try Self.offers("guest")
        let host = try await MeshSession.join(MeshSessionTests.configuration("host"))
        defer { Task { await Self.tearDown(host, offers) } }
        let invite = await host.invite()
        let sessions = await offers.sessions()
        try await offers.offer(invite)
        let session = try #require(await MessengerTests.next(sessions, within: .seconds(10)))
        try await session.join()
        try await waitUntil("they meet") { await host.activeParticipants.count == 2 }
        try await host.end()
        try await waitUntil("the end reaches the guest") { await session.state.isInvalidated }
        await #expect {
            try await offers.offer(invite)
        } throws: { error in
            if case .sessionEndedHere = error as? GroupMeshError { return true }
            return false
        }

        let file = offers.root + "/not-an-invite"
        try Data("gm1AAAA".utf8).write(to: URL(fileURLWithPath: file))
        do {
            try await offers.offer(file: file)
            Issue.record("a bad invite file was taken")
        } catch {
            #expect(error.description.contains(file))
        }
    }
}
