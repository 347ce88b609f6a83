import Foundation
import GroupMesh
import MeshCrypto
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
    static func next<Messages: AsyncSequence & Sendable>(
        _ stream: Messages, within timeout: Duration
    ) async -> Messages.Element? where Messages.Element: Sendable {
        await withTaskGroup(of: Messages.Element?.self) { group in
            group.addTask {
                var iterator = stream.makeAsyncIterator(); return try? await iterator.next()
            }
            group.addTask {
                try? await Task.sleep(for: timeout); return nil
            }
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

    /// Collects completion-handler outcomes, each under its index: called twice is counted.
    final class Outcomes: @unchecked Sendable {
        private let lock = NSLock()
        private var calls: [Int: [String?]] = [:]

        func record(_ index: Int, _ error: (any Error)?) {
            lock.withLock { calls[index, default: []].append(error.map { "\($0)" }) }
        }

        var snapshot: [Int: [String?]] { lock.withLock { calls } }
    }

    @Test(
        "send(_:to:completion:) delivers in the order of the calls and calls each completion once, with nil or the error"
    )
    func completionHandlerSends() async throws {
        let sessions = try await Self.cluster(["fay", "gus"])
        defer { Task { await Self.tearDown(sessions) } }
        let fay = Messenger(session: sessions[0])
        let strokes = await Messenger(session: sessions[1]).messages(of: PenStroke.self)
        let raw = await Messenger(session: sessions[1]).messages(of: Data.self)
        let outcomes = Outcomes()

        // Called from synchronous code, as UIKit/AppKit code does, one right after another.
        for index in 0..<200 {
            fay.send(PenStroke(x: Double(index), y: 0)) { outcomes.record(index, $0) }
        }
        fay.send(Data("raw".utf8), to: .all) { outcomes.record(200, $0) }
        fay.send(Data(count: 256 * 1024 + 1)) { outcomes.record(201, $0) }
        let stranger = Participant(id: NodeID(high: 1, low: 2), name: "nobody")
        fay.send(Chat(text: "to a stranger"), to: .only(stranger)) { outcomes.record(202, $0) }

        let received = await Self.collect(strokes, count: 200, within: .seconds(30)).map(\.0.x)
        #expect(received == (0..<200).map(Double.init), "in the order of the calls")
        #expect(await Self.next(raw, within: .seconds(5))?.0 == Data("raw".utf8))
        try await waitUntil("every completion called", timeout: .seconds(30)) { outcomes.snapshot.count == 203 }
        let calls = outcomes.snapshot
        #expect(calls.values.allSatisfy { $0.count == 1 }, "each completion exactly once")
        #expect((0...200).allSatisfy { calls[$0] == [nil] }, "delivered sends complete with nil")
        #expect(calls[201] == ["\(MessengerError.tooLarge(size: 256 * 1024 + 1, limit: 256 * 1024))"])
        #expect(calls[202]?.first??.contains("(not reachable: not sent)") == true, "\(String(describing: calls[202]))")
    }

    /// The first `count` elements of `stream`, or those that came within `timeout`.
    static func collect<Messages: AsyncSequence & Sendable>(
        _ stream: Messages, count: Int, within timeout: Duration
    ) async -> [Messages.Element] where Messages.Element: Sendable {
        await withTaskGroup(of: [Messages.Element]?.self) { group in
            group.addTask {
                var elements: [Messages.Element] = []
                do {
                    for try await element in stream {
                        elements.append(element)
                        if elements.count == count { break }
                    }
                } catch {}
                return elements
            }
            group.addTask {
                try? await Task.sleep(for: timeout); return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            if let first { return first }
            // Timed out: what the collector had when it was cancelled.
            let partial = await group.next() ?? nil
            return partial ?? []
        }
    }

    @Test("a participant's id is a UUID of the node id's 16 bytes: both convert without loss")
    func participantUUID() async throws {
        let sessions = try await Self.cluster(["hal", "ivy"])
        defer { Task { await Self.tearDown(sessions) } }
        let hal = await sessions[0].localParticipant
        #expect(hal.nodeID.count == 32)
        #expect(hal.id.nodeIDString == hal.nodeID)
        #expect(UUID(nodeID: hal.nodeID) == hal.id)
        #expect(hal.id.uuidString.lowercased().replacingOccurrences(of: "-", with: "") == hal.nodeID)
        #expect(UUID(nodeID: "not an id") == nil)
        // The id apps store finds the participant again, and addresses a message to it.
        let seenByIvy = await sessions[1].activeParticipants.first { $0.id == hal.id }
        #expect(seenByIvy == hal)
        let chats = await Messenger(session: sessions[0]).messages(of: Chat.self)
        try await Messenger(session: sessions[1]).send(Chat(text: "by uuid"), to: .only(try #require(seenByIvy)))
        let chat = await Self.next(chats, within: .seconds(5))
        let ivy = await sessions[1].localParticipant
        #expect(chat?.0 == Chat(text: "by uuid") && chat?.1.source.id == ivy.id)
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

    @Test("unreliable sends go without waiting for the node; every one that arrives is whole; none once left")
    func unreliableBurst() async throws {
        let sessions = try await Self.cluster(["ida", "jon"])
        defer { Task { await Self.tearDown(sessions) } }
        let ida = Messenger(session: sessions[0], deliveryMode: .unreliable)
        let received = await Messenger(session: sessions[1]).messages(of: Data.self)
        let jon = await sessions[1].localParticipant
        let count = 2_000
        for index in 0..<count {
            try await ida.send(
                Data(repeating: UInt8(truncatingIfNeeded: index), count: 1024) + Data([UInt8(index >> 8)]),
                to: .only([jon]))
        }
        // Unreliable: counted until a second passes without one; each must be a message sent.
        var seen = Set<Int>()
        while let (body, _) = await Self.next(received, within: .seconds(1)) {
            #expect(body.count == 1025)
            guard let low = body.first, let high = body.last else { continue }
            let index = Int(high) << 8 | Int(low)
            #expect(index < count && body.dropLast().allSatisfy { $0 == low })
            seen.insert(index)
        }
        #expect(!seen.isEmpty)
        await sessions[0].leave()
        await #expect(throws: MessengerError.notRunning) { try await ida.send(Data([1]), to: .only([jon])) }
        let reliable = Messenger(session: sessions[0])
        await #expect(throws: MessengerError.notRunning) { try await reliable.send(Data([1])) }
    }
}
