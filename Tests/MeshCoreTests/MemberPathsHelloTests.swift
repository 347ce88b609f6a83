import MeshCrypto
import Testing
@testable import MeshCore

/// Where a member is sent to before a pairwise datagram of its own proved an address: the
/// address its hello came from, when its own record gives it (PROTOCOL.md §1c, §1e).
@Suite struct MemberPathsHelloTests {
    static let peer = NodeID(high: 0, low: 1)
    static let relayed = PeerAddress(ipv4: [198, 51, 100, 10], port: 49_152)
    static let mapped = PeerAddress(ipv4: [198, 51, 100, 102], port: 40_001)
    static let start = MeshInstant.zero + .seconds(100)

    @Test func aHelloSetsTheAddressOnlyUntilAPairwiseDatagramProvesOne() {
        var paths = MemberPaths()
        do { let result = paths.helloFrom(Self.peer, boot: 1, at: Self.relayed, now: Self.start); #expect(result) }
        #expect(paths.address(of: Self.peer, boot: 1) == Self.relayed)
        #expect(paths.paths[Self.peer]?.lastHeard == Self.start, "heard now: the silence checks count from here")
        // Another hello of the same boot moves nothing: the first stands until proven or moved.
        do { let result = paths.helloFrom(Self.peer, boot: 1, at: Self.mapped, now: Self.start); #expect(!result) }
        // The member's first pairwise datagram moves it, whatever its number.
        do {
            let result = paths.heard(Self.peer, boot: 1, packet: 1, from: Self.mapped, now: Self.start); #expect(result)
        }
        #expect(paths.address(of: Self.peer, boot: 1) == Self.mapped)
        do {
            let result = paths.helloFrom(Self.peer, boot: 1, at: Self.relayed, now: Self.start);
            #expect(!result, "a proven address is not moved by a hello")
        }
        // A new boot is another member's path as far as addresses go.
        do { let result = paths.helloFrom(Self.peer, boot: 2, at: Self.relayed, now: Self.start); #expect(result) }
        #expect(paths.address(of: Self.peer, boot: 2) == Self.relayed)
    }
}
