import Foundation
import GroupMesh
import MeshTestKit
import Testing

/// The Messenger API, in process, on loopback.
@Suite("Messenger", .serialized)
struct MessengerTests {
    struct PenStroke: Codable, Sendable, Equatable { var x: Double; var y: Double }
    struct Chat: Codable, Sendable, Equatable { var text: String }

    static func cluster(_ names: [String]) async throws -> [MeshSession] {
        var sessions: [MeshSession] = []
        for name in names {
            let invite = sessions.isEmpty ? nil : await sessions[0].invite()
            sessions.append(try await MeshSession.join(MeshSessionTests.configuration(name, invite: invite)))
        }
        let deadline = ContinuousClock.now + .seconds(15)
        for session in sessions {
            while await session.activeParticipants.count < names.count, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(await session.activeParticipants.count == names.count)
        }
        return sessions
    }

    static func tearDown(_ sessions: [MeshSession]) async {
        for session in sessions {
            await session.leave()
            try? FileManager.default.removeItem(atPath: session.node.configuration.dataDirectory.path)
        }
    }

    /// The next value of an async iterator, or nil after `timeout`.
    static func next<Element: Sendable>(_ stream: AsyncStream<Element>, within timeout: Duration) async -> Element? {
        await withTaskGroup(of: Element?.self) { group in
            group.addTask { var iterator = stream.makeAsyncIterator(); return await iterator.next() }
            group.addTask { try? await Task.sleep(for: timeout); return nil }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Test("types stay apart; the context names the sender; .only reaches exactly the chosen")
    func typedMessages() async throws {
        let sessions = try await Self.cluster(["ann", "ben", "cat"])
        defer { Task { await Self.tearDown(sessions) } }
        let ann = Messenger(session: sessions[0])
        let benStrokes = await Messenger(session: sessions[1]).messages(of: PenStroke.self)
        let benChats = await Messenger(session: sessions[1]).messages(of: Chat.self)
        let catChats = await Messenger(session: sessions[2]).messages(of: Chat.self)

        try await ann.send(PenStroke(x: 1, y: 2))
        let stroke = await Self.next(benStrokes, within: .seconds(5))
        #expect(stroke?.0 == PenStroke(x: 1, y: 2))
        #expect(stroke?.1.source == (await sessions[0].localParticipant))
        #expect(stroke?.1.mode == .reliable)

        let ben = await sessions[1].localParticipant
        try await ann.send(Chat(text: "for ben only"), to: .only([ben]))
        #expect(await Self.next(benChats, within: .seconds(5))?.0 == Chat(text: "for ben only"))
        #expect(await Self.next(catChats, within: .milliseconds(300)) == nil, "cat must not get ben's message")
    }

    @Test("a message over 256 KiB is refused before anything is sent; 256 KiB exactly arrives")
    func sizeLimit() async throws {
        let sessions = try await Self.cluster(["dan", "eve"])
        defer { Task { await Self.tearDown(sessions) } }
        let dan = Messenger(session: sessions[0])
        let received = await Messenger(session: sessions[1]).messages(of: Data.self)
        await #expect(throws: MessengerError.tooLarge(size: 256 * 1024 + 1, limit: 256 * 1024)) {
            try await dan.send(Data(count: 256 * 1024 + 1))
        }
        let body = Data((0..<(256 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try await dan.send(body)
        #expect(await Self.next(received, within: .seconds(10))?.0 == body)
    }

    @Test("an unreachable member makes send fail naming it; later messages still flow")
    func unreachableMember() async throws {
        let sessions = try await Self.cluster(["fay", "gus", "hal"])
        defer { Task { await Self.tearDown(sessions) } }
        // hal vanishes without a word (its socket closes; nobody has noticed yet).
        await sessions[2].node.stop()
        let fay = Messenger(session: sessions[0], timeout: .seconds(1))
        let gusInbox = await Messenger(session: sessions[1]).messages(of: Chat.self)
        do {
            try await fay.send(Chat(text: "anyone?"))
            Issue.record("send to a vanished member succeeded")
        } catch let error as MessengerError {
            guard case let .notDelivered(failures) = error else { Issue.record("\(error)"); return }
            #expect(failures.keys.contains { $0.name.hasPrefix("hal") }, "\(failures)")
            #expect(failures.count == 1)
        }
        #expect(await Self.next(gusInbox, within: .seconds(5))?.0 == Chat(text: "anyone?"))
        let gus = await sessions[1].localParticipant
        try await fay.send(Chat(text: "still here"), to: .only([gus]))
        #expect(await Self.next(gusInbox, within: .seconds(5))?.0 == Chat(text: "still here"))
    }
}
