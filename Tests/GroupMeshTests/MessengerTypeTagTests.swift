@testable import GroupMesh
import Testing

@Suite("a Codable message's type tag does not depend on its module")
struct MessengerTypeTagTests {
    struct PenStroke: Codable, Sendable { var x: Double }
    struct Cursor: Codable, Sendable, MessengerTagged {
        static let messengerTag = "draw.cursor.v2"
        var x: Double
    }

    @Test("the type's own name (an app and a tool built as other modules agree); an explicit tag when given")
    func tags() {
        #expect(Messenger.typeTag(PenStroke.self) == "codable:PenStroke")
        #expect(!Messenger.typeTag(PenStroke.self).contains("GroupMeshTests"))
        #expect(Messenger.typeTag(Cursor.self) == "codable:draw.cursor.v2")
        #expect(Messenger.typeTag([PenStroke].self) == "codable:Array<PenStroke>")
    }
}
