import Foundation
import GroupMesh
import MeshCrypto
import MeshTestKit
import Testing

/// The public Swift API, in process, on loopback.
@Suite("MeshSession", .serialized)
struct MeshSessionTests {
    static func configuration(_ label: String, invite: Invite? = nil) -> NodeConfiguration {
        var configuration = NodeConfiguration(
            dataDirectory: DataDirectory(path: NodeProcess.makeTemporaryDirectory(label)))
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
        // Bob's view fills on its own schedule (alice's record may reach it a round later).
        while await bob.activeParticipants != [aliceParticipant, bobParticipant], ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await bob.activeParticipants == [aliceParticipant, bobParticipant])

        await bob.leave()
        while seen.contains(bobParticipant), ContinuousClock.now < deadline + .seconds(10) {
            guard let next = await updates.next() else { break }
            seen = next
        }
        #expect(seen == [aliceParticipant])
        await alice.leave()
    }

    @Test("a data dir that founded its session before the founded mark existed gets it from members.json")
    func founderFlagBecomesTheMark() async throws {
        let configuration = Self.configuration("old-founder")
        let directory = configuration.dataDirectory
        defer { try? FileManager.default.removeItem(atPath: directory.path) }
        try directory.prepare()
        _ = try directory.loadOrCreateSession(invited: nil)
        // As an earlier build left it: the flag in members.json only.
        try FileManager.default.removeItem(atPath: directory.foundedPath)
        try Data(#"{"incarnation": 3, "members": [], "founder": true}"#.utf8)
            .write(to: URL(fileURLWithPath: directory.membersPath))
        let session = try await MeshSession(configuration)
        #expect(directory.founded)
        await session.leave()
    }

    @Test("a second session on the same data dir is refused while the first holds it")
    func lockedDataDirectory() async throws {
        let configuration = Self.configuration("locked")
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory.path) }
        let first = try await MeshSession.join(configuration)
        await #expect(throws: GroupMeshError.self) { _ = try await MeshSession.join(configuration) }
        await first.leave()
    }

    @Test(
        "after leave(), every stream asked for ends instead of hanging: attachments, participants, messages",
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

    /// Reads `stream` until `done` says so or it finishes (bounded by the test's time limit).
    static func first<Elements: AsyncSequence>(
        _ stream: Elements, where done: (Elements.Element) -> Bool
    ) async -> Elements.Element? {
        do {
            for try await element in stream where done(element) { return element }
        } catch {}
        return nil
    }

    @Test(
        "a session exists before it joins: subscribed first, it misses no message sent the moment it joins",
        .timeLimit(.minutes(1)))
    func subscribeBeforeJoin() async throws {
        let alice = try await MeshSession.join(Self.configuration("alice"))
        let bob = try await MeshSession(Self.configuration("bob", invite: await alice.invite()))
        defer {
            try? FileManager.default.removeItem(atPath: alice.node.configuration.dataDirectory.path)
            try? FileManager.default.removeItem(atPath: bob.node.configuration.dataDirectory.path)
        }
        #expect(await bob.state == .waiting)
        let states = await bob.states()
        let inbox = await Messenger(session: bob).messages(of: String.self)
        // Alice greets every participant the moment it appears, as DrawTogether does.
        let greeter = Task {
            let messenger = Messenger(session: alice)
            var greeted: Set<Participant> = []
            for await participants in await alice.activeParticipantUpdates() {
                for newcomer in participants.subtracting(greeted) where newcomer != (await alice.localParticipant) {
                    try? await messenger.send("hello \(newcomer.name)", to: .only(participants))
                }
                greeted = participants
            }
        }
        defer { greeter.cancel() }
        try await bob.join()
        #expect(await bob.state == .joined)
        let greeting = await Self.first(inbox) { _ in true }
        #expect(greeting?.0 == "hello bob")
        await bob.leave()
        var seen: [SessionState] = []
        for await state in states { seen.append(state) }
        #expect(seen == [.waiting, .joined, .invalidated(reason: .left)], "the state stream ends after invalidated")
        await alice.leave()
    }

    @Test(
        "end() invalidates every member with reason ended; the data dirs remember and refuse to start",
        .timeLimit(.minutes(1)))
    func endForEveryone() async throws {
        let alice = try await MeshSession.join(Self.configuration("alice"))
        let bob = try await MeshSession.join(Self.configuration("bob", invite: await alice.invite()))
        let carol = try await MeshSession.join(Self.configuration("carol", invite: await alice.invite()))
        let sessions = [alice, bob, carol]
        defer {
            for session in sessions {
                try? FileManager.default.removeItem(atPath: session.node.configuration.dataDirectory.path)
            }
        }
        // Everyone sees everyone first: an end reaches the members its sender (and those it tells) knows.
        for session in sessions { _ = await Self.first(await session.activeParticipantUpdates()) { $0.count == 3 } }
        let bobStates = await bob.states()
        let carolMessages = await Messenger(session: carol).messages(of: Data.self)
        try await alice.end()
        let last = await Self.first(bobStates) { $0.isInvalidated }
        #expect(
            last == .invalidated(reason: .ended(by: "alice (\(alice.node.nodeID.hex.prefix(12)))")),
            "\(String(describing: last))")
        _ = await Self.first(await carol.states()) { $0.isInvalidated }
        #expect(await carol.state == .invalidated(reason: .ended(by: "alice (\(alice.node.nodeID.hex.prefix(12)))")))
        #expect(await alice.state == .invalidated(reason: .ended(by: "this member")))
        for await _ in carolMessages {}  // finished, not hanging
        // A send after the end says so, not that the node "is not running".
        do {
            try await Messenger(session: bob).send(Data("late".utf8))
            Issue.record("a send after the end went through")
        } catch let error as MessengerError {
            #expect(error == .sessionEnded(by: "alice (\(alice.node.nodeID.hex.prefix(12)))"), "\(error)")
            #expect(error.description.hasPrefix("the session was ended by alice"), "\(error)")
        }
        // Every data dir remembers: the session cannot start again, whoever starts it.
        for session in sessions {
            await #expect(throws: GroupMeshError.self) { _ = try await MeshSession(session.node.configuration) }
        }
        await #expect(throws: GroupMeshError.self) { try await alice.end() }
    }

    @Test("a session whose join fails is invalidated (failed to start)", .timeLimit(.minutes(1)))
    func failedJoin() async throws {
        let configuration = Self.configuration("broken")
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory.path) }
        let session = try await MeshSession(configuration)
        // A directory where the control socket must go: binding it fails.
        try FileManager.default.createDirectory(
            atPath: configuration.dataDirectory.controlSocketPath,
            withIntermediateDirectories: true)
        await #expect(throws: GroupMeshError.self) { try await session.join() }
        guard case .invalidated(.failedToStart) = await session.state else {
            Issue.record("state \(await session.state)")
            return
        }
    }

    @Test(
        "a start that cannot bind its port leaves no session in a new data dir: the next start joins with an invite",
        .timeLimit(.minutes(1)))
    func failedStartFoundsNothing() async throws {
        let host = try await MeshSession.join(Self.configuration("host"))
        let port = try #require(host.localAddress.description.split(separator: ":").last.flatMap { Int($0) })
        var configuration = Self.configuration("guest")
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory.path) }
        configuration.listenPort = port
        await #expect(throws: GroupMeshError.self) { _ = try await MeshSession(configuration) }
        #expect(!configuration.dataDirectory.hasSession && !configuration.dataDirectory.founded)
        configuration.listenPort = 0
        configuration.invite = await host.invite()
        let guest = try await MeshSession.join(configuration)
        try await waitUntil("they meet") { await host.activeParticipants.count == 2 }
        await guest.leave()
        await host.leave()
        try? FileManager.default.removeItem(atPath: host.node.configuration.dataDirectory.path)
    }

    @Test("a session dropped before it joined gives its UDP port back", .timeLimit(.minutes(1)))
    func droppedBeforeJoining() async throws {
        var configuration = Self.configuration("dropped")
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory.path) }
        var session: MeshSession? = try await MeshSession(configuration)
        let port = try #require(session?.localAddress.description.split(separator: ":").last.flatMap { Int($0) })
        session = nil
        // The same port, bound again once the dropped session let it go.
        configuration.listenPort = port
        var again: MeshSession?
        for _ in 0..<200 where again == nil {
            again = try? await MeshSession(configuration)
            if again == nil { try await Task.sleep(for: .milliseconds(25)) }
        }
        #expect(again != nil, "port \(port) was never given back")
        await again?.leave()
    }
}
