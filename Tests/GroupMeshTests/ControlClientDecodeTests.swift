import Foundation
import Testing
@testable import GroupMesh

/// The CLI reading the node's answers: a node started from another version (its status lacks
/// fields added since) is told apart from bytes that are not an answer at all.
@Suite struct ControlClientDecodeTests {
    static func message(_ line: String) -> String? {
        do {
            _ = try ControlClient.decode(Data(line.utf8))
            return nil
        } catch {
            return error.description
        }
    }

    @Test func anAnswerFromAnotherVersionSaysSo() throws {
        // A status as a node of an older version might send it: valid JSON, fields missing.
        let older = #"{"ok":true,"status":{"self":{"id":"ab","name":"n"},"members":[]}}"#
        let text = try #require(Self.message(older))
        #expect(text.contains("another version"), "\(text)")
        #expect(!text.contains("\n"))
    }

    @Test func bytesThatAreNoAnswerAreMalformed() throws {
        let text = try #require(Self.message("{\"ok\": tru"))
        #expect(text.contains("malformed"), "\(text)")
    }

    @Test func realAnswersStillDecode() throws {
        #expect(
            try ControlClient.decode(Data(#"{"ok":false,"error":"no such attachment"}"#.utf8))
                == .failure("no such attachment"))
        #expect(try ControlClient.decode(Data(#"{"ok":true,"invite":"gm1x"}"#.utf8)) == .invite("gm1x"))
    }
}
