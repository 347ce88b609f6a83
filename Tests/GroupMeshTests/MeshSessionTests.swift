import Foundation
import GroupMesh
import MeshCrypto
import MeshTestKit
import Testing

/// The public Swift API, in process, on loopback.
@Suite("MeshSession", .serialized)
struct MeshSessionTests {
    static func configuration(_ label: String, invite: Invite? = nil) -> NodeConfiguration {
        var configuration = NodeConfiguration(dataDirectory: DataDirectory(path: NodeProcess.makeTemporaryDirectory(label)))
        configuration.listenHost = "127.0.0.1"
        configuration.listenPort = 0
        configuration.invite = invite
        configuration.name = label
        return configuration
    }

    @Test("two sessions see each other as active participants; a leave removes one")
    func activeParticipants() async throws {
        let alice = try await MeshSession.join(Self.configuration("alice"))
        let bob = try await MeshSession.join(Self.configuration("bob", invite: await alice.invite()))
        defer {
            try? FileManager.default.removeItem(atPath: alice.node.configuration.dataDirectory.path)
            try? FileManager.default.removeItem(atPath: bob.node.configuration.dataDirectory.path)
        }
        let aliceParticipant = await alice.localParticipant
        let bobParticipant = await bob.localParticipant
        #expect(aliceParticipant.name == "alice")

        var updates = await alice.activeParticipantUpdates().makeAsyncIterator()
        let deadline = ContinuousClock.now + .seconds(15)
        var seen: Set<Participant> = []
        while seen != [aliceParticipant, bobParticipant], ContinuousClock.now < deadline {
            guard let next = await updates.next() else { break }
            seen = next
        }
        #expect(seen == [aliceParticipant, bobParticipant])
        #expect(await bob.activeParticipants == [aliceParticipant, bobParticipant])

        await bob.leave()
        while seen.contains(bobParticipant), ContinuousClock.now < deadline + .seconds(10) {
            guard let next = await updates.next() else { break }
            seen = next
        }
        #expect(seen == [aliceParticipant])
        await alice.leave()
    }

    @Test("a second session on the same data dir is refused while the first holds it")
    func lockedDataDirectory() async throws {
        let configuration = Self.configuration("locked")
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory.path) }
        let first = try await MeshSession.join(configuration)
        await #expect(throws: GroupMeshError.self) { _ = try await MeshSession.join(configuration) }
        await first.leave()
    }

    @Test("after leave(), every stream asked for ends instead of hanging: attachments, participants, messages",
          .timeLimit(.minutes(1)))
    func streamsEndAfterLeave() async throws {
        let configuration = Self.configuration("gone")
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory.path) }
        let session = try await MeshSession.join(configuration)
        let journal = Journal(session: session)
        let messenger = Messenger(session: session)
        await session.leave()
        // Each loop ends (a hang fails at the time limit).
        var sets = 0
        for await _ in await journal.attachments { sets += 1 }
        #expect(sets <= 1, "at most the current set, then the end")
        for await _ in await session.activeParticipantUpdates() {}
        for await _ in await messenger.messages(of: Data.self) {}
    }
}
