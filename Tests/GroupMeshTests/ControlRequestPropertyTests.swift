import Foundation
import GroupMesh
import MeshCore
import Testing

/// Random and mutated control-socket input through `ControlRequestReader` (what the node's
/// control connections use): no trap; one item per line whatever the reads' boundaries; real
/// requests come back equal; a line that never ends closes the connection.
/// Replay a failure with GROUPMESH_TEST_SEED=<seed printed in the failure>.
@Suite struct ControlRequestPropertyTests {
    static let seed = ProcessInfo.processInfo.environment["GROUPMESH_TEST_SEED"].flatMap { UInt64($0) } ?? 0xc0a7

    static func bytes(_ count: Int, using rng: inout SplitMix64) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }

    static func request(using rng: inout SplitMix64) -> ControlRequest {
        let path = "/tmp/x \u{1F600}\"\\"
        let id = String(rng.next(), radix: 16)
        switch rng.next() % 13 {
        case 0: return .status
        case 1: return .invite
        case 2: return .leave(now: rng.next() % 2 == 0)
        case 3:
            return .send(
                body: Self.bytes(Int(rng.next() % 40), using: &rng),
                to: rng.next() % 3 == 0 ? ["bob", "a1b2"] : [], unreliable: rng.next() % 2 == 0)
        case 4: return .listen
        case 5: return .attach(path: path, metadata: rng.next() % 2 == 0 ? "{\"a\": 1}" : nil)
        case 6: return .attachments
        case 7:
            return .get(
                attachment: id, path: path, mode: rng.next() % 2 == 0 ? nil : UInt32(rng.next() % 0o1000),
                replace: rng.next() % 2 == 0)
        case 8: return .remove(attachment: id)
        case 9: return .end
        case 10: return .ping(id)
        case 11: return .events(after: rng.next() % 2 == 0 ? nil : rng.next())
        default:
            return .removeMember(
                id, withIntroduced: rng.next() % 2 == 0, keep: rng.next() % 3 == 0 ? ["carol", id] : [],
                keepIntroduced: rng.next() % 4 == 0)
        }
    }

    static func line(_ request: ControlRequest) throws -> [UInt8] {
        Array(try JSONEncoder().encode(request)) + [UInt8(ascii: "\n")]
    }

    static func mutate(_ original: [UInt8], using rng: inout SplitMix64) -> [UInt8] {
        var bytes = original
        for _ in 0..<(1 + Int(rng.next() % 4)) where !bytes.isEmpty {
            let index = Int(rng.next() % UInt64(bytes.count))
            switch rng.next() % 4 {
            case 0: bytes[index] ^= UInt8(1) << UInt8(rng.next() % 8)
            case 1: bytes.remove(at: index)
            case 2: bytes.insert(contentsOf: Self.bytes(1 + Int(rng.next() % 8), using: &rng), at: index)
            default: bytes.removeLast(Int(rng.next() % UInt64(bytes.count + 1)))
            }
        }
        return bytes
    }

    /// Feeds `input` in random pieces.
    static func feedInPieces(_ input: [UInt8], using rng: inout SplitMix64) -> [ControlRequestReader.Item] {
        var reader = ControlRequestReader()
        var items: [ControlRequestReader.Item] = []
        var start = 0
        while start < input.count {
            let end = min(input.count, start + 1 + Int(rng.next() % 64))
            items += reader.feed(input[start..<end])
            start = end
        }
        return items
    }

    @Test("requests come back equal, one item per line, whatever the reads' boundaries; garbage is malformed")
    func randomAndMutatedRequests() throws {
        var rng = SplitMix64(seed: Self.seed)
        for round in 0..<2000 {
            let requests = (0..<(1 + Int(rng.next() % 4))).map { _ in Self.request(using: &rng) }
            var input = try requests.flatMap(Self.line)
            if round % 2 == 1 { input = Self.mutate(input, using: &rng) }
            if round % 7 == 0 { input = Self.bytes(Int(rng.next() % 300), using: &rng) }
            var whole = ControlRequestReader()
            let once = whole.feed(input)
            let pieces = Self.feedInPieces(input, using: &rng)
            #expect(once == pieces, "seed \(Self.seed) round \(round)")
            #expect(once.count == input.filter { $0 == UInt8(ascii: "\n") }.count, "seed \(Self.seed) round \(round)")
            if round % 2 == 0, round % 7 != 0 {
                #expect(once == requests.map(ControlRequestReader.Item.request), "seed \(Self.seed) round \(round)")
            }
        }
    }

    @Test("lines that are not requests are malformed; a line over 1 MiB closes the connection")
    func malformedAndOversized() {
        var reader = ControlRequestReader()
        let lines = [
            "", "{", "[]", "null", "{\"command\": \"fly\"}", "{\"command\": 7}", "\u{0}\u{0}",
            "{\"command\": \"status\"} x",
        ]
        let items = reader.feed(Array(lines.joined(separator: "\n").utf8) + [UInt8(ascii: "\n")])
        #expect(items == Array(repeating: .malformed, count: lines.count))
        #expect(reader.feed(Array("{\"command\":\"status\"}\n".utf8)) == [.request(.status)])
        var endless = ControlRequestReader()
        var last: [ControlRequestReader.Item] = []
        for _ in 0..<20 where !endless.isClosed { last = endless.feed([UInt8](repeating: 0x20, count: 64 * 1024)) }
        #expect(last == [.tooLong])
        #expect(endless.isClosed)
        #expect(endless.feed(Array("{\"command\":\"status\"}\n".utf8)).isEmpty)
    }
}
