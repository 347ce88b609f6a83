import Foundation
import MeshCrypto

/// What a node remembers across restarts (`DATA_DIR/members.json`): its own last incarnation,
/// so a restart outbids what the others remember of it, and where the members were, so it can
/// rejoin without an invite.
struct KnownMembers: Codable, Sendable, Equatable {
    struct Entry: Codable, Sendable, Equatable {
        var id: String
        var name: String
        var addresses: [String]
    }

    var incarnation: UInt64 = 0
    var members: [Entry] = []

    static func load(from directory: DataDirectory) -> KnownMembers {
        guard let text = try? directory.readSmallFile(directory.membersPath, limit: 4 << 20),
              let decoded = try? JSONDecoder().decode(KnownMembers.self, from: Data(text.utf8)) else {
            return KnownMembers()
        }
        return decoded
    }

    func save(to directory: DataDirectory) throws(GroupMeshError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard let data = try? encoder.encode(self) else { return }
        try directory.writeSmallFile(directory.membersPath, String(decoding: data, as: UTF8.self))
    }

    var addresses: [PeerAddress] {
        members.flatMap { $0.addresses.compactMap { try? PeerAddress(parsing: $0) } }
    }
}
